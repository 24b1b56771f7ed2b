"""Kueue: what a Workload's status means (kueue.py), the state machine's queue gate, the deadline
that counts only active time, and disruptions that do not use up backoffLimit (status.py)."""
from __future__ import annotations

from typing import Any

import pytest

from grappa_operator import kueue
from grappa_operator import settings as s
from grappa_operator.api import GrappaJobStatus
from grappa_operator.desired import JobRef
from grappa_operator.kueue import Placement, WorkloadObs, finished_status, placement, released_status
from grappa_operator.status import PodObs, step

from gj_testlib import T0, cond, group, later, make_spec, pod, prepared_status, running_status, true_states

QJOB = JobRef("job", "ns", "0123456789abcdef", "lq")
WL = "grappajob-job"
PREEMPTED = "Preempted to accommodate a workload (UID: 42) due to prioritization in the ClusterQueue"
NO_QUOTA = "couldn't assign flavors to pod set workers: insufficient unused quota for cpu in flavor on-demand"
ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [
    {"name": "aggregator", "count": 1, "flavors": {"cpu": "on-demand", "memory": "on-demand"}},
    {"name": "workers", "count": 2, "flavors": {"cpu": "spot", "memory": "on-demand"}},
]}
SPOT_TOL = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {
    "on-demand": {"metadata": {"name": "on-demand"}, "spec": {"nodeLabels": {"pool": "on-demand", "zone": "a"}}},
    "spot": {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"pool": "spot"}, "tolerations": [SPOT_TOL]}},
}
OLD = "2025-12-31T00:00:00Z"


def c(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason or type_, "message": message,
            "lastTransitionTime": OLD}


def wl_body(*conds: dict[str, Any], admission: Any = None, active: Any = True, gen: int = 3,
            suspended_by_job: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"queueName": "lq"}
    if active is not None:
        spec["active"] = active
    status: dict[str, Any] = {"conditions": list(conds)}
    if admission is not None:
        status["admission"] = admission
    meta: dict[str, Any] = {"name": WL, "namespace": "ns", "generation": gen}
    if suspended_by_job:
        meta["labels"] = {"grappa.dev/suspended": "true"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
            "spec": spec, "status": status}


ADMITTED = (c("QuotaReserved", reason="QuotaReserved"), c("Admitted", reason="Admitted"))


def obs(body: Any, flavors: Any = None) -> WorkloadObs:
    return WorkloadObs.from_workload(WL, "lq", body, flavors if flavors is not None else FLAVORS)


NONE = obs(None)
PENDING = obs(wl_body(c("QuotaReserved", "False", "Pending", NO_QUOTA)))
ADMIT = obs(wl_body(*ADMITTED, admission=ADMISSION))
EVICTED = obs(wl_body(*ADMITTED, c("Evicted", reason="Preempted", message=PREEMPTED), admission=ADMISSION))
RELEASED = obs(wl_body(c("QuotaReserved", "False", "Pending", PREEMPTED), c("Admitted", "False", "NoReservation"),
                       c("Evicted", reason="Preempted", message=PREEMPTED)))
FINISHED = obs(wl_body(*ADMITTED, c("Finished", reason="Succeeded"), admission=ADMISSION))
INACTIVE = obs(wl_body(*ADMITTED, c("Evicted", reason="Deactivated", message="The workload is deactivated"),
                       admission=ADMISSION, active=False))


# ---- kueue.py: reading the Workload ---------------------------------------------------------

def test_no_workload_is_not_there():
    assert NONE == WorkloadObs(WL, "lq")
    assert not NONE.exists and not NONE.admitted and NONE.active and NONE.placement == {}


def test_pending_workload_carries_kueues_message():
    assert PENDING.exists and not PENDING.admitted and not PENDING.quota_reserved
    assert PENDING.pending_message == NO_QUOTA and PENDING.evicted_reason == "" and not PENDING.finished
    assert PENDING.cluster_queue == "" and PENDING.placement == {} and PENDING.active
    # a Workload Kueue has not looked at yet has no conditions: pending, without a message
    fresh = obs(wl_body())
    assert fresh.exists and not fresh.admitted and fresh.pending_message == ""


