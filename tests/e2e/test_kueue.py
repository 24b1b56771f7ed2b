"""GrappaJobs queued and admitted by a real Kueue (docs/operator.md, "Queueing with Kueue").

On the kind bed Kueue v0.19.2 is built from its released source and installed by the bed
(hack/kind/kueue.sh, GRAPPA_E2E_KUEUE=installed). On another cluster: a Kueue already installed
is used as it is (its configuration must list GrappaJob as an external framework), or
GRAPPA_E2E_KUEUE=release installs Kueue's release manifests (needs internet).
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from typing import Any, Iterator

import pytest
import yaml

import helpers as h
import kind_bed
from cluster import Cluster

# One lane (tests/lanes.py): the tests share Kueue's queue and its quota.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kueue")]

KUEUE_NS = "kueue-system"
KUEUE_DEPLOY = "kueue-controller-manager"
KUEUE_RELEASE = "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml"
EXTERNAL_FRAMEWORK = "GrappaJob.v1alpha1.grappa.dev"
POOL_LABEL = "grappa.dev/e2e-pool"


def _installed(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "deployment", KUEUE_DEPLOY, "-n", KUEUE_NS, check=False).returncode == 0


def _install_release(cluster: Cluster) -> None:
    """Kueue's release, then GrappaJob added to its configuration's external frameworks."""
    cluster.kubectl("apply", "--server-side", "-f", KUEUE_RELEASE, timeout=300)
    cm = cluster.kubectl_json("get", "configmap", "kueue-manager-config", "-n", KUEUE_NS)
    config = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    integrations = config.setdefault("integrations", {})
    integrations["externalFrameworks"] = sorted({*integrations.get("externalFrameworks", []), EXTERNAL_FRAMEWORK})
    cm["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
    cluster.apply(json.dumps(cm), KUEUE_NS)
    cluster.kubectl("rollout", "restart", f"deployment/{KUEUE_DEPLOY}", "-n", KUEUE_NS)


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> None:
    kind_bed.require(kind_bed.KUEUE, "Kueue")  # built and installed last on the bed
    mode = os.environ.get("GRAPPA_E2E_KUEUE", "")
    if not _installed(cluster):
        if mode == "installed":
            pytest.fail("the kind bed was to install Kueue but its deployment is missing (see the bed's "
                        "kueue-install.log)")
        if mode != "release":
            pytest.skip("Kueue is not installed in this cluster: the kind bed installs it from "
                        "../shared/vendor-src; elsewhere set GRAPPA_E2E_KUEUE=release (internet)")
        _install_release(cluster)
    cluster.kubectl("rollout", "status", f"deployment/{KUEUE_DEPLOY}", "-n", KUEUE_NS,
                    f"--timeout={int(h.scaled(240))}s", timeout=h.scaled(260))


@pytest.fixture
def pool_node(cluster: Cluster) -> Iterator[str]:
    """One node labelled for the test's ResourceFlavor (the label is removed afterwards)."""
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    ready = [n["metadata"]["name"] for n in nodes
             if not any(t.get("effect") == "NoSchedule" for t in n["spec"].get("taints") or [])] \
        or [nodes[0]["metadata"]["name"]]
    node = ready[0]
    cluster.kubectl("label", "node", node, f"{POOL_LABEL}=kueue", "--overwrite")
    yield node
    cluster.kubectl("label", "node", node, f"{POOL_LABEL}-", check=False)


def _queues(cluster: Cluster, ns: str, cpu: str) -> tuple[str, str]:
    """A ResourceFlavor for the pool, a ClusterQueue with `cpu` of quota for this namespace only,
    and a LocalQueue: (flavor, local queue)."""
    suffix = uuid.uuid4().hex[:6]
    flavor, cq, lq = f"grappa-e2e-{suffix}", f"grappa-e2e-{suffix}", "grappa"
    objs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {POOL_LABEL: "kueue"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                      {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                     {"name": "memory", "nominalQuota": "8Gi"}]}]}]}},
    ]
    for obj in objs:
        cluster.apply(json.dumps(obj))
    cluster.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                              "metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq}}), ns)
    return flavor, lq


