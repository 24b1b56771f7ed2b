"""A GrappaJob on a dataset in OGB's own layout, put on the job's volume the way a user would (a
pod that writes it), runs to Succeeded through the streaming prepare."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

FAKE_OGB = Path(__file__).resolve().parents[1] / "fake_ogb.py"
MOUNT = "/grappa"  # the GrappaJob default (storage.mountPath)


def writer_pod(name: str, *args: str) -> dict:
    """Runs tests/fake_ogb.py in a pod that mounts the job's claim, as the pods' uid."""
    container = {"name": "write", "image": h.TRAINER_IMAGE or "python:3.11-slim",
                 "imagePullPolicy": h.PULL_POLICY if h.TRAINER_IMAGE else "IfNotPresent",
                 "command": ["python", "-c", FAKE_OGB.read_text(), *args],
                 "volumeMounts": [{"name": "data", "mountPath": MOUNT}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                         "fsGroup": 10001},
                     "containers": [container],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "grappa-data"}}]}}


def test_ogb_layout_dataset_on_the_volume_trains_to_succeeded(cluster: Cluster, release: h.Release,
                                                                namespace: str) -> None:
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    cluster.apply(json.dumps(writer_pod("write-arxiv", f"{MOUNT}/data", "ogbn-arxiv", "600", "3000", "8")),
                  namespace)

    def written() -> bool:
        p = cluster.kubectl_json("get", "pod", "write-arxiv", "-n", namespace)
        assert p["status"].get("phase") != "Failed", cluster.describe_pod(namespace, "write-arxiv")
        return p["status"].get("phase") == "Succeeded"
    cluster.wait_for(written, h.scaled(180), "the fake ogbn-arxiv written to the claim")

    name = "ogb-arxiv"
    job = h.job_manifest(name, epochs=3, rounds_every=2)
    spec = job["spec"]
    spec["partitions"] = 2
    spec["dataset"] = {"name": "ogbn-arxiv"}  # root defaults to <mountPath>/data
    spec["training"].update(batchSize=32)
    run = h.run_job(cluster, namespace, job, release)
    status = run.job["status"]
    assert status["phase"] == "Succeeded" and status["prepared"], h.diagnostics(cluster, namespace, name, release)
    assert status["progress"]["epoch"] == 3 and 0.0 <= status["result"]["testAcc"] <= 1.0, status
    log = h.aggregator_log(cluster, namespace, name)
    assert "Traceback" not in log, log
