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


def writer_pod(name: str, *args: str, script: str = "") -> dict:
    """Runs tests/fake_ogb.py (or `script`) in a pod that mounts the job's claim, as the pods' uid."""
    container = {"name": "write", "image": h.TRAINER_IMAGE or "python:3.11-slim",
                 "imagePullPolicy": h.PULL_POLICY if h.TRAINER_IMAGE else "IfNotPresent",
                 "command": ["python", "-c", script or FAKE_OGB.read_text(), *args],
                 "volumeMounts": [{"name": "data", "mountPath": MOUNT}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                         "fsGroup": 10001},
                     "containers": [container],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "grappa-data"}}]}}


def _wait_written(cluster: Cluster, namespace: str, pod: str) -> None:
    def written() -> bool:
        p = cluster.kubectl_json("get", "pod", pod, "-n", namespace)
        assert p["status"].get("phase") != "Failed", cluster.describe_pod(namespace, pod)
        return p["status"].get("phase") == "Succeeded"
    cluster.wait_for(written, h.scaled(180), f"the dataset written to the claim by {pod}")


def test_ogb_layout_dataset_on_the_volume_trains_to_succeeded(cluster: Cluster, release: h.Release,
                                                                namespace: str) -> None:
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    cluster.apply(json.dumps(writer_pod("write-arxiv", f"{MOUNT}/data", "ogbn-arxiv", "600", "3000", "8")),
                  namespace)

    _wait_written(cluster, namespace, "write-arxiv")

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


# An arrays graph (README, "Your own graph") whose edge 137 points past the last node.
BAD_ARRAYS = """
import sys, numpy as np, pathlib
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rng, n = np.random.default_rng(0), 200
edges = rng.integers(0, n, (2, 800)); edges[1, 137] = n
np.save(out / "edges.npy", edges)
np.save(out / "features.npy", rng.standard_normal((n, 4)).astype(np.float32))
np.save(out / "labels.npy", rng.integers(0, 3, n))
for split, ids in (("train", range(0, 100)), ("val", range(100, 150)), ("test", range(150, 200))):
    np.save(out / f"{split}.npy", np.array(list(ids)))
"""


def test_bad_data_fails_with_exactly_the_trainers_error_line(cluster: Cluster, release: h.Release,
                                                            namespace: str) -> None:
    """The trainer writes its `grappa: error:` line as the termination message: the job's status
    message is that line, with no progress bar of the log around it."""
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    cluster.apply(json.dumps(writer_pod("write-bad", f"{MOUNT}/data/bad", script=BAD_ARRAYS)), namespace)
    _wait_written(cluster, namespace, "write-bad")
    name = "bad-data"
    job = h.job_manifest(name, epochs=1, partitions=2)
    job["spec"]["dataset"] = {"name": "arrays", "path": "data/bad"}
    h.apply_file(cluster, namespace, job)
    failed = h.wait_job(cluster, namespace, name, lambda j: h.phase(j) == "Failed", "Failed", rel=release,
                        timeout=h.scaled(180), fail_on_failed=False)
    st = failed["status"]
    log = cluster.container_log(namespace, f"{name}-prepare", "grappa")
    line = log[log.rindex("grappa: error:"):].splitlines()[0]
    assert st["reason"] == "CannotRun" and st["message"] == line, (st, log)
    assert "edges.npy edge 137" in line and f"{MOUNT}/data/bad" in line, line
    pod = cluster.kubectl_json("get", "pod", f"{name}-prepare", "-n", namespace)
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["message"]) == (3, line), term
    h.job_warnings(cluster, namespace, name, lambda e: e["message"] == f"pod {name}-prepare exited with code 3: {line}",
                   "the Warning Event quoting the trainer's error line")
