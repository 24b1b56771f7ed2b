"""reap_stale() removes networks of killed runs and leaves live ones alone."""
import os
import subprocess

import pytest

from bench_modules import load


@pytest.fixture(scope="module")
def netns():
    return load("netns")


def links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout


def test_reaps_dead_runs_only(netns):
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        # the live one first: the stale one (a dead pid's) is reaped by any reaper once made, this
        # test's own below or another lane's, so it is made last, right before this test's reap
        live = netns.ThrottledNetwork(2, None).__enter__()
    except (netns.NetnsUnavailable, FileNotFoundError) as err:
        pytest.skip(f"namespaces not permitted here: {err}")
    try:
        stale = netns.ThrottledNetwork(2, "100mbit", tag=f"gr{dead.pid}").__enter__()
    except BaseException:
        live.close()
        raise
    try:
        gone = netns.reap_stale()
        # Only this test's dead run is known: a run killed before this one may have left its own
        # network too, which is reaped as well (CI once found a `gr<pid>-r0` of such a run).
        assert sorted(n for n in gone if n.startswith(stale.tag + "-")) == [f"{stale.tag}-r0", f"{stale.tag}-r1"]
        owners = {int(netns._OWNED.match(n).group(1)) for n in gone}
        assert os.getpid() not in owners and not any(netns._alive(pid) for pid in owners)
        assert not [ns for ns in netns.leftovers() if ns.startswith(stale.tag + "-")]
        assert f"{stale.tag}br" not in links()
        assert sorted(ns for ns in netns.leftovers() if ns.startswith(live.tag + "-")) == \
            [f"{live.tag}-r0", f"{live.tag}-r1"]
    finally:
        stale.close()
        live.close()
    assert live.tag not in links()