def test_admitted_workload_reads_cluster_queue_and_placement():
    assert ADMIT.exists and ADMIT.admitted and ADMIT.quota_reserved and ADMIT.cluster_queue == "cq"
    assert ADMIT.pending_message == "" and ADMIT.evicted_reason == "" and not ADMIT.finished and ADMIT.active
    assert ADMIT.placement == {
        s.ROLE_AGGREGATOR: Placement({"pool": "on-demand", "zone": "a"}, ()),
        s.ROLE_WORKER: Placement({"pool": "spot", "zone": "a"}, (SPOT_TOL,)),
    }
    # Admitted without an admission (or only QuotaReserved) is not admitted
    assert not obs(wl_body(*ADMITTED)).admitted
    reserved = obs(wl_body(c("QuotaReserved"), c("Admitted", "False", "Pending", "waiting for checks"),
                           admission=ADMISSION))
    assert reserved.quota_reserved and not reserved.admitted


def test_evicted_workload_reads_reason_and_message():
    assert EVICTED.evicted_reason == "Preempted" and EVICTED.evicted_message == PREEMPTED
    assert EVICTED.quota_reserved and EVICTED.admitted  # still holds its quota until released
    assert not RELEASED.quota_reserved and not RELEASED.admitted and RELEASED.evicted_reason == "Preempted"
    assert RELEASED.pending_message == PREEMPTED
    no_reason = obs(wl_body(*ADMITTED, {"type": "Evicted", "status": "True"}, admission=ADMISSION))
    assert no_reason.evicted_reason == "Evicted" and no_reason.evicted_message == ""
    over = obs(wl_body(*ADMITTED, c("Evicted", "False", "QuotaReserved"), admission=ADMISSION))
    assert over.evicted_reason == "" and over.admitted  # Kueue re-admitted it: Evicted turned False


def test_finished_and_inactive_workloads():
    assert FINISHED.finished and FINISHED.admitted
    assert not obs(wl_body(*ADMITTED, c("Finished", "False"), admission=ADMISSION)).finished
    assert not INACTIVE.active and INACTIVE.evicted_reason == "Deactivated"
    assert obs(wl_body(active=None)).active  # spec.active defaults to true
    # the Workload's own queueName wins over the job's label
    moved = wl_body()
    moved["spec"]["queueName"] = "other"
    assert obs(moved).queue == "other"


def test_placement_merges_a_pod_sets_flavors_and_ignores_unknown_sets():
    flavors = {
        "a": {"spec": {"nodeLabels": {"pool": "a", "x": "1"}, "tolerations": [SPOT_TOL]}},
        "b": {"spec": {"nodeLabels": {"pool": "b"}, "tolerations": [SPOT_TOL, {"key": "gpu", "operator": "Exists"}]}},
    }
    admission = {"podSetAssignments": [
        {"name": "workers", "flavors": {"memory": "b", "cpu": "a", "nvidia.com/gpu": "b"}},
        {"name": "main", "flavors": {"cpu": "a"}},  # not one of ours
        {"name": "aggregator", "flavors": {"cpu": "missing"}},  # flavor deleted meanwhile
    ]}
    out = placement(admission, flavors)
    assert set(out) == {s.ROLE_WORKER, s.ROLE_AGGREGATOR}
    # flavors apply in name order (b after a), tolerations once each
    assert out[s.ROLE_WORKER].node_selector == {"pool": "b", "x": "1"}
    assert out[s.ROLE_WORKER].tolerations == (SPOT_TOL, {"key": "gpu", "operator": "Exists"})
    assert out[s.ROLE_AGGREGATOR] == Placement({}, ())
    assert placement(None, flavors) == {} and placement({}, flavors) == {}
    assert kueue.assigned_flavors(admission) == ["a", "b", "missing"] and kueue.assigned_flavors(None) == []


