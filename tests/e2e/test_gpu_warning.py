"""A job requesting a GPU is granted it and warned that it stays idle: the trainer runs on CPU
only (grappa_operator/gpu.py). The bed's node has no GPU, so it advertises a fake nvidia.com/gpu
through a node status patch, the way Kubernetes documents advertising extended resources; the
scheduler then treats it as any GPU."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
CAPACITY = "/status/capacity/nvidia.com~1gpu"


@pytest.fixture
def gpu_node(cluster: Cluster) -> Iterator[str]:
    node = cluster.kubectl_json("get", "nodes")["items"][0]["metadata"]["name"]
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=json",
                    "-p", json.dumps([{"op": "add", "path": CAPACITY, "value": "1"}]))
    cluster.wait_for(lambda: cluster.kubectl_json("get", "node", node)["status"].get("allocatable", {}).get(GPU),
                     h.scaled(60), f"node {node} allocatable {GPU}")
    yield node
    for path in (CAPACITY, CAPACITY.replace("capacity", "allocatable")):
        cluster.kubectl("patch", "node", node, "--subresource=status", "--type=json",
                        "-p", json.dumps([{"op": "remove", "path": path}]), check=False)


def test_gpu_request_is_granted_and_warned(cluster: Cluster, release: h.Release, namespace: str,
                                           gpu_node: str) -> None:
    name = "gpu-job"
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    manifest = h.job_manifest(name)
    manifest["spec"]["aggregator"]["resources"]["limits"] = {GPU: 1}  # the prepare pod's too
    h.apply_file(cluster, namespace, manifest)

    warnings = h.job_warnings(cluster, namespace, name, lambda e: e["reason"] == "GPUNotUsed",
                              "the GPUNotUsed Warning Event")
    (event,) = [e for e in warnings if e["reason"] == "GPUNotUsed"]
    assert f"spec.aggregator.resources.limits[{GPU}]" in event["message"] and "CPU only" in event["message"]

    def scheduled() -> dict | None:
        pod = cluster.pod(namespace, f"{name}-prepare")
        conds = {c["type"]: c["status"] for c in ((pod or {}).get("status") or {}).get("conditions", [])}
        return pod if conds.get("PodScheduled") == "True" else None
    pod = cluster.wait_for(scheduled, h.scaled(60), f"the prepare pod scheduled with its {GPU}")
    assert pod["spec"]["nodeName"] == gpu_node
    assert pod["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"
    job = h.get_job(cluster, namespace, name)
    assert h.phase(job) not in ("Failed", None), h.diagnostics(cluster, namespace, name, release)
    # the installed CRD says so too
    explain = " ".join(cluster.kubectl("explain", "grappajob.spec.worker.resources").stdout.split())
    assert "CPU only" in explain and "GPUNotUsed" in explain, explain
