"""Parallel lanes for `make test` (pytest-xdist, `-n N --dist loadgroup`).

The unit tests keep one lane to themselves and run in order, as in a serial run: they are
CPU-bound and some start process groups of their own. The e2e tests share the other lanes,
which mostly wait on the cluster's clocks (suspensions, leases, queues), and start while the
unit tests run. What the lanes share is made once and kept out of each other's way:

- **groups**: tests that use one session object (the happy-path job and the Prometheus that
  scrapes it; Kueue's queue and quota) run in one lane, in their usual order;
- **the operator release** is installed by the first lane that asks (`once`) and uninstalled by
  the controller after every lane is done (`finish`);
- **exclusive tests** (marked `exclusive`: they kill the operator or replace the CRD that every
  job depends on) run alone: every other e2e test holds the cluster lock shared for its whole
  run, setup and teardown included, an exclusive one holds it alone (`turn`).

Without xdist (`-n 0`, `make test-unit`, a single test) none of this applies.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

DIR_ENV = "GRAPPA_LANES_DIR"  # made by the controller, inherited by every lane
UNIT = "unit"
HAPPY_JOB = "happy-job"  # `happy` runs the job, `prom` scrapes it: one lane makes both


def in_lane() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", None))


def _dir() -> Path:
    return Path(os.environ[DIR_ENV])


def start(config: pytest.Config) -> None:
    """In the controller, before the lanes start: the folder they share (locks, made objects).
    SIGTERM (CI cancelling, the bed's teardown) unwinds like Ctrl-C, so `finish` still runs;
    the lanes do the same in tests/e2e/conftest.py."""
    if _is_controller(config):
        os.environ[DIR_ENV] = tempfile.mkdtemp(prefix="grappa-lanes-")
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def group(items: list[pytest.Item]) -> None:
    """xdist_group marks: the unit tests in one lane, the tests of one session object in one lane.
    A group a test file already names (test_kueue.py) is kept."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.xdist_group(UNIT))
        elif {"happy", "prom"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(HAPPY_JOB))


@contextmanager
def _locked(path: Path, how: int) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, how)  # released when the file closes, also if the lane dies
        yield


@contextmanager
def turn(item: pytest.Item) -> Iterator[None]:
    """An e2e test's hold on the cluster: shared, or alone for an `exclusive` test."""
    if not in_lane() or item.get_closest_marker("e2e") is None:
        yield
        return
    with cluster_hold(_dir(), alone=item.get_closest_marker("exclusive") is not None):
        yield


@contextmanager
def cluster_hold(folder: Path, alone: bool) -> Iterator[None]:
    """The cluster lock, with the exclusive holder first in line: flock alone would grant new
    shared holds while an exclusive one waits (the e2e tests keep coming, the exclusive test
    never runs). So every holder passes a gate first; an exclusive one keeps the gate while it
    waits for the shared holders to drain, and no new shared hold starts meanwhile."""
    with open(folder / "cluster.gate", "a") as gate, open(folder / "cluster.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:  # the locks go with the files, also if the lane dies
            fcntl.flock(lock, fcntl.LOCK_UN)


def once(key: str, make: Callable[[], dict[str, Any]], teardown: str) -> dict[str, Any]:
    """`make()` in the first lane that asks; the others get its (JSON) result. `teardown`,
    "module:function" importable from tests/e2e, is called with it by the controller at the end."""
    state = _dir() / f"{key}.json"
    with _locked(_dir() / f"{key}.lock", fcntl.LOCK_EX):
        if state.exists():
            return json.loads(state.read_text())["value"]
        value = make()
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"value": value, "teardown": teardown}))
        tmp.rename(state)
        return value


def finish(config: pytest.Config) -> None:
    """In the controller, once every lane is done: tear down what `once` made, then the folder."""
    if not _is_controller(config) or DIR_ENV not in os.environ:
        return
    folder = _dir()
    e2e = str(Path(__file__).resolve().parent / "e2e")  # where the teardowns live
    if e2e not in sys.path:
        sys.path.insert(0, e2e)
    try:
        for state in sorted(folder.glob("*.json")):
            made = json.loads(state.read_text())
            module, function = made["teardown"].split(":")
            getattr(importlib.import_module(module), function)(made["value"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
