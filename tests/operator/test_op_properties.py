"""Property tests: no spec, status, pod set or API refusal makes a reconcile raise anything but a
reported, user-facing error (a SpecError in the pure logic; Failed + reason + Warning Event, or a
transient retry, through the glue)."""
from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from gj_testlib import T0
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from grappa_operator import desired
from grappa_operator import settings as s
from grappa_operator.api import PHASES, GrappaJobStatus, parse_spec
from grappa_operator.errors import SpecError
from grappa_operator.kueue import WorkloadObs
from grappa_operator.status import DISRUPTIONS, STATE_CONDITIONS, PodObs, step

JOB = desired.JobRef("pj", "ns", "abcdef0123456789")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=True),
                    st.text(max_size=6), st.sampled_from(["cora", "csbm", "rmat", "file", "All", "sweep",
                                                          "gcn", "mini-batch", "/abs", "rel"]))
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                    max_leaves=6)


def section(keys: list[str]):
    return st.dictionaries(st.sampled_from(keys), junk, max_size=len(keys))


# spec.<role>.template: any shape, with the keys the merge treats specially (podtemplate.py)
container_fields = st.one_of(st.just("grappa"), junk,
                             st.lists(st.dictionaries(st.sampled_from(["name", "mountPath"]), junk)))
containers = st.lists(st.one_of(junk, st.dictionaries(
    st.sampled_from(["name", "volumeMounts", "envFrom", "image"]), container_fields, max_size=4)), max_size=3)
templates = st.fixed_dictionaries({}, optional={
    "metadata": st.one_of(section(["labels", "annotations"]), st.just({"labels": {"grappa.dev/job-name": "x"}})),
    "spec": st.one_of(junk, st.dictionaries(
        st.sampled_from(["restartPolicy", "securityContext", "nodeSelector", "volumes", "tolerations",
                         "affinity", "terminationGracePeriodSeconds", "containers"]),
        st.one_of(junk, containers), max_size=4)),
})

spec_dicts = st.fixed_dictionaries({}, optional={
    "partitions": st.one_of(st.integers(-1, 3000), junk),
    "dataset": st.one_of(st.fixed_dictionaries({}, optional={
        "name": st.sampled_from(["cora", "citeseer", "csbm", "rmat", "file", "nope"]),
        "path": st.sampled_from(["g.pt", "/abs/g.pt"]),
        "synthetic": section(["numNodes", "scale", "numClasses"]),
    }), junk),
    "model": section(["arch", "layers", "hidden", "dropout"]),
    "training": section(["mode", "epochs", "fanouts", "evalEvery", "lr"]),
    "grappa": st.fixed_dictionaries({}, optional={
        "chunks": st.integers(-1, 5000),
        "rounds": section(["every", "pairing", "plateau"]),
        "partitionSeed": st.integers(0, 10)}),
    "storage": st.one_of(st.just({"hostPath": "/srv"}), st.just({"claimName": "c"}), section(["hostPath", "claimName", "mountPath"])),
    "metricsPort": st.integers(-1, 70000),
    "masterPort": st.integers(-1, 70000),
    "runPolicy": section(["backoffLimit", "suspend", "cleanPodPolicy", "ttlSecondsAfterFinished",
                          "activeDeadlineSeconds", "preRunningDeadlineSeconds"]),
    "schedulingPolicy": section(["gang", "provider", "queue"]),
    "aggregator": section(["image", "env", "resources", "tolerations", "serviceAccountName"]),
    "worker": st.one_of(section(["image", "env", "nodeSelector"]), st.fixed_dictionaries({"template": templates})),
    "bogus": junk,
})

pods = st.lists(st.builds(
    PodObs,
    name=st.sampled_from(["pj-aggregator", "pj-worker-1", "pj-worker-2", "pj-prepare", "other"]),
    role=st.sampled_from([s.ROLE_AGGREGATOR, s.ROLE_WORKER, s.ROLE_PREPARE, ""]),
    rank=st.one_of(st.none(), st.integers(0, 3)),
    attempt=st.one_of(st.none(), st.integers(0, 3)),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    created_at=st.one_of(st.none(), st.just(T0)),
    deleting=st.booleans(),
    exit_code=st.one_of(st.none(), st.sampled_from([0, 1, 2, 3, 137])),
    message=st.text(max_size=10),
    disruption=st.sampled_from(["", "", *DISRUPTIONS]),
), max_size=5)


def _kcond(type_, status="True", reason=""):
    return {"type": type_, "status": status, "reason": reason or type_, "message": f"{type_} {status}"}


_ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [
    {"name": "aggregator", "flavors": {"cpu": "a"}}, {"name": "workers", "flavors": {"cpu": "b", "memory": "a"}}]}
_FLAVORS = {"a": {"spec": {"nodeLabels": {"pool": "a"}}},
            "b": {"spec": {"nodeLabels": {"pool": "b"}, "tolerations": [{"key": "b", "operator": "Exists"}]}}}
