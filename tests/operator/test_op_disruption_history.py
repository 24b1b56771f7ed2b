"""Kueue evictions and pod disruptions stay on record in status after their Events expire: when,
why and from which epoch the job resumed, bounded (issue 28, item 5)."""
from __future__ import annotations

from grappa_operator import settings as s
from grappa_operator.api import MAX_DISRUPTIONS, GrappaJobStatus
from grappa_operator.desired import JobRef
from grappa_operator.kueue import WorkloadObs
from grappa_operator.status import PodObs, step

from gj_testlib import group, later, make_spec, pod, running_status

JOB = JobRef("job", "ns", "0123456789abcdef")
QJOB = JobRef("job", "ns", "0123456789abcdef", "lq")
ADMITTED = WorkloadObs("grappajob-job", "lq", exists=True, admitted=True, quota_reserved=True, cluster_queue="cq")


def evicted(reason: str, message: str) -> WorkloadObs:
    return WorkloadObs("grappajob-job", "lq", exists=True, admitted=True, quota_reserved=True,
                       cluster_queue="cq", evicted_reason=reason, evicted_message=message)


def prep() -> PodObs:
    return pod("job-prepare", s.ROLE_PREPARE, phase="Succeeded", exit_code=0)


def test_each_kueue_eviction_is_recorded_once_with_the_epoch():
    spec = make_spec()
    st = running_status(progress={"epoch": 4}, queue={"localQueue": "lq", "workload": "grappajob-job",
                                                      "clusterQueue": "cq", "admitted": True})
    p1 = step(QJOB, spec, st, [prep()] + group(), later(100), 1, evicted("Preempted", "for a high one"))
    first = {"time": "2026-01-01T12:01:40Z", "source": "Kueue", "reason": "Preempted",
             "message": "for a high one", "epoch": 4}
    assert p1.status["disruptionHistory"] == [first] and p1.status["queueEvictions"] == 1
    assert p1.disrupted == [("Kueue", "Preempted")]
    # the same eviction seen again while the pods go: no second record
    p2 = step(QJOB, spec, p1.status, [prep()], later(101), 1, evicted("Preempted", "for a high one"))
    assert p2.status["disruptionHistory"] == [first] and p2.disrupted == []
    # readmitted, running again, then a stopped queue evicts it
    p3 = step(QJOB, spec, p2.status, [prep()], later(200), 1, ADMITTED)
    p4 = step(QJOB, spec, p3.status, [prep()] + group(), later(210), 1, ADMITTED)
    assert p4.status["phase"] == "Running"
    p4.status["progress"] = {"epoch": 9}
    p5 = step(QJOB, spec, p4.status, [prep()] + group(), later(300), 1,
              evicted("ClusterQueueStopped", "The ClusterQueue is stopped"))
    assert [(r["reason"], r["epoch"]) for r in p5.status["disruptionHistory"]] == [("Preempted", 4),
                                                                                  ("ClusterQueueStopped", 9)]
    assert p5.status["queueEvictions"] == 2 and p5.status["restarts"] == 0
    GrappaJobStatus.model_validate(p5.status)  # the CRD's status schema takes it


def test_a_pod_disruption_is_recorded_with_kubernetes_reason():
    pods = group()
    pods[2] = PodObs.from_pod({
        "metadata": {"name": "job-worker-2", "labels": {s.LABEL_ROLE: "worker", s.LABEL_RANK: "2", s.LABEL_ATTEMPT: "0"}},
        "status": {"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
            "containerStatuses": [{"name": "grappa", "state": {"terminated": {"exitCode": 143}}}]}})
    plan = step(JOB, make_spec(), running_status(progress={"epoch": 12}), pods, later(50))
    assert plan.status["phase"] == "Restarting" and plan.status["disruptions"] == 1
    (record,) = plan.status["disruptionHistory"]
    assert (record["source"], record["reason"], record["epoch"]) == ("Kubernetes", "EvictionByEvictionAPI", 12)
    assert "job-worker-2" in record["message"] and plan.disrupted == [("Kubernetes", "EvictionByEvictionAPI")]
    assert "queueEvictions" not in plan.status


def test_the_history_keeps_the_newest_entries():
    old = [{"time": f"2026-01-01T11:{i:02d}:00Z", "source": "Kueue", "reason": "Preempted", "epoch": i}
           for i in range(MAX_DISRUPTIONS)]
    st = running_status(progress={"epoch": 99}, disruptionHistory=old, queueEvictions=MAX_DISRUPTIONS)
    plan = step(QJOB, make_spec(), st, [prep()] + group(), later(1), 1, evicted("Preempted", "again"))
    history = plan.status["disruptionHistory"]
    assert len(history) == MAX_DISRUPTIONS and history[0] == old[1] and history[-1]["epoch"] == 99
    assert plan.status["queueEvictions"] == MAX_DISRUPTIONS + 1  # the count is not bounded