def test_finished_status_keeps_other_conditions_and_their_times():
    body = wl_body(*ADMITTED, admission=ADMISSION)
    patch = finished_status(body, True, "training finished", later(60))
    assert list(patch) == ["conditions"]
    conds = {x["type"]: x for x in patch["conditions"]}
    assert conds["QuotaReserved"] == c("QuotaReserved", reason="QuotaReserved")
    assert conds["Admitted"]["lastTransitionTime"] == OLD
    assert conds["Finished"] == {"type": "Finished", "status": "True", "reason": "Succeeded",
                                 "message": "training finished", "lastTransitionTime": "2026-01-01T12:01:00Z",
                                 "observedGeneration": 3}
    failed = finished_status(body, False, "x" * 40000, later(1))["conditions"][-1]
    assert failed["reason"] == "Failed" and len(failed["message"]) == 32000
    # already Finished with the same status: the transition time stays
    again = finished_status(wl_body(c("Finished", reason="Succeeded")), True, "done", later(5))["conditions"]
    assert len(again) == 1 and again[0]["lastTransitionTime"] == OLD and again[0]["message"] == "done"
    assert body["status"]["conditions"] == list(ADMITTED)  # the input is not modified


@pytest.mark.parametrize("reason,requeued", [("Preempted", "True"), ("NodeFailures", "True"),
                                             ("Deactivated", "False"), ("ClusterQueueStopped", "False")])
def test_released_status_clears_the_admission(reason, requeued):
    body = wl_body(*ADMITTED, c("Evicted", reason=reason, message="why"), c("PodsReady", "False"),
                   admission=ADMISSION)
    patch = released_status(body, later(7))
    assert "admission" in patch and patch["admission"] is None  # null in a merge patch removes it
    conds = {x["type"]: x for x in patch["conditions"]}
    assert len(patch["conditions"]) == len(conds) == 5
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert conds["QuotaReserved"]["message"] == "why"
    assert conds["QuotaReserved"]["lastTransitionTime"] == "2026-01-01T12:00:07Z"
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "NoReservation")
    assert conds["Requeued"]["status"] == requeued and conds["Requeued"]["reason"] == reason
    assert conds["Requeued"]["observedGeneration"] == 3
    assert conds["Evicted"] == c("Evicted", reason=reason, message="why")  # Kueue's own, untouched
    assert conds["PodsReady"]["lastTransitionTime"] == OLD


def test_priority_source_prefers_kueues_label():
    assert kueue.priority_source({kueue.PRIORITY_LABEL: "high"}, "pods") == (
        "kueue.x-k8s.io", "WorkloadPriorityClass", "high")
    assert kueue.priority_source({}, "pods") == ("scheduling.k8s.io", "PriorityClass", "pods")
    assert kueue.priority_source({kueue.PRIORITY_LABEL: ""}, None) is None


# ---- the state machine's queue gate ---------------------------------------------------------

def prep_done() -> PodObs:
    return pod("job-prepare", s.ROLE_PREPARE, phase="Succeeded", exit_code=0)