def _delete_queues(cluster: Cluster, ns: str, flavor: str) -> None:
    cluster.kubectl("delete", "localqueue", "--all", "-n", ns, "--wait=false", check=False)
    cluster.kubectl("delete", "clusterqueue", flavor, "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def _queued_job(name: str, queue: str) -> dict[str, Any]:
    # 3 pods x 100m (stated here, not the helper's default): one job fits the 500m ClusterQueue,
    # two do not.
    job = h.job_manifest(name, epochs=2, rounds_every=2, partitions=2)
    for role in ("aggregator", "worker"):
        job["spec"][role]["resources"]["requests"]["cpu"] = "100m"
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def _workload(cluster: Cluster, ns: str, job: str) -> dict[str, Any]:
    return cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", f"grappajob-{job}", "-n", ns)


def test_second_job_waits_for_the_first_then_both_succeed(
        cluster: Cluster, release: h.Release, namespace: str, kueue: None, pool_node: str) -> None:
    flavor, queue = _queues(cluster, namespace, cpu="500m")
    try:
        cluster.apply(json.dumps(h.storage_claim()), namespace)
        h.apply_file(cluster, namespace, _queued_job("first", queue))
        h.wait_job(cluster, namespace, "first", lambda j: h.phase(j) in ("Preparing", "Running"),
                   "first admitted", rel=release, timeout=h.scaled(120))
        h.apply_file(cluster, namespace, _queued_job("second", queue))

        # While the first trains, the second is Queued: a Workload pending, no pod, no deadline.
        second = h.wait_job(cluster, namespace, "second", lambda j: h.phase(j) == "Queued",
                            "second Queued", rel=release, timeout=h.scaled(60))
        first_done: dict[str, Any] | None = None
        while first_done is None:
            first = h.get_job(cluster, namespace, "first") or {}
            if h.phase(first) == "Succeeded":
                first_done = first
                break
            assert h.phase(first) != "Failed", h.diagnostics(cluster, namespace, "first", release)
            second = h.get_job(cluster, namespace, "second") or {}
            assert h.phase(second) == "Queued", (
                "the second job left the queue while the first still held the quota"
                + h.diagnostics(cluster, namespace, "second", release))
            assert not h.job_pods(cluster, namespace, "second"), "a queued job has pods"
            time.sleep(1)
        st2 = second["status"]
        assert st2["reason"] == "WaitingForAdmission" and queue in st2["message"], st2
        assert st2["queue"] == {"localQueue": queue, "workload": "grappajob-second", "admitted": False}, st2

        second = h.wait_job(cluster, namespace, "second", lambda j: h.phase(j) == "Succeeded",
                            "second Succeeded after the first", rel=release)
    finally:
        _delete_queues(cluster, namespace, flavor)

    # The second job's pods were created only after the first had finished.
    done = first_done["status"]["completionTime"]
    created = min(p["metadata"]["creationTimestamp"] for p in h.job_pods(cluster, namespace, "second"))
    assert created >= done, (created, done)
    for name, job in (("first", first_done), ("second", second)):
        st = job["status"]
        assert st["queue"]["admitted"] and st["queue"]["clusterQueue"] == flavor, st
        assert h.progress(job)["epoch"] == 2, st
        assert h.conditions(job)["Queued"]["status"] == "False"
        # The flavor's node placement is on every pod, and the pods ran on that node.
        for pod in h.job_pods(cluster, namespace, name):
            assert pod["spec"]["nodeSelector"].get(POOL_LABEL) == "kueue", pod["spec"]
            assert pod["spec"]["nodeName"] == pool_node
        wl = _workload(cluster, namespace, name)
        finished = {c["type"]: c for c in wl["status"]["conditions"]}["Finished"]
        assert finished["status"] == "True" and finished["reason"] == "Succeeded", wl["status"]
        assert [c["name"] for c in wl["spec"]["podSets"]] == ["aggregator", "workers"]
        assert [c["count"] for c in wl["spec"]["podSets"]] == [1, 2]
    reasons = [e["reason"] for e in h.events(cluster, namespace, "GrappaJob", "second")]
    assert "Admitted" in reasons and reasons.index("Admitted") < reasons.index("Succeeded"), reasons


def _native_sidecar(cpu: str) -> dict[str, Any]:
    return {"name": "log-shipper", "image": h.TRAINER_IMAGE or "python:3.11-slim", "restartPolicy": "Always",
            "command": ["python", "-c", "import time; time.sleep(3600)"],
            "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}


def test_sidecars_count_against_the_quota(cluster: Cluster, release: h.Release, namespace: str, kueue: None,
                                          pool_node: str) -> None:
    """3 pods x 100m fit 400m; with a 150m native sidecar in each worker (2 x 250m + 100m) they do
    not: the Workload carries the sidecars and Kueue keeps the job Queued, with no pod."""
    flavor, queue = _queues(cluster, namespace, cpu="400m")
    try:
        job = _queued_job("sidecars", queue)
        job["spec"]["worker"]["template"] = {"spec": {"initContainers": [_native_sidecar("150m")]}}
        h.apply_file(cluster, namespace, job)

        def pending_for_quota(j: dict[str, Any]) -> bool:
            got = cluster.kubectl("get", "workloads.kueue.x-k8s.io", "grappajob-sidecars", "-n", namespace,
                                  "-o", "json", check=False)
            wl = json.loads(got.stdout) if got.returncode == 0 else {}
            reserved = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}.get("QuotaReserved")
            return bool(h.phase(j) == "Queued" and "insufficient" in j["status"].get("message", "")
                        and reserved and reserved["status"] == "False" and "cpu" in reserved.get("message", ""))
        queued = h.wait_job(cluster, namespace, "sidecars", pending_for_quota, "Kueue's quota verdict",
                            rel=release, timeout=h.scaled(90))
        wl = _workload(cluster, namespace, "sidecars")
        workers = {ps["name"]: ps for ps in wl["spec"]["podSets"]}["workers"]["template"]["spec"]
        assert workers["initContainers"][0]["restartPolicy"] == "Always", workers
        assert workers["initContainers"][0]["resources"]["requests"]["cpu"] == "150m", workers
        st = queued["status"]
        assert st["reason"] == "WaitingForAdmission" and "insufficient" in st["message"], st
        time.sleep(5)  # Kueue has answered; nothing changes on its own
        assert h.phase(h.get_job(cluster, namespace, "sidecars")) == "Queued"
        assert not h.job_pods(cluster, namespace, "sidecars"), "a job over its quota has pods"
    finally:
        _delete_queues(cluster, namespace, flavor)


def _priority_classes(cluster: Cluster) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    low, high = f"grappa-e2e-low-{suffix}", f"grappa-e2e-high-{suffix}"
    for name, value in ((low, 10), (high, 1000)):
        cluster.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                                  "metadata": {"name": name}, "value": value}))
    return low, high


