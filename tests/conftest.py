"""Shared pytest fixtures, and the hooks of the parallel lanes (lanes.py)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import cpu_use
import kind_bed
import lanes
import processes

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


@pytest.fixture(autouse=True)
def no_process_left_behind(request: pytest.FixtureRequest):
    """A unit test that starts processes ends them, passed or failed: whatever it started is
    still running 10 s after it ended is killed, and the test errors naming it. (E2E tests keep
    session-wide helpers such as Prometheus and end them with the session.)"""
    if request.node.get_closest_marker("e2e") is not None:
        yield
        return
    before = processes.descendants(os.getpid())
    yield
    left = processes.end_new(before)
    if left:
        pytest.fail("the test left processes running (killed now): "
                    + "; ".join(f"{pid}: {cmd[:200]}" for pid, cmd in sorted(left.items())), pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    # registered here, not in pyproject.toml: the images' dependency layers are keyed on
    # pyproject.toml, and a marker's line would rebuild them (minutes of the test loop)
    config.addinivalue_line("markers", "seaweedfs: e2e tests that run the bed's SeaweedFS in the cluster: "
                            "they wait for $GRAPPA_S3_READY, last among the e2e tests")
    lanes.start(config)
    if lanes.in_lane():
        # One OpenMP thread a lane (before any test imports torch; jobs the tests start set their
        # own): with several lanes and the bed's build on two cores, torch's threads spin-wait for
        # siblings that are not running (the P = 4 in-process comparison took 801 s cold, ~100 s
        # alone on the machine).
        os.environ.setdefault("OMP_NUM_THREADS", "1")


# Unit tests that run a tool `make test` builds after the unit tests start (helm, then kube-score,
# built after the cluster's binaries on a cold machine): last in the unit lane, so little waits.
LATE = ("test_op_helm.py", "test_op_monitoring.py", "test_manifests.py", "test_images.py", "test_op_kube_score.py")
# Unit tests that run SeaweedFS's S3 gateway (tests/s3_server.py), the bed's last Go build (after
# Kueue's manager): after the LATE ones, and they wait for it ($GRAPPA_S3_READY) like those for helm.
# So do the e2e tests marked `seaweedfs` (weed in a pod, from the node's mount), last of the e2e ones.
# A file is one of them by name, or by a test that uses the server's fixture (s3_server.py), so a
# new S3 test file cannot miss the wait (cold 26: test_s3_run_home.py's fixture waited inside its
# 900 s timeout and failed, weed being ready only at 2,169 s).
S3_LATE = ("test_s3_store.py", "test_seaweedfs.py")
S3_FIXTURE = "s3_server"


def runs_weed(item: pytest.Item) -> bool:
    return item.path.name in S3_LATE or S3_FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    s3_files = tuple(sorted({item.path.name for item in items if runs_weed(item)} | set(S3_LATE)))
    # stable: the usual order otherwise
    items.sort(key=lambda item: (*lanes.order(item, LATE + s3_files), item.path.name in s3_files))
    if lanes.in_lane():
        lanes.group(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    lanes.ran(item)
    item.stash[_CPU_AT_START] = cpu_use.now()
    # Outside pytest-timeout's timer (this wrapper is outermost): what the bed still builds is
    # waited for here, not in a fixture that the test's timeout would cut short.
    if item.path.name in LATE or item.get_closest_marker("e2e") is not None:
        kind_bed.wait_for(kind_bed.TOOLS, "helm")
    if runs_weed(item) or item.get_closest_marker("seaweedfs") is not None:
        kind_bed.wait_for(kind_bed.S3, "SeaweedFS (the S3 tests' server)")
    if item.get_closest_marker("e2e") is not None:
        kind_bed.wait_for(kind_bed.CLUSTER, "cluster")
        if any(m.args[:1] == ("kueue",) for m in item.iter_markers("xdist_group")):
            kind_bed.wait_for(kind_bed.KUEUE, "Kueue")
    with lanes.turn(item):
        return (yield)


_CPU_AT_START = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    # the teardown's report is the last made from the item: its CPU from setup to here rides on it
    if call.when == "teardown" and _CPU_AT_START in item.stash:
        item.user_properties.append((cpu_use.PROPERTY, round(cpu_use.now() - item.stash[_CPU_AT_START], 2)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    lanes.finish(session.config)
    lanes.record_end(session)