def test_whole_lifecycle_through_the_queue():
    spec = make_spec()
    # 1. created: queued, the Workload is filed, nothing else exists yet
    p1 = step(QJOB, spec, None, [], T0, 1, NONE)
    st = p1.status
    assert st["phase"] == "Queued" and st["reason"] == "WaitingForAdmission" and p1.entered == "Queued"
    assert p1.create_workload and not (p1.create_supporting or p1.create_prepare or p1.create_group)
    assert "LocalQueue lq (Workload grappajob-job)" in st["message"]
    assert true_states(st) == ["Queued"] and cond(st, "Created")["status"] == "True"
    assert [(e.type, e.reason) for e in p1.events] == [("Normal", "Created"), ("Normal", "WaitingForAdmission")]
    assert st["queue"] == {"localQueue": "lq", "workload": WL, "admitted": False}
    assert st["activeSince"] == st["startTime"] == "2026-01-01T12:00:00Z"
    assert st["runDir"] == "/grappa/ns/job/01234567" and st["artifacts"]["model"] == st["runDir"] + "/model.pt"
    assert p1.finish_workload is None and not p1.release_workload and p1.workload_active is None
    GrappaJobStatus.model_validate(st)  # the CRD's schema (condition types included) accepts it
    # 2. Kueue looked and said no: the message is Kueue's, no new event, no new Workload
    p2 = step(QJOB, spec, st, [], later(10), 1, PENDING)
    st = p2.status
    assert st["phase"] == "Queued" and st["message"].endswith(": " + NO_QUOTA)
    assert not p2.create_workload and p2.events == [] and p2.entered is None
    assert cond(st, "Queued")["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert cond(st, "Queued")["message"] == st["message"]
    # 3. admitted: Pending -> Preparing, the supporting objects and the prepare pod
    p3 = step(QJOB, spec, st, [], later(500), 1, ADMIT)
    st = p3.status
    assert st["phase"] == "Preparing" and p3.create_supporting and p3.create_prepare and not p3.create_group
    assert [(e.type, e.reason, e.message) for e in p3.events] == [
        ("Normal", "Admitted", "admitted by Kueue to ClusterQueue cq")]
    assert st["activeSince"] == "2026-01-01T12:08:20Z" and st["startTime"] == "2026-01-01T12:00:00Z"
    assert st["queue"] == {"localQueue": "lq", "workload": WL, "clusterQueue": "cq", "admitted": True}
    assert cond(st, "Queued")["status"] == "False" and true_states(st) == []
    assert p3.workload_active is None and p3.finish_workload is None
    # 4. prepared -> group created, 5. running
    p4 = step(QJOB, spec, st, [prep_done()], later(510), 1, ADMIT)
    assert p4.status["prepared"] is True and p4.create_group and p4.status["phase"] == "Pending"
    p5 = step(QJOB, spec, p4.status, [prep_done()] + group(), later(520), 1, ADMIT)
    st = p5.status
    assert st["phase"] == "Running" and true_states(st) == ["Running"]
    # 6. preempted: pods deleted, queued again; not a restart, no backoff used, no release yet
    p6 = step(QJOB, spec, st, [prep_done()] + group(), later(1000), 1, EVICTED)
    st = p6.status
    assert st["phase"] == "Queued" and st["reason"] == "Preempted" and p6.entered == "Queued"
    assert sorted(p6.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]  # the store stays
    assert not p6.release_workload and not p6.create_group and not p6.create_supporting
    assert [(e.type, e.reason) for e in p6.events] == [("Warning", "Preempted")]
    assert PREEMPTED in st["message"] and "not counted against backoffLimit" in st["message"]
    assert st["restarts"] == 0 and "disruptions" not in st and st["prepared"] is True
    assert st["queue"]["admitted"] is False and true_states(st) == ["Queued"]
    assert cond(st, "Running")["status"] == "False"
    GrappaJobStatus.model_validate(st)
    # 7. pods terminating: nothing more to delete, still no release
    deleting = [prep_done()] + group(deleting=True)
    p7 = step(QJOB, spec, st, deleting, later(1001), 1, EVICTED)
    assert p7.delete_pods == [] and not p7.release_workload and p7.events == []
    # 8. pods gone: release the admission (the succeeded prepare pod is history)
    p8 = step(QJOB, spec, p7.status, [prep_done()], later(1002), 1, EVICTED)
    assert p8.release_workload and p8.status["phase"] == "Queued" and p8.events == []
    # 9. released: waits for Kueue, never releases twice
    p9 = step(QJOB, spec, p8.status, [prep_done()], later(1003), 1, RELEASED)
    assert not p9.release_workload and p9.status["phase"] == "Queued" and p9.status["reason"] == "Preempted"
    # 10. admitted again: same attempt, store kept, deadline clock restarted
    p10 = step(QJOB, spec, p9.status, [prep_done()], later(5000), 1, ADMIT)
    st = p10.status
    assert st["phase"] == "Pending" and st["reason"] == "Admitted" and p10.create_group
    assert not p10.create_prepare and st["prepared"] is True and st["restarts"] == 0
    assert st["activeSince"] == "2026-01-01T13:23:20Z" and [e.reason for e in p10.events] == ["Admitted"]
    p11 = step(QJOB, spec, st, [prep_done()] + group(), later(5010), 1, ADMIT)
    assert p11.status["phase"] == "Running"
    # 12. success marks the Workload Finished (which returns the quota)
    done = [prep_done(), pod("job-aggregator", s.ROLE_AGGREGATOR, 0, phase="Succeeded", exit_code=0)] + group()[1:]
    p12 = step(QJOB, spec, p11.status, done, later(6000), 1, ADMIT)
    assert p12.status["phase"] == "Succeeded" and p12.finish_workload is True
    assert p12.workload_active is None and not p12.release_workload
    # until Kueue shows Finished, each step asks again; then nothing
    assert step(QJOB, spec, p12.status, [], later(6001), 1, ADMIT).finish_workload is True
    last = step(QJOB, spec, p12.status, [], later(6002), 1, FINISHED)
    assert last.finish_workload is None and last.events == [] and not last.create_workload


def test_failed_job_marks_the_workload_failed():
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, phase="Failed", exit_code=3, message="too few nodes")
    plan = step(QJOB, make_spec(), running_status(), pods, T0, 1, ADMIT)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "CannotRun"
    assert plan.finish_workload is False
    # a job that fails before its Workload exists files none
    bad = step(QJOB, make_spec(partitions=200, dataset={"name": "csbm", "synthetic": {"numNodes": 100}}), None, [], T0, 1, NONE)
    assert bad.status["phase"] == "Failed" and not bad.create_workload and bad.finish_workload is None


