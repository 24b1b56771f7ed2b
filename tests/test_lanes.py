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
from types import SimpleNamespace

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


UNIT_B = """
import json, os, time
from pathlib import Path
import pytest

@pytest.mark.parametrize("i", range(3))
def test_unit_b(i):
    start = time.monotonic()
    time.sleep(0.4)
    with open(Path(os.environ["LANES_LOG"]) / "runs.jsonl", "a") as f:
        f.write(json.dumps({"name": f"unitb{i}", "lane": os.environ["PYTEST_XDIST_WORKER"],
                            "start": start, "end": time.monotonic()}) + "\\n")
"""


@pytest.mark.parametrize("unit_lanes", [1, 2])
def test_three_lanes_keep_units_together_run_exclusive_alone_and_make_once(tmp_path: Path, unit_lanes: int) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (suite / "test_units_b.py").write_text(textwrap.dedent(UNIT_B))
    (suite / "teardown_thing.py").write_text(TEARDOWN)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: e2e\n    exclusive: alone\n")
    log = tmp_path / "log"
    log.mkdir()
    # Not the lanes this test may itself run in: a fresh controller with its own folder.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "GRAPPA_LANES", "GRAPPA_UNIT_LANES", "GRAPPA_E2E",
                                 "GRAPPA_TOOLS", "GRAPPA_S3", "GRAPPA_PHASES"))}  # not the bed's
    env["LANES_LOG"] = str(log)
    env["GRAPPA_UNIT_LANES"] = str(unit_lanes)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3",
                           "--dist", "loadgroup", str(suite)], cwd=suite, env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in (log / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 14, runs

    a_lanes = {r["lane"] for r in runs if r["name"].startswith("unit") and not r["name"].startswith("unitb")}
    b_lanes = {r["lane"] for r in runs if r["name"].startswith("unitb")}
    assert len(a_lanes) == 1 and len(b_lanes) == 1, runs  # a file's tests stay in one lane
    assert (a_lanes == b_lanes) == (unit_lanes == 1), runs
    e2e = [r for r in runs if not r["name"].startswith("unit")]
    assert len({r["lane"] for r in e2e}) >= 2, f"the e2e tests never shared the lanes: {runs}"
    alone = next(r for r in e2e if r["name"] == "alone")
    overlapping = [r["name"] for r in e2e
                   if r is not alone and r["start"] < alone["end"] and alone["start"] < r["end"]]
    assert not overlapping, f"ran beside the exclusive test: {overlapping}"

    assert len((log / "made.log").read_text().splitlines()) == 1
    assert [json.loads(line) for line in (log / "removed.log").read_text().splitlines()] == [{"id": 7}]


def test_unit_files_go_longest_first_to_the_lightest_lane() -> None:
    """Whole files, never split; recorded seconds where known, UNLISTED_SECONDS a test where not."""
    sys.path.insert(0, str(TESTS))
    import lanes

    def tests(path: str, n: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(nodeid=f"{path}::test_{i}") for i in range(n)]

    items = tests("a.py", 3) + tests("b.py", 1) + tests("c.py", 2) + tests("d.py", 5) + tests("new.py", 4)
    weights = {"a.py": 300.0, "b.py": 200.0, "c.py": 150.0, "d.py": 40.0}
    lane_of = lanes.unit_lanes(items, 2, weights)
    # a 300 -> unit; b 200 -> unit-2; c 150 -> unit-2 (350); d 40 -> unit (340); new 4 x 2 s -> unit (348)
    assert lane_of == {"a.py": "unit", "b.py": "unit-2", "c.py": "unit-2", "d.py": "unit", "new.py": "unit"}
    assert set(lanes.unit_lanes(items, 1, weights).values()) == {"unit"}
    assert set(lanes.unit_lanes(items, 0, {}).values()) == {"unit"}


def test_unit_tests_go_out_first_and_the_kueue_tests_last() -> None:
    """The order the lanes take groups in (reordering by size is off): a lane that took the
    Kueue tests early would sit idle while a fresh machine still builds Kueue; the e2e tests that
    run SeaweedFS come after them (weed is built after Kueue's manager)."""
    sys.path.insert(0, str(TESTS))
    import lanes

    def item(name: str, e2e: bool = False, group: str | None = None, fixtures: tuple = (),
             seaweedfs: bool = False) -> SimpleNamespace:
        marks = {"e2e": e2e, "seaweedfs": seaweedfs}
        return SimpleNamespace(name=name, path=Path(f"{name}.py"), fixturenames=fixtures,
                               get_closest_marker=lambda m: True if marks.get(m) else None,
                               iter_markers=lambda m: [SimpleNamespace(args=(group,))] if group and m == "xdist_group" else [])

    items = [item("s3-job", e2e=True, seaweedfs=True), item("kueue", e2e=True, group="kueue"), item("late"),
             item("single", e2e=True), item("happy", e2e=True, fixtures=("happy",)), item("unit"),
             item("prom", e2e=True, fixtures=("prom",))]
    ordered = sorted(items, key=lambda i: lanes.order(i, ("late.py",)))
    assert [i.name for i in ordered] == ["unit", "late", "happy", "prom", "single", "kueue", "s3-job"]


def test_recorded_weights_are_seconds_per_unit_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(TESTS))
    import lanes

    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.test_lanes" name="a" time="1.5"/>'
                     '<testcase classname="tests.test_lanes" name="b" time="2.0"/>'
                     '<testcase classname="tests.trainer.test_rounds.TestRounds" name="c" time="4.25"/>'
                     '<testcase classname="tests.e2e.test_grappajob" name="d" time="99"/>'
                     '</testsuite></testsuites>')
    monkeypatch.setattr(lanes, "WEIGHTS", tmp_path / "weights.json")
    assert lanes.record_weights(str(junit)) == {"tests/test_lanes.py": 3.5, "tests/trainer/test_rounds.py": 4.2}
    assert json.loads((tmp_path / "weights.json").read_text()) == {"tests/test_lanes.py": 3.5,
                                                                   "tests/trainer/test_rounds.py": 4.2}


def test_recorded_weights_are_cpu_seconds_where_the_xml_has_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(TESTS))
    import cpu_use
    import lanes

    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.test_lanes" name="a" time="30">'
                     '<properties><property name="cpu" value="1.25"/></properties></testcase>'
                     '<testcase classname="tests.test_lanes" name="b" time="2.0"/>'
                     '<testcase classname="tests.e2e.test_grappajob" name="d" time="99">'
                     '<properties><property name="cpu" value="7"/></properties></testcase>'
                     '</testsuite></testsuites>')
    monkeypatch.setattr(lanes, "WEIGHTS", tmp_path / "weights.json")
    assert lanes.record_weights(str(junit)) == {"tests/test_lanes.py": 3.2}  # 1.25 CPU + 2.0 wall (no property)
    text = cpu_use.report(str(junit), 5)
    assert "CPU seconds of 2 tests: 8 in all" in text and "7.0  tests.e2e.test_grappajob::d" in text, text


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
