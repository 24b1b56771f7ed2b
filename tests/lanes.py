"""Parallel lanes for `make test` (pytest-xdist, `-n N --dist loadgroup`).

The unit tests run in `$GRAPPA_UNIT_LANES` lanes (default 1) of their own, each a fixed set of
whole test files in their usual order (a module's fixtures stay in one process): the files are
dealt out by their recorded weight (tests/unit_weights.json, CPU seconds per file; `python
tests/lanes.py weights <junit.xml>` records it anew), heaviest first, each to the lightest lane
so far, so the lanes end together. The e2e tests share the other lanes, which mostly wait on
the cluster's clocks (suspensions, leases, queues), and start while the unit tests run; a unit
lane that is done takes e2e tests too. What the lanes share is made once and kept out of each
other's way:

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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

DIR_ENV = "GRAPPA_LANES_DIR"  # made by the controller, inherited by every lane
UNIT = "unit"
UNIT_LANES_ENV = "GRAPPA_UNIT_LANES"
WEIGHTS = Path(__file__).with_name("unit_weights.json")
UNLISTED_SECONDS = 2.0  # per test, for a file the weights do not list yet
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
        # Groups go out in the order `order` gives, not largest first: a lane that took the
        # Kueue tests first would wait idle for Kueue, built last on a fresh machine.
        config.option.loadscopereorder = False


def order(item: pytest.Item, late: tuple[str, ...]) -> tuple[int, bool]:
    """The collection's order for the lanes (a stable sort: a file's own order otherwise): the
    unit tests first (they start the unit lanes), the tests that wait on a tool the bed builds
    late (`late` files) last among them; then the happy-path job's group (the longest), the other
    e2e tests, and those that need the bed's last products: the Kueue tests, then the ones that
    run SeaweedFS in the cluster (marked `seaweedfs`; its weed is the bed's last Go build)."""
    if item.get_closest_marker("e2e") is None:
        return 0, item.path.name in late
    if item.get_closest_marker("seaweedfs") is not None:
        return 3, True
    if any(m.args[:1] == ("kueue",) for m in item.iter_markers("xdist_group")):
        return 3, False
    return (1 if {"happy", "prom"} & set(getattr(item, "fixturenames", ())) else 2), False


def group(items: list[pytest.Item]) -> None:
    """xdist_group marks: the unit tests in their lanes by file, the tests of one session object
    in one lane. A group a test file already names (test_kueue.py) is kept."""
    units = [item for item in items if item.get_closest_marker("e2e") is None
             and not item.get_closest_marker("xdist_group")]
    lane_of = unit_lanes(units, int(os.environ.get(UNIT_LANES_ENV) or 1), _weights())
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.xdist_group(lane_of[_file(item)]))
        elif {"happy", "prom"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(HAPPY_JOB))


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _weights() -> dict[str, float]:
    return json.loads(WEIGHTS.read_text()) if WEIGHTS.exists() else {}


def unit_lanes(units: list[pytest.Item], lanes: int, weights: dict[str, float]) -> dict[str, str]:
    """Test file -> its unit lane's group (`unit`, `unit-2`, ...): longest first, each file to
    the lane with the least so far (a file's weight: its recorded seconds, or UNLISTED_SECONDS
    a test)."""
    counts: dict[str, int] = {}
    for item in units:
        counts[_file(item)] = counts.get(_file(item), 0) + 1
    names = [UNIT] + [f"{UNIT}-{i}" for i in range(2, max(lanes, 1) + 1)]
    load = dict.fromkeys(names, 0.0)
    lane_of = {}
    for path in sorted(counts, key=lambda f: (-weights.get(f, UNLISTED_SECONDS * counts[f]), f)):
        lightest = min(names, key=lambda n: (load[n], names.index(n)))
        lane_of[path] = lightest
        load[lightest] += weights.get(path, UNLISTED_SECONDS * counts[path])
    return lane_of


def record_weights(junit_xml: str) -> dict[str, float]:
    """Seconds per unit test file from a run's JUnit XML (`pytest --junitxml`), written to
    WEIGHTS; e2e files, which do not run in the unit lanes, are left out. A test's CPU seconds
    (tests/cpu_use.py) where the XML has them: on a busy machine its wall time says more about
    the lanes beside it than about the test."""
    import xml.etree.ElementTree as ET

    import cpu_use
    root = Path(__file__).resolve().parents[1]
    cpu = cpu_use.of_cases(junit_xml)
    seconds: dict[str, float] = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.trainer.test_x[.TestClass]
        path = next((p for i in range(len(parts), 0, -1)
                     if (root / (p := "/".join(parts[:i]) + ".py")).is_file()), "")
        if path.startswith("tests/") and not path.startswith("tests/e2e/"):
            spent = cpu.get((case.get("classname", ""), case.get("name", "")), float(case.get("time", 0)))
            seconds[path] = seconds.get(path, 0.0) + spent
    weights = {path: round(s, 1) for path, s in sorted(seconds.items())}
    WEIGHTS.write_text(json.dumps(weights, indent=1) + "\n")
    return weights


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


def record_end(session: pytest.Session) -> None:
    """In a lane of `make test`: when it ended, as a phase of hack/test.sh's timeline (lane-gw0,
    lane-gw1, ...), so the run shows which lane held it up. The lane's groups name it (unit,
    unit-2: the unit lanes)."""
    phases, t0 = os.environ.get("GRAPPA_PHASES"), os.environ.get("GRAPPA_T0")
    if not (in_lane() and phases and t0):
        return
    groups = sorted(_ran.get("groups", ()))
    start, now = int(_ran.get("start", time.time())) - int(t0), int(time.time()) - int(t0)
    name = f"lane-{os.environ['PYTEST_XDIST_WORKER']}" + (f"({'+'.join(groups)})" if groups else "")
    with open(phases, "a") as f:
        f.write(f"{name} {start} {now - start} ok\n")


_ran: dict[str, Any] = {}


def ran(item: pytest.Item) -> None:
    """Called as each test starts in a lane: the lane's first start and the groups it ran."""
    _ran.setdefault("start", time.time())
    _ran.setdefault("groups", set()).update([m.args[0] for m in item.iter_markers("xdist_group") if m.args]
                                            or ["e2e"])


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


if __name__ == "__main__":  # python tests/lanes.py weights <junit.xml>
    if sys.argv[1:2] != ["weights"] or len(sys.argv) != 3:
        sys.exit("usage: python tests/lanes.py weights <junit.xml from `pytest --junitxml`>")
    print(f"{WEIGHTS}: {len(record_weights(sys.argv[2]))} unit test files")
