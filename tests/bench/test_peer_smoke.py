"""Smoke test of the DistDGL peer runner (bench/peer.py): P = 2, a 2,000-node graph, Grappa and
DistDGL as real processes in throttled namespaces, each machine's bytes and CPU from the probe.
Skipped only where the peer's environment cannot be built (hack/peer-env.sh says why) or network
namespaces are not permitted. Asserts bytes, accuracy and teardown, never time."""
import subprocess
from pathlib import Path

import psutil
import pytest

from bench_modules import load


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    job = load("distdgl_job")
    try:
        job.peer_python()
    except job.PeerUnavailable as err:
        pytest.skip(f"the DistDGL peer environment cannot be built here: {err}")
    netns = load("netns")
    try:
        netns.ThrottledNetwork(1, None).__enter__().close()
    except (netns.NetnsUnavailable, FileNotFoundError) as err:
        pytest.skip(f"network namespaces are not permitted here: {err}")
    peer = load("peer")
    return peer.smoke(tmp_path_factory.mktemp("peer"))


def test_both_systems_train_the_same_model_settings(smoke):
    g, d = smoke["grappa"], smoke["distdgl"]
    assert g["fanouts"] == d["fanouts"] == [25, 10] and g["batch_size"] == d["batch_size"]
    for rec in (g, d):
        assert [c["epoch"] for c in rec["curve"]] == [1, 2]
        assert all(0.0 <= c["test_acc"] <= 1.0 for c in rec["curve"])
        assert all(e["steps"] >= 1 for e in rec["epochs"])
    # the same split on both sides: DGL's partitions and node_split gave its trainers exactly the
    # train nodes of the graph Grappa loaded, none lost or duplicated
    assert d["dgl_train_nodes"] == g["train_nodes"] > 0


def test_grappa_payload_is_the_all_reduce_and_the_kernel_counts_it(smoke):
    g = smoke["grappa"]
    network = load("network")
    steps = sum(e["steps"] for e in g["epochs"])
    per_rank = network.step_bytes(g["parameters"], 0, 2)  # SAGE has no float buffers; P = 2
    assert g["ours_worker_bytes_total"] == [steps * b for b in per_rank[1:]]
    # Every machine's kernel counters, the aggregator's included (a ring member now), saw at least
    # its share of the all-reduce
    for machine, payload in zip(g["job_machines"], [steps * b for b in per_rank]):
        assert machine["sent_bytes"] + machine["received_bytes"] > payload
    # and the aggregator's saw no more than everything its counters hold (steps, evaluation rows,
    # commands) plus TCP/IP headers and a fixed allowance for what precedes the first epoch
    # (connections, rendezvous, the replica sync) and the heartbeats: no hidden second copy
    agg = g["job_machines"][0]
    assert agg["sent_bytes"] + agg["received_bytes"] < 1.15 * g["ours_aggregator_bytes_total"] + 2**20


def test_probe_attributes_cpu_and_bytes_to_every_machine(smoke):
    for rec in smoke.values():
        for m in rec["job_machines"]:
            assert m["cpu_seconds"] > 0 and m["sent_bytes"] > 0 and m["received_bytes"] > 0
    d = smoke["distdgl"]
    # the trainers' own reads of their namespace's counters, per epoch: DGL's RPC and gloo traffic
    assert all(b > 0 for e in d["epochs"] for b in e["trainer_kernel_bytes"])


def test_everything_is_torn_down(smoke):
    netns = load("netns")
    for rec in smoke.values():
        tag = rec["network_tag"]
        assert [ns for ns in netns.leftovers() if ns.startswith(tag)] == []
        assert tag not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
        assert not list(Path("/dev/shm").glob(f"{tag}-m*"))
    assert not [p for p in psutil.Process().children(recursive=True) if "distdgl" in " ".join(p.cmdline())]