# Kueue's answers: none yet, pending, admitted, evicted (holding or released quota), finished
WORKLOAD_BODIES = {
    "none": None,
    "pending": {"spec": {"queueName": "lq"}, "status": {"conditions": [_kcond("QuotaReserved", "False", "Pending")]}},
    "admitted": {"spec": {"queueName": "lq"}, "status": {
        "conditions": [_kcond("QuotaReserved"), _kcond("Admitted")], "admission": _ADMISSION}},
    "evicted": {"spec": {"queueName": "lq"}, "status": {
        "conditions": [_kcond("QuotaReserved"), _kcond("Admitted"), _kcond("Evicted", reason="Preempted")],
        "admission": _ADMISSION}},
    "released": {"spec": {"queueName": "lq"}, "status": {
        "conditions": [_kcond("QuotaReserved", "False"), _kcond("Evicted", reason="Deactivated")]}},
    "inactive": {"spec": {"queueName": "lq", "active": False}, "status": {
        "conditions": [_kcond("QuotaReserved"), _kcond("Admitted"), _kcond("Evicted", reason="Deactivated")],
        "admission": _ADMISSION}},
    "finished": {"spec": {"queueName": "lq"}, "status": {
        "conditions": [_kcond("QuotaReserved"), _kcond("Admitted"), _kcond("Finished")], "admission": _ADMISSION}},
}
workloads = st.one_of(st.none(), st.sampled_from(sorted(WORKLOAD_BODIES)).map(
    lambda k: WorkloadObs.from_workload("grappajob-pj", "lq", WORKLOAD_BODIES[k], _FLAVORS)))

progress = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "epoch": st.one_of(st.integers(-1, 200), junk), "round": st.one_of(st.integers(-1, 5), junk),
    "valAcc": st.one_of(st.floats(0, 1), junk), "epochsTotal": st.one_of(st.integers(0, 200), junk),
    "finished": st.booleans()}))


def _checked_spec(raw):
    try:
        return parse_spec(raw)
    except SpecError as err:
        assert err.message and err.reason
        return err


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=spec_dicts, observed=st.lists(st.tuples(pods, workloads), min_size=1, max_size=4), prog=progress,
       seconds=st.lists(st.integers(0, 100_000), min_size=1, max_size=4), queued=st.booleans())
def test_reconcile_never_raises(raw, observed, prog, seconds, queued):
    """With or without Kueue (random Workload observations), every step ends in a valid state."""
    spec = _checked_spec(raw)
    status = None
    for i, (pod_set, wl) in enumerate(observed):
        now = T0 + timedelta(seconds=sorted(seconds)[min(i, len(seconds) - 1)])
        if status is not None and prog is not None:
            status = {**status, "progress": prog}
        if queued and wl is None:
            wl = WorkloadObs("grappajob-pj", "lq")  # a queued job always has an observation
        plan = step(JOB, spec, status, pod_set, now, 1, wl if queued else None)
        status = plan.status
        assert status["phase"] in PHASES
        true = [c["type"] for c in status["conditions"] if c["status"] == "True" and c["type"] in STATE_CONDITIONS]
        assert len(true) <= 1 and (not true or true[0] == status["phase"])
        # what the CRD's schema accepts (condition types too); progress is the aggregator's (junk here)
        GrappaJobStatus.model_validate({k: v for k, v in status.items() if k != "progress"})
        if queued:
            pods_wanted = plan.create_group or plan.create_prepare or plan.create_supporting
            assert not pods_wanted or (wl.admitted and not wl.evicted_reason)  # no pod before admission
            assert not plan.create_workload or not wl.exists
            assert not plan.release_workload or (wl.quota_reserved and not [
                p for p in pod_set if not (p.role == s.ROLE_PREPARE and p.phase == "Succeeded")])
            assert plan.finish_workload is None or (status["phase"] in ("Succeeded", "Failed") and not wl.finished)
            if status["phase"] == "Queued":
                assert status["queue"]["admitted"] is False
        else:
            assert not (plan.create_workload or plan.release_workload) and plan.finish_workload is None
            assert plan.workload_active is None and status["phase"] != "Queued"
        if not isinstance(spec, SpecError):
            assert status["restarts"] - status.get("disruptions", 0) <= spec.run_policy.backoff_limit
            if not isinstance(spec, SpecError) and plan.create_group:
                try:
                    desired.check_runnable(JOB, spec)
                except SpecError:
                    raise AssertionError("created pods for an infeasible spec")
                desired.group_pods(JOB, spec, status["restarts"])  # building objects never raises


@settings(max_examples=80, deadline=None, database=None)
@given(raw=spec_dicts)
def test_spec_errors_are_user_facing(raw):
    spec = _checked_spec(raw)
    if isinstance(spec, SpecError):
        assert "spec" in spec.message
        return
    try:
        desired.check_runnable(JOB, spec)
    except SpecError as err:
        assert "spec." in err.message or "metadata.name" in err.message
        return
    for obj in desired.supporting_objects(JOB, spec) + desired.group_pods(JOB, spec, 0):
        assert obj["metadata"]["namespace"] == "ns"


