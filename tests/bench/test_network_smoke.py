"""Smoke version of bench/network.py: real processes, throttled namespaces when permitted.

Asserts bytes only (never time): Grappa's training traffic is exactly the gradient-only floor, and
the full-communication baseline moves the same gradients plus fetched rows."""
import subprocess

import pytest

from bench_modules import load


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    network = load("network")
    return network, network.smoke(tmp_path_factory.mktemp("net"))


def test_grappa_bytes_equal_the_floor(smoke):
    network, res = smoke
    g = res["grappa"]
    assert g["fetch_bytes_per_worker_epoch"] == 0
    # full-graph: one step per epoch; GCN has no float buffers; P = 2
    assert g["train_bytes_per_worker_epoch"] == network.floor_bytes(g["parameters"], 0, 2)


def test_full_baseline_moves_more(smoke):
    _, res = smoke
    g, f = res["grappa"], res["full"]
    assert f["train_bytes_per_worker_epoch"] == g["train_bytes_per_worker_epoch"]
    assert f["fetch_bytes_per_worker_epoch"] > 0
    assert f["bytes_per_worker_epoch"] > g["bytes_per_worker_epoch"]


def test_namespaces_are_torn_down(smoke):
    netns = load("netns")
    _, res = smoke
    if not res["shaped"]:
        pytest.skip("namespaces not permitted here; the smoke ran on loopback")
    assert [ns for ns in netns.leftovers() if ns.startswith(res["tag"])] == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert res["tag"] not in links
