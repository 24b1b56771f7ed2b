"""Session fixtures of the end-to-end suite (see docs/testing.md).

`cluster` is whatever cluster $KUBECONFIG points at, with GRAPPA_E2E_USE_KUBECONFIG=1: `make test`
builds the offline kind bed (hack/kind/bed.sh) and sets both; hack/kind-e2e.sh does the same on a
machine with kind and internet; any other cluster works with the images loaded or pullable.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kind_bed  # noqa: E402
from cluster import Cluster  # noqa: E402

NO_CLUSTER = ("the e2e tests need a cluster: run `make test` (builds the offline kind bed, "
              "hack/kind/README.md), or hack/kind-e2e.sh on a machine with kind, or point KUBECONFIG at a "
              "cluster and set GRAPPA_E2E_USE_KUBECONFIG=1; for the unit tests only: make test-unit "
              "(pytest -m 'not e2e')")


def _use_existing() -> bool:
    return os.environ.get("GRAPPA_E2E_USE_KUBECONFIG") == "1" and bool(os.environ.get("KUBECONFIG"))


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (CI cancelling, the bed's teardown) unwinds like Ctrl-C, so session finalisers run:
    # releases are uninstalled and Prometheus is stopped instead of orphaned.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


@pytest.hookimpl(trylast=True)  # after `-m` / `-k` deselection: only e2e tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _use_existing() and any(item.get_closest_marker("e2e") for item in items):
        raise pytest.UsageError(NO_CLUSTER)
    # e2e tests last (stable otherwise): on the bed the cluster comes up while the others run.
    # Exclusive ones after them: in lanes they wait for every other e2e test (tests/lanes.py).
    items.sort(key=lambda item: (item.get_closest_marker("e2e") is not None,
                                 item.get_closest_marker("exclusive") is not None))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    kind_bed.require(kind_bed.CLUSTER, "cluster")  # tests/conftest.py waited, unless run alone
    yield Cluster.from_environment()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


# The operator release and the happy-path job are shared by several test modules.
import helpers as h  # noqa: E402


@pytest.fixture(scope="session")
def release(cluster: Cluster, request: pytest.FixtureRequest) -> h.Release:
    return h.operator_release(cluster, request)


@pytest.fixture(scope="session")
def happy(cluster: Cluster, release: h.Release, request: pytest.FixtureRequest) -> h.JobRun:
    return h.happy_job(cluster, release, request)