def test_a_deleted_workload_takes_the_running_pods_and_is_filed_again():
    plan = step(QJOB, make_spec(), running_status(), [prep_done()] + group(), T0, 1, NONE)
    assert plan.create_workload and plan.status["phase"] == "Queued"
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]


def test_not_admitted_deletes_stray_pods_and_ignores_the_pending_deadline():
    spec = make_spec(runPolicy={"preRunningDeadlineSeconds": 60})
    st = step(QJOB, spec, None, [], T0, 1, NONE).status
    stray = pod("job-worker-1", s.ROLE_WORKER, 1, phase="Pending", pending_reason="unschedulable")
    plan = step(QJOB, spec, st, [stray], later(10_000), 1, PENDING)
    assert plan.status["phase"] == "Queued" and plan.delete_pods == ["job-worker-1"]
    assert not plan.create_group and plan.events == []
    assert step(QJOB, spec, plan.status, [], later(100_000), 1, PENDING).status["phase"] == "Queued"


def test_evicted_for_another_reason_is_evicted_not_preempted():
    st = running_status()
    plan = step(QJOB, make_spec(), st, group(), T0, 1, obs(wl_body(
        *ADMITTED, c("Evicted", reason="ClusterQueueStopped", message="The ClusterQueue is stopped"),
        admission=ADMISSION)))
    assert plan.status["reason"] == "Evicted" and "ClusterQueueStopped: The ClusterQueue is stopped" in plan.status["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Evicted")]


def test_placement_only_matters_to_pods_and_workload_none_is_plain():
    """A job without a queue label (workload=None) never touches Kueue."""
    plan = step(JobRef("job", "ns", "0123456789abcdef"), make_spec(), None, [], T0, 1, None)
    assert plan.status["phase"] == "Preparing" and not plan.create_workload and "queue" not in plan.status
    assert plan.finish_workload is None and plan.workload_active is None


# ---- deadlines count active time only ---------------------------------------------------------

def test_time_spent_queued_does_not_count_against_the_deadline():
    spec = make_spec(runPolicy={"activeDeadlineSeconds": 100})
    st = step(QJOB, spec, None, [], T0, 1, NONE).status
    st = step(QJOB, spec, st, [], later(1000), 1, PENDING).status
    assert st["phase"] == "Queued"
    admitted = step(QJOB, spec, st, [], later(1000), 1, ADMIT)
    assert admitted.status["phase"] == "Preparing" and admitted.status["activeSince"] == "2026-01-01T12:16:40Z"
    st = step(QJOB, spec, admitted.status, [prep_done()], later(1010), 1, ADMIT).status
    st = step(QJOB, spec, st, [prep_done()] + group(), later(1020), 1, ADMIT).status
    assert st["phase"] == "Running"
    assert step(QJOB, spec, st, [prep_done()] + group(), later(1099), 1, ADMIT).status["phase"] == "Running"
    plan = step(QJOB, spec, st, [prep_done()] + group(), later(1100), 1, ADMIT)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "DeadlineExceeded"
    assert "since 2026-01-01T12:16:40Z" in plan.status["message"] and plan.finish_workload is False
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]


