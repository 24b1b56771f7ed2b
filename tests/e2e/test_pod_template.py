"""Pod template overrides (spec.<role>.template) on a real API server and kubelet, and the
chart's trainer image default (docs/operator.md, "Pod templates")."""
from __future__ import annotations

import json
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def _template(job: str, group: int) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"team": "graph"}, "annotations": {"example.com/owner": "ml-platform"}},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {h.LABEL_JOB: job}}}],
            "imagePullSecrets": [{"name": "registry-creds"}],
            "securityContext": {"supplementalGroups": [group]},
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}],
            "containers": [{"name": "grappa", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        },
    }


def test_template_override_is_on_the_pods_and_they_run(cluster: Cluster, release: h.Release, namespace: str) -> None:
    name = "templated"
    job = h.job_manifest(name, epochs=1, partitions=2)
    for role, group in (("aggregator", 4241), ("worker", 4242)):
        job["spec"][role].pop("image", None)  # the chart's trainerImage applies
        job["spec"][role]["template"] = _template(name, group)
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    h.apply_file(cluster, namespace, job)

    def workers_running(j: dict[str, Any]) -> bool:
        pods = [p for p in h.job_pods(cluster, namespace, name)
                if p["metadata"]["labels"].get(h.LABEL_ROLE) == "worker"]
        return len(pods) == 2 and all(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)
    h.wait_job(cluster, namespace, name, workers_running, "both workers running", rel=release,
               timeout=h.scaled(180))

    pods = h.job_pods(cluster, namespace, name)
    assert {p["metadata"]["labels"][h.LABEL_ROLE] for p in pods} >= {"prepare", "aggregator", "worker"}
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        role = meta["labels"][h.LABEL_ROLE]
        group = 4242 if role == "worker" else 4241  # the prepare pod takes the aggregator's template
        assert meta["labels"]["team"] == "graph" and meta["labels"][h.LABEL_JOB] == name, meta
        assert meta["annotations"]["example.com/owner"] == "ml-platform", meta
        assert spec["affinity"]["nodeAffinity"], spec
        assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
        assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
        assert spec["securityContext"]["supplementalGroups"] == [group]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["restartPolicy"] == "Never"
        assert {"grappa-data", "tmp", "scratch"} <= {v["name"] for v in spec["volumes"]}
        main = next(c for c in spec["containers"] if c["name"] == "grappa")
        assert {"/scratch", "/tmp"} <= {m["mountPath"] for m in main["volumeMounts"]}
        assert main["image"] == h.TRAINER_IMAGE or not h.TRAINER_IMAGE, main["image"]


def test_template_touching_an_owned_field_fails_naming_it(cluster: Cluster, release: h.Release,
                                                         namespace: str) -> None:
    job = h.job_manifest("owned", epochs=1, partitions=2)
    job["spec"]["worker"]["template"] = {"spec": {"restartPolicy": "OnFailure"}}
    h.apply_file(cluster, namespace, job)
    failed = h.wait_job(cluster, namespace, "owned", lambda j: h.phase(j) == "Failed", "Failed",
                        rel=release, timeout=h.scaled(30), fail_on_failed=False)
    st = failed["status"]
    assert st["reason"] == "InvalidSpec" and "spec.worker.template.spec.restartPolicy" in st["message"], st
    assert not h.job_pods(cluster, namespace, "owned")
    h.job_warnings(cluster, namespace, "owned", lambda e: "spec.worker.template.spec.restartPolicy" in e["message"],
                   "a Warning Event naming spec.worker.template.spec.restartPolicy")


def _plain_sidecar() -> dict[str, Any]:
    """A log shipper as a plain container: it never exits on its own."""
    return {"name": "log-shipper", "image": h.TRAINER_IMAGE or "python:3.11-slim",
            "imagePullPolicy": h.PULL_POLICY if h.TRAINER_IMAGE else "IfNotPresent",
            "command": ["python", "-c", "import time; time.sleep(3600)"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}


def test_plain_sidecar_never_holds_the_job(cluster: Cluster, release: h.Release, namespace: str) -> None:
    """Each pod is judged by its grappa container: the prepare pod's sidecar keeps it Running, yet
    the job goes on (and deletes it), and it Succeeds with every sidecar still running."""
    name = "sidecar"
    job = h.job_manifest(name, epochs=1, partitions=2)
    for role in ("aggregator", "worker"):
        job["spec"][role]["template"] = {"spec": {"containers": [_plain_sidecar()]}}
    run = h.run_job(cluster, namespace, job, release, stall=h.scaled(300))
    st = run.job["status"]
    assert st["phase"] == "Succeeded" and st["prepared"] and st["restarts"] == 0, st
    # the Events are posted right after the status write that run_job saw
    cluster.wait_for(lambda: {"Prepared", "Running", "Succeeded"} <= {
        e["reason"] for e in h.events(cluster, namespace, "GrappaJob", name)}, h.scaled(30),
        "the Prepared, Running and Succeeded Events")

    # cleanPodPolicy Running: no pod of the job is left running a sidecar
    def none_running() -> bool:
        return not [p for p in h.job_pods(cluster, namespace, name)
                    if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")]
    cluster.wait_for(none_running, h.scaled(60), "the sidecars' pods deleted")
