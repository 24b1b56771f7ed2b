"""The kopf glue over an in-memory API server: ordering, owned status keys, events, metrics."""
from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from grappa_operator import handlers, metrics
from grappa_operator import settings as s
from grappa_operator.errors import CreateBlocked, SpecError
from grappa_operator.timeutil import parse


class FakeKube:
    def __init__(self, job: dict[str, Any]):
        self.job = job
        self.pods: dict[str, dict[str, Any]] = {}
        self.others: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.log: list[str] = []
        self.refuse_podgroup = False
        self.refuse: dict[str, Exception] = {}  # object name -> what its create raises
        # Kueue: Workloads by name, cluster objects by (group, plural, name), patches sent
        self.workloads: dict[str, dict[str, Any]] = {}
        self.cluster: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.workload_patches: list[tuple[str, dict[str, Any], bool]] = []
        self.graceful = False  # deleted pods linger (deletionTimestamp) until the test removes them

    def get_job(self, ns, name):
        return copy.deepcopy(self.job) if self.job else None

    def patch_status(self, ns, name, patch):
        self.log.append("patch_status")
        st = self.job.setdefault("status", {})
        for k, v in patch.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = copy.deepcopy(v)

    def list_pods(self, job):
        return [copy.deepcopy(p) for p in self.pods.values()]

    def create(self, obj):
        self.log.append(f"create {obj['kind']} {obj['metadata']['name']}")
        if obj["metadata"]["name"] in self.refuse and obj["kind"] in ("Pod", "Workload"):
            raise self.refuse[obj["metadata"]["name"]]
        if obj["kind"] == "PodGroup" and self.refuse_podgroup:
            raise SpecError("GangSchedulerMissing", "spec.schedulingPolicy.provider: no PodGroup API")
        if obj["kind"] == "Pod":
            if obj["metadata"]["name"] in self.pods:
                return False
            pod = copy.deepcopy(obj)
            pod["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
            pod["status"] = {"phase": "Pending"}
            self.pods[obj["metadata"]["name"]] = pod
            return True
        if obj["kind"] == "Workload":
            if obj["metadata"]["name"] in self.workloads:
                return False
            self.workloads[obj["metadata"]["name"]] = {**copy.deepcopy(obj), "status": {}}
            return True
        key = (obj["kind"], obj["metadata"]["name"])
        created = key not in self.others
        self.others.setdefault(key, obj)
        return created

    def delete_pod(self, ns, name):
        self.log.append(f"delete {name}")
        if self.graceful and name in self.pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        else:
            self.pods.pop(name, None)

    def get_workload(self, ns, name):
        wl = self.workloads.get(name)
        return copy.deepcopy(wl) if wl is not None else None

    def get_cluster_object(self, group, version, plural, name):
        obj = self.cluster.get((group, plural, name))
        return copy.deepcopy(obj) if obj is not None else None

    def patch_workload(self, ns, name, patch, status=False):
        self.log.append(f"patch_workload {'status' if status else 'spec'}")
        self.workload_patches.append((name, copy.deepcopy(patch), status))
        # the status subresource takes status only; the main resource never status
        assert (list(patch) == ["status"]) if status else ("status" not in patch), patch
        _merge_patch(self.workloads[name], patch)

    def post_event(self, body, type_, reason, message, ts):
        self.events.append((type_, reason, message))

    def delete_job(self, ns, name):
        self.job = None

    # helpers for the test
    def set_phase(self, name, phase, exit_code=None, message=""):
        st = self.pods[name]["status"] = {"phase": phase}
        if exit_code is not None:
            st["containerStatuses"] = [{"name": "grappa", "state": {"terminated": {
                "exitCode": exit_code, "message": message}}}]


def _merge_patch(target, patch):
    """RFC 7386: None deletes, mappings merge, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge_patch(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def make_job(**spec):
    return {"apiVersion": "grappa.dev/v1alpha1", "kind": "GrappaJob",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "uid-1234-5678", "generation": 1,
                         "creationTimestamp": "2030-01-01T00:00:00Z"},
            "spec": {"partitions": 2, "dataset": {"name": "cora"}, "storage": {"hostPath": "/srv"},
                     "training": {"epochs": 20}, "grappa": {"rounds": {"every": 5}}, **spec}}


@pytest.fixture
def fake(monkeypatch):
    def install(job):
        kube = FakeKube(job)
        monkeypatch.setattr(handlers, "_kube", kube)
        return kube
    return install


def run(kube):
    asyncio.run(handlers.reconcile("ns", "demo", "job"))


def test_lifecycle_through_the_glue(fake):
    kube = fake(make_job())
    run(kube)
    assert kube.job["status"]["phase"] == "Preparing"
    assert kube.log[0] == "patch_status"  # durable status before any child
    assert {"Service", "ServiceAccount", "Role", "RoleBinding"} <= {k for k, _ in kube.others}
    assert list(kube.pods) == ["demo-prepare"]
    kube.set_phase("demo-prepare", "Succeeded", 0)
    run(kube)
    assert sorted(kube.pods) == ["demo-aggregator", "demo-prepare", "demo-worker-1", "demo-worker-2"]
    assert kube.job["status"]["rounds"]["current"] == 0
    for n in ("demo-aggregator", "demo-worker-1", "demo-worker-2"):
        kube.set_phase(n, "Running")
    run(kube)
    assert kube.job["status"]["phase"] == "Running"
    # the aggregator reports progress; the operator decides round 1 without touching progress
    kube.job["status"]["progress"] = {"epoch": 4, "round": 0, "epochsTotal": 20, "loss": 1.0}
    kube.log.clear()
    run(kube)
    st = kube.job["status"]
    assert st["rounds"]["current"] == 1 and st["progress"]["loss"] == 1.0
    assert ("Normal", "RoundDecided") in [(t, r) for t, r, _ in kube.events]
    n_events = len(kube.events)
    run(kube)  # restart-safe: a replay decides nothing new
    assert kube.job["status"]["rounds"]["current"] == 1 and len(kube.events) == n_events
    # a worker dies: whole group restarts
    kube.set_phase("demo-worker-2", "Failed", 137, "Killed")
    run(kube)
    assert kube.job["status"]["phase"] == "Restarting" and not [p for p in kube.pods if p != "demo-prepare"]
    run(kube)
    assert kube.job["status"]["phase"] == "Pending" and "demo-worker-2" in kube.pods
    assert kube.pods["demo-worker-2"]["metadata"]["labels"][s.LABEL_ATTEMPT] == "1"
    for n in ("demo-aggregator", "demo-worker-1", "demo-worker-2"):
        kube.set_phase(n, "Running")
    run(kube)
    kube.set_phase("demo-aggregator", "Succeeded", 0)
    run(kube)
    assert kube.job["status"]["phase"] == "Succeeded"
    assert "demo-worker-1" not in kube.pods  # cleanPodPolicy Running
    reasons = [r for _, r, _ in kube.events]
    assert reasons[0] == "Created" and "PodFailed" in reasons and reasons[-1] == "Succeeded"


def test_infeasible_job_fails_with_event(fake):
    kube = fake(make_job(partitions=200, dataset={"name": "csbm", "synthetic": {"numNodes": 100}}))
    run(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and st["reason"] == "TooManyPartitions"
    assert not kube.pods and not kube.others
    assert kube.events[-1][0] == "Warning" and "spec.partitions" in kube.events[-1][2]
    before = len(kube.events)
    run(kube)
    assert len(kube.events) == before


def test_refused_child_fails_the_job(fake):
    kube = fake(make_job(schedulingPolicy={"gang": True}))
    kube.refuse_podgroup = True
    run(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and "spec.schedulingPolicy" in st["message"]


def test_metrics_gauges_follow_jobs(fake):
    from prometheus_client import generate_latest
    kube = fake(make_job())
    run(kube)
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'grappa_operator_job_phase{job="demo",namespace="ns",phase="Preparing",reason="Preparing"} 1.0' in text
    assert 'grappa_operator_jobs{phase="Preparing"}' in text
    assert "grappa_operator_reconcile_duration_seconds_count" in text
    kube.job = None
    run(kube)
    assert 'job="demo"' not in generate_latest(metrics.REGISTRY).decode()


def test_owned_patch_never_touches_progress():
    old = {"phase": "Running", "progress": {"epoch": 1}}
    new = {"phase": "Running", "progress": {"epoch": 0}, "rounds": {"current": 1}}
    assert handlers.owned_patch(old, new) == {"rounds": {"current": 1}}


def test_forbidden_pod_fails_at_once_and_created_is_announced(fake):
    kube = fake(make_job())
    kube.refuse["demo-prepare"] = SpecError("CreateRefused", "Pod demo-prepare was refused (403): "
                                            "serviceaccount \"x\" not found; fix spec.aggregator.serviceAccountName")
    run(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and st["reason"] == "CreateRefused" and "Pod demo-prepare" in st["message"]
    assert [c for c in st["conditions"] if c["type"] == "Failed"][0]["reason"] == "CreateRefused"
    assert [(t, r) for t, r, _ in kube.events] == [("Normal", "Created"), ("Warning", "CreateRefused")]
    run(kube)  # never retried: no new create, no new event
    assert len(kube.events) == 2 and kube.log.count("create Pod demo-prepare") == 1


def test_transient_error_keeps_events_and_retries(fake):
    from kubernetes.client.rest import ApiException
    kube = fake(make_job())
    kube.refuse["demo-prepare"] = ApiException(status=503, reason="Service Unavailable")
    errors = metrics.RECONCILE_ERRORS.labels("job")._value.get()
    run(kube)
    assert metrics.RECONCILE_ERRORS.labels("job")._value.get() == errors + 1
    assert kube.job["status"]["phase"] == "Preparing" and not kube.pods
    assert [r for _, r, _ in kube.events] == ["Created"]  # announced although the create failed
    del kube.refuse["demo-prepare"]
    run(kube)
    assert list(kube.pods) == ["demo-prepare"] and kube.job["status"]["phase"] == "Preparing"


def test_quota_wait_is_bounded_by_the_pending_deadline(fake, monkeypatch):
    from gj_testlib import T0, later
    clock = {"t": T0}
    monkeypatch.setattr(handlers, "now", lambda: clock["t"])
    kube = fake(make_job(runPolicy={"preRunningDeadlineSeconds": 60}))
    kube.refuse["demo-prepare"] = CreateBlocked("QuotaExceeded", "Pod demo-prepare does not fit in "
                                                "the namespace's quota now: exceeded quota: q")
    run(kube)
    st = kube.job["status"]
    assert st["phase"] == "Preparing" and st["reason"] == "QuotaExceeded" and parse(st["blockedSince"]) == T0
    assert [r for _, r, _ in kube.events] == ["Created", "QuotaExceeded"]
    clock["t"] = later(30)
    run(kube)
    assert kube.job["status"]["phase"] == "Preparing" and len(kube.events) == 2  # no event storm
    clock["t"] = later(60)
    run(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and st["reason"] == "QuotaExceeded"
    assert "preRunningDeadlineSeconds (60s)" in st["message"] and kube.events[-1][0] == "Warning"


def test_quota_that_frees_up_clears_the_wait(fake):
    kube = fake(make_job())
    kube.refuse["demo-prepare"] = CreateBlocked("QuotaExceeded", "Pod demo-prepare does not fit now")
    run(kube)
    assert "blockedSince" in kube.job["status"]
    del kube.refuse["demo-prepare"]
    run(kube)
    st = kube.job["status"]
    assert "blockedSince" not in st and st["reason"] == "Preparing" and list(kube.pods) == ["demo-prepare"]


# ---- Kueue through the glue -------------------------------------------------------------------

QUEUE_LABEL, PRIORITY_LABEL = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"
SUSPENDED_LABEL = "grappa.dev/suspended"
WL = "grappajob-demo"
SPOT_TOL = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {("kueue.x-k8s.io", "resourceflavors", "on-demand"): {"spec": {"nodeLabels": {"pool": "on-demand"}}},
           ("kueue.x-k8s.io", "resourceflavors", "spot"): {"spec": {"nodeLabels": {"pool": "spot"},
                                                                     "tolerations": [SPOT_TOL]}}}


def queued_job(labels=None, **spec):
    job = make_job(**spec)
    job["metadata"]["labels"] = {QUEUE_LABEL: "lq", **(labels or {})}
    return job


def strict(kube):
    """One reconcile that lets any error escape (reconcile() only logs it)."""
    asyncio.run(handlers._reconcile("ns", "demo"))


def kcond(type_, status="True", reason="", message=""):
    return {"type": type_, "status": status, "reason": reason or type_, "message": message,
            "lastTransitionTime": "2030-01-01T00:00:00Z"}


def admit(kube):
    kube.workloads[WL]["status"] = {
        "conditions": [kcond("QuotaReserved"), kcond("Admitted")],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "aggregator", "count": 1, "flavors": {"cpu": "on-demand"}},
            {"name": "workers", "count": 2, "flavors": {"cpu": "spot"}}]}}


def evict(kube, reason="Preempted"):
    kube.workloads[WL]["status"]["conditions"].append(kcond("Evicted", reason=reason, message="to make room"))


def conds(wl):
    return {c["type"]: c for c in wl["status"].get("conditions", [])}


def test_queued_lifecycle_through_the_glue(fake):
    kube = fake(queued_job())
    kube.cluster.update(FLAVORS)
    strict(kube)
    st = kube.job["status"]
    assert st["phase"] == "Queued" and st["reason"] == "WaitingForAdmission"
    # durable status first; the Workload is the only object of a queued job
    assert kube.log == ["patch_status", f"create Workload {WL}"]
    assert not kube.pods and not kube.others and list(kube.workloads) == [WL]
    spec = kube.workloads[WL]["spec"]
    assert spec["queueName"] == "lq" and [(p["name"], p["count"]) for p in spec["podSets"]] == [
        ("aggregator", 1), ("workers", 2)]
    assert kube.workloads[WL]["metadata"]["ownerReferences"][0]["uid"] == "uid-1234-5678"
    assert [(t, r) for t, r, _ in kube.events] == [("Normal", "Created"), ("Normal", "WaitingForAdmission")]
    kube.log.clear()
    strict(kube)  # Kueue has not answered yet: nothing new
    assert not [x for x in kube.log if x.startswith("create")] and len(kube.events) == 2
    # admitted: the supporting objects, then the prepare pod on the aggregator's flavor
    admit(kube)
    strict(kube)
    st = kube.job["status"]
    assert st["phase"] == "Preparing" and st["queue"] == {"localQueue": "lq", "workload": WL,
                                                          "clusterQueue": "cq", "admitted": True}
    assert {"Service", "ServiceAccount", "Role", "RoleBinding"} <= {k for k, _ in kube.others}
    assert list(kube.pods) == ["demo-prepare"]
    assert kube.pods["demo-prepare"]["spec"]["nodeSelector"] == {"pool": "on-demand"}
    assert kube.events[-1][:2] == ("Normal", "Admitted")
    kube.set_phase("demo-prepare", "Succeeded", 0)
    strict(kube)
    agg, w1 = kube.pods["demo-aggregator"]["spec"], kube.pods["demo-worker-1"]["spec"]
    assert agg["nodeSelector"] == {"pool": "on-demand"} and "tolerations" not in agg
    assert w1["nodeSelector"] == {"pool": "spot"} and w1["tolerations"] == [SPOT_TOL]
    for n in ("demo-aggregator", "demo-worker-1", "demo-worker-2"):
        kube.set_phase(n, "Running")
    strict(kube)
    assert kube.job["status"]["phase"] == "Running" and not kube.workload_patches
    # preempted: pods deleted after the status is written, the admission kept until they are gone
    kube.job["status"]["progress"] = {"epoch": 7}  # the aggregator's last report
    evict(kube)
    kube.graceful = True
    kube.log.clear()
    preempted = metrics.REGISTRY.get_sample_value("grappa_operator_disruptions_total",
                                                  {"source": "Kueue", "reason": "Preempted"})
    strict(kube)
    st = kube.job["status"]
    assert st["phase"] == "Queued" and st["reason"] == "Preempted" and st["restarts"] == 0
    record = {"time": st["conditions"][-1]["lastTransitionTime"], "source": "Kueue", "reason": "Preempted",
              "message": "to make room", "epoch": 7}
    assert st["disruptionHistory"] == [record] and st["queueEvictions"] == 1
    assert metrics.REGISTRY.get_sample_value("grappa_operator_disruptions_total",
                                             {"source": "Kueue", "reason": "Preempted"}) == preempted + 1
    assert kube.log[0] == "patch_status" and sorted(kube.log[1:]) == [
        "delete demo-aggregator", "delete demo-worker-1", "delete demo-worker-2"]
    assert not kube.workload_patches and kube.events[-1][:2] == ("Warning", "Preempted")
    strict(kube)  # still terminating: no release
    assert not kube.workload_patches
    for n in ("demo-aggregator", "demo-worker-1", "demo-worker-2"):
        del kube.pods[n]
    strict(kube)
    assert [(n, s_) for n, _, s_ in kube.workload_patches] == [(WL, True)]
    wl = kube.workloads[WL]
    assert "admission" not in wl["status"]
    assert conds(wl)["QuotaReserved"]["status"] == "False" and conds(wl)["Admitted"]["status"] == "False"
    assert conds(wl)["Requeued"]["status"] == "True" and conds(wl)["Evicted"]["status"] == "True"
    strict(kube)  # released once
    assert len(kube.workload_patches) == 1 and kube.job["status"]["phase"] == "Queued"
    # admitted again: the same attempt resumes, the store is not prepared again
    admit(kube)
    strict(kube)
    assert sorted(kube.pods) == ["demo-aggregator", "demo-prepare", "demo-worker-1", "demo-worker-2"]
    assert kube.pods["demo-worker-2"]["metadata"]["labels"][s.LABEL_ATTEMPT] == "0"
    for n in ("demo-aggregator", "demo-worker-1", "demo-worker-2"):
        kube.set_phase(n, "Running")
    strict(kube)
    kube.set_phase("demo-aggregator", "Succeeded", 0)
    strict(kube)
    assert kube.job["status"]["phase"] == "Succeeded"
    name, patch, to_status = kube.workload_patches[-1]
    assert to_status and len(kube.workload_patches) == 2
    finished = conds(kube.workloads[WL])["Finished"]
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", "Succeeded", "training finished")
    assert conds(kube.workloads[WL])["Admitted"]["status"] == "True"  # Kueue's conditions are kept
    strict(kube)
    assert len(kube.workload_patches) == 2  # Finished once
    reasons = [r for _, r, _ in kube.events]
    assert reasons.count("Admitted") == 2 and reasons[-1] == "Succeeded" and "PodFailed" not in reasons
    # the preemption stays on record in the final status, counted once
    assert kube.job["status"]["disruptionHistory"] == [record] and kube.job["status"]["queueEvictions"] == 1
    assert metrics.REGISTRY.get_sample_value("grappa_operator_disruptions_total",
                                             {"source": "Kueue", "reason": "Preempted"}) == preempted + 1


def test_failed_queued_job_marks_its_workload_failed(fake):
    kube = fake(queued_job())
    strict(kube)
    admit(kube)
    strict(kube)
    kube.set_phase("demo-prepare", "Failed", 3, "grappa: error: dataset.path missing")
    strict(kube)
    assert kube.job["status"]["phase"] == "Failed"
    assert conds(kube.workloads[WL])["Finished"]["reason"] == "Failed"
    assert "dataset.path" in conds(kube.workloads[WL])["Finished"]["message"]


def test_suspend_and_resume_set_the_workload_active(fake):
    kube = fake(queued_job())
    strict(kube)
    admit(kube)
    strict(kube)
    kube.job["spec"]["runPolicy"] = {"suspend": True}
    strict(kube)
    assert kube.job["status"]["phase"] == "Suspended" and not kube.pods
    assert kube.workload_patches == [(WL, {"metadata": {"labels": {SUSPENDED_LABEL: "true"}},
                                           "spec": {"active": False}}, False)]
    assert kube.workloads[WL]["spec"]["active"] is False
    strict(kube)
    assert len(kube.workload_patches) == 1
    kube.job["spec"]["runPolicy"] = {"suspend": False}
    strict(kube)
    assert kube.workload_patches[-1] == (WL, {"metadata": {"labels": {SUSPENDED_LABEL: None}},
                                              "spec": {"active": True}}, False)
    assert SUSPENDED_LABEL not in kube.workloads[WL]["metadata"].get("labels", {})


def test_priority_comes_from_the_workload_priority_class_label_first(fake):
    kube = fake(queued_job({PRIORITY_LABEL: "high"}, aggregator={"priorityClassName": "pods-pc"}))
    kube.cluster[("kueue.x-k8s.io", "workloadpriorityclasses", "high")] = {"value": 1000}
    kube.cluster[("scheduling.k8s.io", "priorityclasses", "pods-pc")] = {"value": 7}
    strict(kube)
    spec = kube.workloads[WL]["spec"]
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert spec["priority"] == 1000
    pods_only = fake(queued_job(worker={"priorityClassName": "pods-pc"}))
    pods_only.cluster[("scheduling.k8s.io", "priorityclasses", "pods-pc")] = {"value": 7}
    strict(pods_only)
    spec = pods_only.workloads[WL]["spec"]
    assert spec["priorityClassRef"]["kind"] == "PriorityClass" and spec["priority"] == 7


@pytest.mark.parametrize("labels,spec,field", [
    ({PRIORITY_LABEL: "high"}, {}, f"metadata.labels[{PRIORITY_LABEL}]"),
    ({}, {"aggregator": {"priorityClassName": "nope"}}, "priorityClassName"),
])
def test_missing_priority_class_fails_the_job(fake, labels, spec, field):
    kube = fake(queued_job(labels, **spec))
    strict(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and st["reason"] == "PriorityClassMissing"
    assert field in st["message"] and "does not exist" in st["message"]
    assert not kube.workloads and not kube.pods and not kube.others
    assert kube.events[-1][:2] == ("Warning", "PriorityClassMissing")
    strict(kube)  # terminal: not retried
    assert kube.log.count(f"create Workload {WL}") == 0 and not kube.workloads


def test_kueue_not_installed_fails_the_job(fake):
    from kubernetes.client.rest import ApiException

    from grappa_operator.kubeapi import refusal_error
    kube = fake(queued_job())
    err = ApiException(status=404, reason="Not Found")
    err.body = '{"kind": "Status", "message": "the server could not find the requested resource"}'
    kube.refuse[WL] = refusal_error({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                     "metadata": {"name": WL}}, err)
    strict(kube)
    st = kube.job["status"]
    assert st["phase"] == "Failed" and st["reason"] == "KueueMissing" and QUEUE_LABEL in st["message"]
    assert not kube.pods and not kube.others and kube.events[-1][:2] == ("Warning", "KueueMissing")


def test_a_job_without_the_label_never_reads_kueue(fake, monkeypatch):
    kube = fake(make_job())
    monkeypatch.setattr(kube, "get_workload", lambda *a: pytest.fail("read a Workload"))
    strict(kube)
    assert kube.job["status"]["phase"] == "Preparing" and not kube.workloads and "queue" not in kube.job["status"]


def test_a_slow_job_does_not_hold_up_the_resync_of_the_others(monkeypatch):
    """While one job's reconcile is stuck in an API call, the resync still reconciles the others
    (and does not queue a second reconcile behind the stuck one)."""
    import threading

    release, fast_done = threading.Event(), threading.Event()
    calls: list[str] = []

    class TwoJobs(FakeKube):
        def get_job(self, ns, name):
            calls.append(name)
            if name == "slow":
                release.wait(10)  # a hung call, until the fast job was reconciled
                return None
            fast_done.set()
            release.set()
            return None

    monkeypatch.setattr(handlers, "_kube", TwoJobs(make_job()))
    metrics.CACHE.update("ns", "slow", {})
    metrics.CACHE.update("ns", "fast", {})

    async def go():
        first = asyncio.ensure_future(handlers.reconcile("ns", "slow", "job"))
        await asyncio.sleep(0.05)  # "slow" now holds its lock inside the hung call
        await handlers.resync_all()
        await first
    asyncio.run(go())
    assert fast_done.is_set() and calls.count("slow") == 1 and calls.count("fast") == 1, calls


def test_pod_watch_is_filtered_by_the_api_server():
    """kopf sends the selector with the pod watch (server-side); other resources are unfiltered."""
    import kopf
    from kopf._cogs.structs import references

    settings = kopf.OperatorSettings()

    async def startup():
        real_kube = handlers.kube
        handlers.kube = lambda: None  # no cluster: only the settings matter here
        try:
            await handlers._startup(settings=settings)
        finally:
            handlers.kube = real_kube
        for task in asyncio.all_tasks():  # the resync loop it started
            if task is not asyncio.current_task():
                task.cancel()
    asyncio.run(startup())
    pods = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    jobs = references.Resource(group=s.GROUP, version=s.VERSION, plural=s.PLURAL, kind=s.KIND, namespaced=True)
    assert list(settings.watching.label_selectors.collect(pods)) == [
        "app.kubernetes.io/managed-by=grappa-operator,grappa.dev/job-name"]
    assert list(settings.watching.label_selectors.collect(jobs)) == []