def test_time_spent_suspended_does_not_count_against_the_deadline():
    limit = {"activeDeadlineSeconds": 100}
    plain = JobRef("job", "ns", "0123456789abcdef")
    st = running_status(activeSince="2026-01-01T12:00:00Z")
    sus = step(plain, make_spec(runPolicy={**limit, "suspend": True}), st, group(), later(10))
    assert sus.status["phase"] == "Suspended" and sus.status["activeSince"] == "2026-01-01T12:00:00Z"
    resumed = step(plain, make_spec(runPolicy=limit), sus.status, [], later(10_000))
    assert resumed.status["phase"] == "Pending" and resumed.status["reason"] == "Resumed" and resumed.create_group
    assert resumed.status["activeSince"] == "2026-01-01T14:46:40Z"
    st = step(plain, make_spec(runPolicy=limit), resumed.status, group(), later(10_050)).status
    assert st["phase"] == "Running"
    assert step(plain, make_spec(runPolicy=limit), st, group(), later(10_099)).status["phase"] == "Running"
    assert step(plain, make_spec(runPolicy=limit), st, group(), later(10_100)).status["reason"] == "DeadlineExceeded"


def test_an_old_status_without_active_since_counts_from_the_start():
    spec = make_spec(runPolicy={"activeDeadlineSeconds": 100})
    assert "activeSince" not in running_status()
    assert step(QJOB, spec, running_status(), group(), later(99), 1, ADMIT).status["phase"] == "Running"
    assert step(QJOB, spec, running_status(), group(), later(100), 1, ADMIT).status["reason"] == "DeadlineExceeded"


# ---- user suspend of a queued job -------------------------------------------------------------

def test_suspend_deactivates_the_workload_and_resume_reactivates_it():
    sus_spec = make_spec(runPolicy={"suspend": True})
    p1 = step(QJOB, sus_spec, running_status(), [prep_done()] + group(), T0, 1, ADMIT)
    assert p1.status["phase"] == "Suspended" and p1.workload_active is False
    assert sorted(p1.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]
    assert not p1.release_workload
    # Kueue evicts the inactive Workload; released once the pods are gone, never reactivated
    p2 = step(QJOB, sus_spec, p1.status, [prep_done()] + group(deleting=True), later(1), 1, INACTIVE)
    assert p2.workload_active is None and not p2.release_workload and p2.status["phase"] == "Suspended"
    p3 = step(QJOB, sus_spec, p2.status, [prep_done()], later(2), 1, INACTIVE)
    assert p3.release_workload and p3.workload_active is None and p3.events == []
    released = obs(wl_body(c("QuotaReserved", "False"), c("Evicted", reason="Deactivated"), active=False,
                           suspended_by_job=True))
    p4 = step(QJOB, sus_spec, p3.status, [prep_done()], later(3), 1, released)
    assert not p4.release_workload and p4.workload_active is None
    # resume: active again, queued until Kueue admits it again; the job's own deactivation is
    # not reported as an eviction
    p5 = step(QJOB, make_spec(), p4.status, [prep_done()], later(4), 1, released)
    assert p5.workload_active is True and p5.status["phase"] == "Queued"
    assert p5.status["reason"] == "WaitingForAdmission" and p5.status["message"].startswith("resumed")
    assert not p5.create_group and [e.reason for e in p5.events] == ["Resumed", "WaitingForAdmission"]
    # a Workload Kueue deactivated itself (no label) stays inactive: the job waits, evicted
    by_kueue = obs(wl_body(c("QuotaReserved", "False"), c("Evicted", reason="DeactivatedDueToRequeuingLimitExceeded"),
                           active=False))
    p7 = step(QJOB, make_spec(), p4.status, [prep_done()], later(4), 1, by_kueue)
    assert p7.workload_active is None and p7.status["reason"] == "Evicted"
    p6 = step(QJOB, make_spec(), p5.status, [prep_done()], later(5), 1, ADMIT)
    assert p6.status["phase"] == "Pending" and p6.create_group and p6.workload_active is None


