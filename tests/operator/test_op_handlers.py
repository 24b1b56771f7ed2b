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
        if obj["metadata"]["name"] in self.refuse and obj["kind"] == "Pod":
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
        key = (obj["kind"], obj["metadata"]["name"])
        created = key not in self.others
        self.others.setdefault(key, obj)
        return created

    def delete_pod(self, ns, name):
        self.log.append(f"delete {name}")
        self.pods.pop(name, None)

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