# ---- the whole reconcile through the glue, with the API server refusing creates -------------

refusal_bodies = st.one_of(st.none(), st.text(max_size=40), junk.map(json.dumps), st.builds(
    lambda msg, field: json.dumps({"kind": "Status", "message": msg, "details": {"causes": [
        {"field": field, "message": msg}]}}),
    st.sampled_from(["exceeded quota: q, requested: cpu=2, used: cpu=1, limited: cpu=4",
                     "exceeded quota: q, requested: cpu=8, used: cpu=0, limited: cpu=4",
                     "violates PodSecurity \"restricted:latest\": hostPath volumes",
                     "serviceaccount \"x\" not found", "no PriorityClass with name p was found",
                     "cannot create resource \"pods\"", "Invalid value", ""]),
    st.sampled_from(["spec.tolerations[0].operator", "spec.containers[0].resources", "", "x"])))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(spec_dicts, junk), code=st.sampled_from([400, 403, 404, 409, 422, 429, 500, 503]),
       body=refusal_bodies, victim=st.sampled_from(["Pod", "Service", "Role", "PodGroup", "Workload", "none"]),
       queue=st.one_of(st.none(), st.sampled_from(sorted(WORKLOAD_BODIES))))
# found by a cold run: a template whose containers is not a list crashed the quantity check
@example(raw={"worker": {"template": {"spec": {"restartPolicy": [], "containers": 1}}}}, code=400, body=None,
         victim="Pod", queue=None)
@example(raw={"storage": {"claimName": "c"}, "worker": {"template": {"spec": {"initContainers": "x", "overhead": 3}}}},
         code=422, body=None, victim="Pod", queue=None)
def test_reconcile_of_any_spec_reports_every_refusal(raw, code, body, victim, queue):
    """Through the glue: a reconcile ends in a valid phase with a reason, Failed ones with a
    message and a Warning Event; only a transient error (no user-facing meaning) escapes."""
    from kubernetes.client.rest import ApiException

    from grappa_operator import handlers
    from grappa_operator.kubeapi import refusal_error
    from test_op_handlers import FakeKube

    job = {"apiVersion": "grappa.dev/v1alpha1", "kind": "GrappaJob",
           "metadata": {"name": "pj", "namespace": "ns", "uid": "abcdef0123456789", "generation": 1,
                        "creationTimestamp": "2030-01-01T00:00:00Z"}, "spec": raw}
    kube = FakeKube(job)
    if queue is not None:  # a queued job, with Kueue's answer so far
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
        if WORKLOAD_BODIES[queue] is not None:
            kube.workloads["grappajob-pj"] = {"metadata": {"name": "grappajob-pj", "namespace": "ns"},
                                              **json.loads(json.dumps(WORKLOAD_BODIES[queue]))}
        kube.cluster.update({("kueue.x-k8s.io", "resourceflavors", k): v for k, v in _FLAVORS.items()})
    plain_create = kube.create

    def create(obj):  # a fake server that refuses one kind, with the adapter's real meaning
        if obj["kind"] != victim:
            return plain_create(obj)
        if code == 409:
            return False
        err = ApiException(status=code, reason="refused")
        err.body = body
        meaning = refusal_error(obj, err)
        raise err if meaning is None else meaning

    kube.create = create
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(handlers, "_kube", kube)
        try:
            asyncio.run(handlers._reconcile("ns", "pj"))
        except ApiException as err:  # transient: retried at the next resync, events already out
            assert refusal_error({"kind": victim, "metadata": {}}, err) is None
            assert [r for _, r, _ in kube.events][:1] == ["Created"]
    status = kube.job["status"]
    assert status["phase"] in PHASES and status.get("reason")
    if status["phase"] == "Failed":
        assert status["message"] and kube.events[-1][0] == "Warning"
    if status.get("blockedSince"):
        assert status["reason"] == "QuotaExceeded" and status["phase"] != "Failed"
    if queue is None:
        assert not kube.workloads and not kube.workload_patches
    elif status["phase"] == "Queued":
        assert not kube.pods and "grappajob-pj" in kube.workloads or victim == "Workload"


@settings(max_examples=200, deadline=None, database=None)
@given(kind=st.sampled_from(["Pod", "PodGroup", "Service", ""]), code=st.integers(100, 599),
       body=st.one_of(refusal_bodies, st.binary(max_size=20)), labels=junk)
def test_classify_never_raises(kind, code, body, labels):
    from grappa_operator.refusals import classify
    obj = {"kind": kind, "metadata": {"name": "pj-x", "labels": labels if isinstance(labels, dict) else {}}}
    r = classify(obj, code, body)
    assert r is None or (r.reason and r.message and "pj-x" in r.message or r.reason == "GangSchedulerMissing")