def test_suspending_a_job_still_queued():
    plan = step(QJOB, make_spec(runPolicy={"suspend": True}), None, [], T0, 1, PENDING)
    assert plan.status["phase"] == "Suspended" and plan.workload_active is False and not plan.create_workload
    # a job suspended before its Workload exists does not file one until resumed
    none = step(QJOB, make_spec(runPolicy={"suspend": True}), None, [], T0, 1, NONE)
    assert none.status["phase"] == "Suspended" and not none.create_workload and none.workload_active is None
    resumed = step(QJOB, make_spec(), none.status, [], later(1), 1, NONE)
    assert resumed.create_workload and resumed.status["phase"] == "Queued"


# ---- disruptions ------------------------------------------------------------------------------

def disrupted(name: str, role: str, rank: int, reason: str, attempt: int = 0, **kw: Any) -> PodObs:
    p = pod(name, role, rank, attempt, **kw)
    return PodObs(**{**p.__dict__, "disruption": reason})


@pytest.mark.parametrize("reason", ["PreemptionByScheduler", "EvictionByEvictionAPI", "Evicted",
                                    "DeletionByTaintManager", "TerminationByKubelet"])
def test_disruption_does_not_use_backoff_even_at_the_limit(reason):
    spec = make_spec(runPolicy={"backoffLimit": 3})
    pods = group(attempt=3)
    pods[2] = disrupted("job-worker-2", s.ROLE_WORKER, 2, reason, attempt=3, phase="Failed", exit_code=143,
                        message="terminated")
    plan = step(QJOB, spec, running_status(restarts=3), pods, T0, 1, ADMIT)
    st = plan.status
    assert st["phase"] == "Restarting" and st["reason"] == "PodDisrupted"
    assert st["restarts"] == 4 and st["disruptions"] == 1
    assert f"pod job-worker-2 was stopped by Kubernetes ({reason})" in st["message"]
    assert "not counted against backoffLimit, 3/3 used" in st["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "PodDisrupted")]
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]
    GrappaJobStatus.model_validate(st)


def test_failures_after_disruptions_are_counted_correctly():
    spec = make_spec(runPolicy={"backoffLimit": 1})
    pods = group(attempt=2)
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, 2, phase="Failed", exit_code=1, message="boom")
    plan = step(QJOB, spec, running_status(restarts=2, disruptions=2), pods, T0, 1, ADMIT)
    assert plan.status["phase"] == "Restarting" and plan.status["reason"] == "PodFailed"
    assert plan.status["restarts"] == 3 and plan.status["disruptions"] == 2
    assert plan.status["message"].endswith("(1/1)")
    pods = [PodObs(**{**p.__dict__, "attempt": 3}) for p in pods]
    final = step(QJOB, spec, running_status(restarts=3, disruptions=2), pods, later(5), 1, ADMIT)
    assert final.status["phase"] == "Failed" and final.status["reason"] == "BackoffLimitExceeded"
    assert "failed 1 times and spec.runPolicy.backoffLimit is 1" in final.status["message"]
    assert final.finish_workload is False


def test_disruption_of_the_prepare_pod_restarts_without_backoff():
    spec = make_spec(runPolicy={"backoffLimit": 0})
    st = step(QJOB, spec, None, [], T0, 1, ADMIT).status
    prep = disrupted("job-prepare", s.ROLE_PREPARE, None, "EvictionByEvictionAPI", phase="Failed", exit_code=137)
    plan = step(QJOB, spec, st, [prep], later(5), 1, ADMIT)
    assert plan.status["phase"] == "Restarting" and plan.status["disruptions"] == 1
    plain = PodObs(**{**prep.__dict__, "disruption": ""})
    assert step(QJOB, spec, st, [plain], later(5), 1, ADMIT).status["reason"] == "BackoffLimitExceeded"


