"""reap_stale() removes networks of killed runs and leaves live ones alone."""
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
        stale = netns.ThrottledNetwork(2, "100mbit", tag=f"gr{dead.pid}").__enter__()
        live = netns.ThrottledNetwork(2, None).__enter__()
    except (netns.NetnsUnavailable, FileNotFoundError) as err:
        pytest.skip(f"namespaces not permitted here: {err}")
    try:
        gone = netns.reap_stale()
        assert sorted(n for n in gone if n.endswith(("-r0", "-r1"))) == [f"{stale.tag}-r0", f"{stale.tag}-r1"]
        assert not [ns for ns in netns.leftovers() if ns.startswith(stale.tag + "-")]
        assert f"{stale.tag}br" not in links()
        assert sorted(ns for ns in netns.leftovers() if ns.startswith(live.tag + "-")) == \
            [f"{live.tag}-r0", f"{live.tag}-r1"]
    finally:
        stale.close()
        live.close()
    assert live.tag not in links()
