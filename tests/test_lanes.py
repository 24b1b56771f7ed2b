"""tests/lanes.py: a small suite run in three lanes by a nested pytest, with this repository's
tests/conftest.py hooks, shows what `make test` relies on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("xdist")

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("grappa_tests_conftest", {str(TESTS / "conftest.py")!r})
ours = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ours)
pytest_configure = ours.pytest_configure
pytest_collection_modifyitems = ours.pytest_collection_modifyitems
pytest_runtest_protocol = ours.pytest_runtest_protocol
pytest_sessionfinish = ours.pytest_sessionfinish
"""

SUITE = """
import json, os, time
from pathlib import Path
import pytest
import lanes

LOG = Path(os.environ["LANES_LOG"])

def record(name):
    start = time.monotonic()
    time.sleep(0.4)
    with open(LOG / "runs.jsonl", "a") as f:
        f.write(json.dumps({"name": name, "lane": os.environ["PYTEST_XDIST_WORKER"],
                            "start": start, "end": time.monotonic()}) + "\\n")

def make():
    with open(LOG / "made.log", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    return {"id": 7}

# First, so that it is dispatched beside the other e2e tests, not after them.
@pytest.mark.e2e
@pytest.mark.exclusive
def test_alone():
    record("alone")

@pytest.mark.parametrize("i", range(4))
def test_unit(i):
    record(f"unit{i}")

@pytest.mark.e2e
@pytest.mark.parametrize("i", range(6))
def test_cluster(i):
    assert lanes.once("thing", make, teardown="teardown_thing:remove") == {"id": 7}
    record(f"e2e{i}")
"""

TEARDOWN = """
import json, os
from pathlib import Path

def remove(made):
    with open(Path(os.environ["LANES_LOG"]) / "removed.log", "a") as f:
        f.write(json.dumps(made) + "\\n")
"""


def test_three_lanes_keep_units_together_run_exclusive_alone_and_make_once(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (suite / "teardown_thing.py").write_text(TEARDOWN)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: e2e\n    exclusive: alone\n")
    log = tmp_path / "log"
    log.mkdir()
    # Not the lanes this test may itself run in: a fresh controller with its own folder.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "GRAPPA_LANES", "GRAPPA_E2E", "GRAPPA_TOOLS"))}  # not the bed's
    env["LANES_LOG"] = str(log)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3",
                           "--dist", "loadgroup", str(suite)], cwd=suite, env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in (log / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 11, runs

    unit_lanes = {r["lane"] for r in runs if r["name"].startswith("unit")}
    assert len(unit_lanes) == 1, runs
    e2e = [r for r in runs if not r["name"].startswith("unit")]
    assert len({r["lane"] for r in e2e}) >= 2, f"the e2e tests never shared the lanes: {runs}"
    alone = next(r for r in e2e if r["name"] == "alone")
    overlapping = [r["name"] for r in e2e
                   if r is not alone and r["start"] < alone["end"] and alone["start"] < r["end"]]
    assert not overlapping, f"ran beside the exclusive test: {overlapping}"

    assert len((log / "made.log").read_text().splitlines()) == 1
    assert [json.loads(line) for line in (log / "removed.log").read_text().splitlines()] == [{"id": 7}]


def _waiting_on(path: Path) -> int:
    """flock requests blocked on `path` (/proc/locks lists a waiter as `N: -> FLOCK ...`)."""
    if not path.exists():
        return 0
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def test_a_waiting_exclusive_hold_goes_before_later_shared_ones(tmp_path: Path) -> None:
    """With a shared hold running and an exclusive one waiting, a new shared hold waits too: the
    exclusive test is not starved by the e2e tests that keep starting."""
    sys.path.insert(0, str(TESTS))
    import lanes

    events: list[str] = []
    first_in, let_first_go = threading.Event(), threading.Event()

    def shared(name: str, hold: bool = False) -> None:
        with lanes.cluster_hold(tmp_path, alone=False):
            events.append(f"{name} in")
            if hold:
                first_in.set()
                let_first_go.wait(30)
            events.append(f"{name} out")

    def exclusive() -> None:
        with lanes.cluster_hold(tmp_path, alone=True):
            events.append("exclusive in")
            events.append("exclusive out")

    first = threading.Thread(target=shared, args=("first", True))
    first.start()
    assert first_in.wait(30)
    alone = threading.Thread(target=exclusive)
    alone.start()
    deadline = time.monotonic() + 30  # a hang guard: the waits below are conditions
    while _waiting_on(tmp_path / "cluster.lock") < 1:  # the exclusive hold is queued on the lock
        assert time.monotonic() < deadline, "the exclusive hold never waited on the lock"
        time.sleep(0.01)
    late = threading.Thread(target=shared, args=("late",))
    late.start()
    while _waiting_on(tmp_path / "cluster.gate") < 1:  # ... and the late shared one at the gate
        assert "late in" not in events, f"a shared hold went ahead of the waiting exclusive one: {events}"
        assert time.monotonic() < deadline, "the late shared hold never waited"
        time.sleep(0.01)
    let_first_go.set()
    for t in (first, alone, late):
        t.join(30)
    assert events.index("exclusive out") < events.index("late in"), events