def test_deleting_disrupted_pod_while_running_is_a_disruption():
    pods = group()
    pods[1] = disrupted("job-worker-1", s.ROLE_WORKER, 1, "PreemptionByScheduler", deleting=True)
    plan = step(QJOB, make_spec(runPolicy={"backoffLimit": 0}), running_status(), pods, T0, 1, ADMIT)
    st = plan.status
    assert st["phase"] == "Restarting" and st["reason"] == "PodDisrupted" and st["disruptions"] == 1
    assert "job-worker-1" in st["message"] and "(PreemptionByScheduler)" in st["message"]
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-2"]
    # without the condition it is an ordinary deletion, which uses the backoff
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, deleting=True)
    plain = step(QJOB, make_spec(runPolicy={"backoffLimit": 0}), running_status(), pods, T0, 1, ADMIT)
    assert plain.status["reason"] == "BackoffLimitExceeded" and "disappeared" in plain.status["message"]


def test_permanent_exit_code_wins_over_disruption():
    pods = group()
    pods[1] = disrupted("job-worker-1", s.ROLE_WORKER, 1, "Evicted", phase="Failed", exit_code=2, message="bad")
    assert step(QJOB, make_spec(), running_status(), pods, T0, 1, ADMIT).status["reason"] == "InvalidConfig"


def raw_pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "job-worker-1", "labels": {s.LABEL_ROLE: "worker", s.LABEL_RANK: "1",
                                                             s.LABEL_ATTEMPT: "0"}}, "status": status}


def test_pod_obs_reads_the_disruption():
    def target(reason: Any, status: str = "True") -> dict[str, Any]:
        return {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": status, "reason": reason}]}

    assert PodObs.from_pod(raw_pod(target("PreemptionByScheduler"))).disruption == "PreemptionByScheduler"
    assert PodObs.from_pod(raw_pod(target("EvictionByEvictionAPI"))).disruption == "EvictionByEvictionAPI"
    assert PodObs.from_pod(raw_pod(target("DeletionByPodGC"))).disruption == "DeletionByPodGC"
    assert PodObs.from_pod(raw_pod(target("PreemptionByScheduler", "False"))).disruption == ""
    assert PodObs.from_pod(raw_pod(target("SomethingElse"))).disruption == ""
    evicted = PodObs.from_pod(raw_pod({"phase": "Failed", "reason": "Evicted",
                                       "message": "The node was low on resource: memory."}))
    assert evicted.disruption == "Evicted" and evicted.phase == "Failed"
    assert PodObs.from_pod(raw_pod({"phase": "Failed", "reason": "OOMKilled"})).disruption == ""
    assert PodObs.from_pod(raw_pod({"phase": "Running"})).disruption == ""


def test_evicted_pod_from_the_api_restarts_through_the_state_machine():
    raw = raw_pod({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."})
    pods = group()
    pods[1] = PodObs.from_pod(raw)
    plan = step(QJOB, make_spec(runPolicy={"backoffLimit": 0}), running_status(), pods, T0, 1, ADMIT)
    assert plan.status["reason"] == "PodDisrupted" and plan.status["disruptions"] == 1
    assert "(Evicted)" in plan.status["message"]


def test_run_dir_and_artifacts_are_set_once():
    st = prepared_status(runDir="/elsewhere/run", artifacts={"model": "/elsewhere/run/model.pt"})
    plan = step(QJOB, make_spec(), st, group(phase="Pending"), T0, 1, ADMIT)
    assert plan.status["runDir"] == "/elsewhere/run" and plan.status["artifacts"] == {"model": "/elsewhere/run/model.pt"}
    fresh = step(QJOB, make_spec(storage={"claimName": "c", "mountPath": "/data"}), None, [], T0, 1, NONE).status
    assert fresh["runDir"] == "/data/ns/job/01234567"
    assert fresh["artifacts"] == {"model": "/data/ns/job/01234567/model.pt",
                                  "report": "/data/ns/job/01234567/report.json",
                                  "plot": "/data/ns/job/01234567/training.png",
                                  "checkpoints": "/data/ns/job/01234567/checkpoints",
                                  "logs": "/data/ns/job/01234567/logs"}