def test_preempted_job_resumes_and_keeps_the_preemption_in_its_status(
        cluster: Cluster, release: h.Release, namespace: str, kueue: None, pool_node: str) -> None:
    """A high-priority job preempts a running low one (quota for one job at a time); the low job
    resumes from its SIGTERM checkpoint once readmitted and its final status records the
    preemption: when, Kueue's reason and the epoch it resumed from."""
    flavor, queue = _queues(cluster, namespace, cpu="500m")
    cluster.kubectl("patch", "clusterqueue", flavor, "--type=merge", "-p",
                    json.dumps({"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))
    low_class, high_class = _priority_classes(cluster)
    try:
        cluster.apply(json.dumps(h.storage_claim()), namespace)
        low = _queued_job("low", queue)
        low["spec"]["training"]["epochs"] = 8
        low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = low_class
        h.apply_file(cluster, namespace, low)
        h.wait_job(cluster, namespace, "low", lambda j: h.phase(j) == "Running" and h.progress(j).get("epoch", 0) >= 1,
                   "low running an epoch", rel=release, timeout=h.scaled(240))
        high = _queued_job("high", queue)
        high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = high_class
        h.apply_file(cluster, namespace, high)
        preempted = h.wait_job(cluster, namespace, "low", lambda j: h.phase(j) == "Queued",
                               "low preempted", rel=release, timeout=h.scaled(120))
        assert preempted["status"]["reason"] == "Preempted", preempted["status"]
        h.wait_job(cluster, namespace, "high", lambda j: h.phase(j) == "Succeeded", "high Succeeded", rel=release)
        done = h.wait_job(cluster, namespace, "low", lambda j: h.phase(j) == "Succeeded",
                          "low resumed to Succeeded", rel=release)
    finally:
        _delete_queues(cluster, namespace, flavor)
        for name in (low_class, high_class):
            cluster.kubectl("delete", "workloadpriorityclass", name, "--wait=false", check=False)
    st = done["status"]
    assert st["restarts"] == 0 and st.get("disruptions", 0) == 0 and st["queueEvictions"] == 1, st
    (record,) = st["disruptionHistory"]
    assert (record["source"], record["reason"]) == ("Kueue", "Preempted"), record
    assert 1 <= record["epoch"] < 8 and record["time"] >= st["runningTime"], record
    assert h.progress(done)["epoch"] == 8, st
    # the second admission resumed from the SIGTERM checkpoint (of that epoch or one finished since)
    resumed = re.search(r"resuming from \S+ \(epoch (\d+)\)", h.aggregator_log(cluster, namespace, "low"))
    assert resumed and int(resumed.group(1)) >= record["epoch"], h.aggregator_log(cluster, namespace, "low")
