"""Shared pytest fixtures, and the hooks of the parallel lanes (lanes.py)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import lanes

SHARED_DATASETS = Path(
    os.environ.get("GRAPPA_SHARED_DATASETS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "datasets")


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory):
    """A scratch copy of shared/datasets, exported as $GRAPPA_DATA_ROOT for the session.
    PyG writes processed/ next to raw/, so shared/ is never used in place."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"no offline datasets at {SHARED_DATASETS} (set GRAPPA_SHARED_DATASETS)")
    root = tmp_path_factory.mktemp("datasets")
    shutil.copytree(SHARED_DATASETS, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("processed"))
    for d in [root, *root.rglob("*")]:  # the source is read-only; PyG must write processed/
        d.chmod(0o755 if d.is_dir() else 0o644)
    old = os.environ.get("GRAPPA_DATA_ROOT")
    os.environ["GRAPPA_DATA_ROOT"] = str(root)
    yield root
    if old is None:
        os.environ.pop("GRAPPA_DATA_ROOT", None)
    else:
        os.environ["GRAPPA_DATA_ROOT"] = old


def pytest_configure(config: pytest.Config) -> None:
    lanes.start(config)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if lanes.in_lane():
        lanes.group(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with lanes.turn(item):
        return (yield)


def pytest_sessionfinish(session: pytest.Session) -> None:
    lanes.finish(session.config)
