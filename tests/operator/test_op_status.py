"""Every phase/condition transition of the state machine, without a cluster."""
from __future__ import annotations

from grappa_operator import settings as s
from grappa_operator.errors import CreateBlocked, SpecError
from grappa_operator.status import PodObs, refused, step, unblocked

from gj_testlib import T0, cond, group, later, make_spec, pod, prepared_status, running_status, true_states


def test_new_job_is_created_pending_then_preparing(job, spec, t0):
    plan = step(job, spec, None, [], t0, generation=1)
    st = plan.status
    assert st["phase"] == "Preparing" and plan.create_prepare and plan.create_supporting
    assert cond(st, "Created")["status"] == "True"
    assert st["startTime"] == "2026-01-01T12:00:00Z" and st["observedGeneration"] == 1
    assert [e.reason for e in plan.events] == ["Created"]
    # re-running on the written status asks for nothing new (the pod exists now)
    prep = pod("job-prepare", s.ROLE_PREPARE, phase="Pending")
    again = step(job, spec, st, [prep], t0)
    assert not again.create_prepare and again.events == [] and again.status["phase"] == "Preparing"


def test_prepare_success_starts_the_group_with_round_zero(job, spec, t0):
    st = step(job, spec, None, [], t0).status
    prep = pod("job-prepare", s.ROLE_PREPARE, phase="Succeeded", exit_code=0)
    plan = step(job, spec, st, [prep], later(5))
    assert plan.status["prepared"] is True and plan.create_group
    assert plan.status["phase"] == "Pending"
    assert plan.status["rounds"]["current"] == 0 and plan.status["rounds"]["history"][0]["reason"] == "initial"
    assert "Prepared" in [e.reason for e in plan.events]


def test_prepare_exit_3_fails_with_its_message(job, spec, t0):
    st = step(job, spec, None, [], t0).status
    prep = pod("job-prepare", s.ROLE_PREPARE, phase="Failed", exit_code=3,
               message="grappa: error: dataset.path /grappa/x.pt does not exist")
    plan = step(job, spec, st, [prep], later(5))
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "CannotRun"
    # the trainer's error line is the whole message; the Event also names the pod
    assert plan.status["message"] == "grappa: error: dataset.path /grappa/x.pt does not exist"
    assert cond(plan.status, "Failed")["status"] == "True"
    assert plan.events[-1].type == "Warning" and plan.events[-1].message == (
        "pod job-prepare exited with code 3: grappa: error: dataset.path /grappa/x.pt does not exist")


def test_prepare_crash_is_retried(job, spec, t0):
    st = step(job, spec, None, [], t0).status
    prep = pod("job-prepare", s.ROLE_PREPARE, phase="Failed", exit_code=137, message="OOMKilled")
    plan = step(job, spec, st, [prep], later(5))
    assert plan.status["phase"] == "Restarting" and plan.status["restarts"] == 1
    assert plan.delete_pods == ["job-prepare"]
    # once the pod is gone, a new prepare pod is created
    plan2 = step(job, spec, plan.status, [], later(6))
    assert plan2.create_prepare and plan2.status["phase"] == "Preparing"


def test_all_pods_running_enters_running(job, spec, t0):
    st = prepared_status()
    plan = step(job, spec, st, group(phase="Pending"), t0)
    assert plan.status["phase"] == "Pending" and not plan.create_group
    plan = step(job, spec, st, group(), later(3))
    assert plan.status["phase"] == "Running" and plan.entered == "Running"
    assert true_states(plan.status) == ["Running"]
    assert plan.status["runningTime"] == "2026-01-01T12:00:03Z"
    assert plan.status["replicas"]["worker"] == {"desired": 2, "pending": 0, "running": 2, "succeeded": 0, "failed": 0}
    assert plan.status["replicas"]["aggregator"]["running"] == 1


def test_missing_pods_are_created_while_pending(job, spec, t0):
    plan = step(job, spec, prepared_status(), group()[:2], t0)
    assert plan.create_group and plan.status["phase"] == "Pending"


def test_aggregator_success_succeeds_and_cleans_running_pods(job, spec, t0):
    pods = group()
    pods[0] = pod("job-aggregator", s.ROLE_AGGREGATOR, 0, phase="Succeeded", exit_code=0)
    st = running_status(result={"testAcc": 0.8123})
    plan = step(job, spec, st, pods, later(60))
    assert plan.status["phase"] == "Succeeded" and true_states(plan.status) == ["Succeeded"]
    assert cond(plan.status, "Running")["status"] == "False"
    assert plan.status["completionTime"] == "2026-01-01T12:01:00Z"
    assert sorted(plan.delete_pods) == ["job-worker-1", "job-worker-2"]  # cleanPodPolicy Running
    assert "0.8123" in plan.events[-1].message


def test_clean_pod_policy_all_and_none(job, t0):
    pods = group(phase="Succeeded")
    for policy, expected in (("All", 3), ("None", 0)):
        spec = make_spec(runPolicy={"cleanPodPolicy": policy})
        plan = step(job, spec, running_status(), pods, t0)
        assert plan.status["phase"] == "Succeeded" and len(plan.delete_pods) == expected


def test_worker_crash_restarts_whole_group(job, spec, t0):
    pods = group()
    pods[2] = pod("job-worker-2", s.ROLE_WORKER, 2, phase="Failed", exit_code=137, message="Killed")
    plan = step(job, spec, running_status(), pods, later(10))
    st = plan.status
    assert st["phase"] == "Restarting" and st["restarts"] == 1 and st["reason"] == "PodFailed"
    assert true_states(st) == ["Restarting"] and cond(st, "Running")["status"] == "False"
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]
    assert "job-worker-2" in st["message"]
    # while old pods linger (terminating), nothing is created
    lingering = [PodObs(**{**p.__dict__, "deleting": True}) for p in pods]
    plan2 = step(job, spec, st, lingering, later(11))
    assert not plan2.create_group and plan2.status["phase"] == "Restarting" and plan2.delete_pods == []
    # all gone -> new attempt
    plan3 = step(job, spec, st, [], later(12))
    assert plan3.status["phase"] == "Pending" and plan3.create_group and plan3.status["restarts"] == 1
    plan4 = step(job, spec, plan3.status, group(attempt=1), later(13))
    assert plan4.status["phase"] == "Running"


def test_backoff_limit_exceeded_fails(job, t0):
    spec = make_spec(runPolicy={"backoffLimit": 1})
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, attempt=1, phase="Failed", exit_code=1)
    pods = [PodObs(**{**p.__dict__, "attempt": 1}) for p in pods]
    plan = step(job, spec, running_status(restarts=1), pods, t0)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "BackoffLimitExceeded"
    assert "backoffLimit" in plan.status["message"]


def test_exit_code_2_is_permanent(job, spec, t0):
    pods = group()
    pods[0] = pod("job-aggregator", s.ROLE_AGGREGATOR, 0, phase="Failed", exit_code=2,
                  message="grappa: error: training.fanouts: bad")
    plan = step(job, spec, running_status(), pods, t0)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "InvalidConfig"
    assert "training.fanouts" in plan.status["message"]


def test_permanent_failure_wins_over_crash(job, spec, t0):
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, phase="Failed", exit_code=1)
    pods[2] = pod("job-worker-2", s.ROLE_WORKER, 2, phase="Failed", exit_code=3, message="too few nodes")
    plan = step(job, spec, running_status(), pods, t0)
    assert plan.status["reason"] == "CannotRun"


def test_deleted_pod_while_running_restarts(job, spec, t0):
    plan = step(job, spec, running_status(), group()[:2], t0)
    assert plan.status["phase"] == "Restarting" and plan.status["reason"] == "PodDeleted"
    assert "job-worker-2" in plan.status["message"]


def test_pod_being_deleted_while_running_restarts_once_named(job, spec, t0):
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, deleting=True)
    plan = step(job, spec, running_status(), pods, t0)
    assert plan.status["reason"] == "PodDeleted" and plan.status["message"].count("job-worker-1") == 1
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-2"]


def test_pending_past_deadline_fails_naming_pod(job, t0):
    spec = make_spec(runPolicy={"preRunningDeadlineSeconds": 60})
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, phase="Pending",
                  pending_reason="unschedulable: 0/1 nodes have enough cpu")
    assert step(job, spec, prepared_status(), pods, later(59)).status["phase"] == "Pending"
    plan = step(job, spec, prepared_status(), pods, later(61))
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "PodPendingTimeout"
    assert "job-worker-1" in plan.status["message"] and "enough cpu" in plan.status["message"]
    assert "preRunningDeadlineSeconds" in plan.status["message"]


def test_active_deadline(job, t0):
    spec = make_spec(runPolicy={"activeDeadlineSeconds": 100})
    assert step(job, spec, running_status(), group(), later(99)).status["phase"] == "Running"
    plan = step(job, spec, running_status(), group(), later(100))
    assert plan.status["reason"] == "DeadlineExceeded" and len(plan.delete_pods) == 3


def test_suspend_and_resume(job, t0):
    spec = make_spec(runPolicy={"suspend": True})
    plan = step(job, spec, running_status(), group(), t0)
    assert plan.status["phase"] == "Suspended" and true_states(plan.status) == ["Suspended"]
    assert len(plan.delete_pods) == 3 and plan.events[-1].reason == "Suspended"
    again = step(job, spec, plan.status, [], later(1))
    assert again.events == [] and again.status["phase"] == "Suspended"
    resumed = step(job, make_spec(), again.status, [], later(2))
    assert resumed.status["phase"] == "Pending" and resumed.create_group
    assert cond(resumed.status, "Suspended")["status"] == "False"
    assert resumed.status["restarts"] == 0  # resume is not a restart
    assert [e.reason for e in resumed.events] == ["Resumed"]


def test_ttl_deletes_finished_job(job, t0):
    spec = make_spec(runPolicy={"ttlSecondsAfterFinished": 30})
    st = prepared_status("Succeeded", completionTime="2026-01-01T12:00:00Z")
    assert not step(job, spec, st, [], later(29)).delete_job
    assert step(job, spec, st, [], later(30)).delete_job
    assert not step(job, make_spec(), st, [], later(10_000)).delete_job


def test_terminal_is_terminal(job, spec, t0):
    st = prepared_status("Failed", completionTime="2026-01-01T12:00:00Z", reason="CannotRun")
    plan = step(job, spec, st, [], later(5))
    assert plan.status["phase"] == "Failed" and plan.events == [] and not plan.create_group


def test_infeasible_spec_fails_once_naming_field(job, t0):
    spec = make_spec(partitions=200, dataset={"name": "csbm", "synthetic": {"numNodes": 100}})
    plan = step(job, spec, None, [], t0)
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "TooManyPartitions"
    assert "spec.partitions" in plan.status["message"] and "100 nodes" in plan.status["message"]
    assert not (plan.create_prepare or plan.create_group or plan.create_supporting)
    again = step(job, spec, plan.status, [], later(5))
    assert again.events == []  # no retry loop, no event storm


def test_invalid_spec_error_fails(job, t0):
    err = SpecError("InvalidSpec", "invalid spec: spec.grappa.chunks: must be >= partitions")
    plan = step(job, err, None, [], t0)
    assert plan.status["phase"] == "Failed" and "spec.grappa.chunks" in plan.status["message"]


def test_stale_attempt_pods_are_removed_first(job, spec, t0):
    plan = step(job, spec, prepared_status(restarts=1), group(attempt=0), t0)
    assert len(plan.delete_pods) == 3 and not plan.create_group


def test_pod_obs_from_pod_reads_termination_and_pending_reasons():
    raw = {"metadata": {"name": "j-worker-1", "creationTimestamp": "2026-01-01T12:00:00Z",
                        "labels": {s.LABEL_ROLE: "worker", s.LABEL_RANK: "1", s.LABEL_ATTEMPT: "2"}},
           "status": {"phase": "Failed", "containerStatuses": [
               {"name": "grappa", "state": {"terminated": {"exitCode": 3, "message": "grappa: error: partitions"}}}]}}
    p = PodObs.from_pod(raw)
    assert (p.role, p.rank, p.attempt, p.exit_code) == ("worker", 1, 2, 3)
    assert p.message == "grappa: error: partitions" and p.created_at == T0
    pending = {"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no nodes"}]}}
    assert "no nodes" in PodObs.from_pod(pending).pending_reason
    waiting = {"metadata": {"name": "x"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "grappa", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}
    assert "ImagePullBackOff" in PodObs.from_pod(waiting).pending_reason


def test_worker_exit_after_finished_does_not_restart(job, spec, t0):
    pods = group()
    pods[1] = pod("job-worker-1", s.ROLE_WORKER, 1, phase="Failed", exit_code=1, message="connection reset")
    st = running_status(progress={"epoch": 30, "round": 2, "finished": True})
    plan = step(job, spec, st, pods, t0)
    assert plan.status["phase"] == "Running" and plan.delete_pods == []
    pods[0] = pod("job-aggregator", s.ROLE_AGGREGATOR, 0, phase="Succeeded", exit_code=0)
    assert step(job, spec, st, pods, later(1)).status["phase"] == "Succeeded"


def test_unschedulable_prepare_pod_fails_with_the_schedulers_message(job, spec, t0):
    """The default preRunningDeadlineSeconds (600) bounds an Unschedulable pod; the scheduler's words stay."""
    sched = ("0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
             "2 Insufficient memory. preemption: 0/3 nodes are available")
    raw = {"metadata": {"name": "job-prepare", "creationTimestamp": "2026-01-01T12:00:00Z",
                        "labels": {s.LABEL_ROLE: s.ROLE_PREPARE, s.LABEL_ATTEMPT: "0"}},
           "status": {"phase": "Pending", "conditions": [
               {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": sched}]}}
    st = step(job, spec, None, [], t0).status
    prep = PodObs.from_pod(raw)
    assert step(job, spec, st, [prep], later(599)).status["phase"] == "Preparing"
    plan = step(job, spec, st, [prep], later(600))
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "PodPendingTimeout"
    assert sched in plan.status["message"] and "job-prepare" in plan.status["message"]
    assert cond(plan.status, "Failed")["message"] == plan.status["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "PodPendingTimeout")]
    assert plan.delete_pods == ["job-prepare"]  # cleanPodPolicy Running deletes Pending pods too


def test_refused_permanent_fails_with_the_specs_cleanup_policy(job, t0):
    spec = make_spec(runPolicy={"cleanPodPolicy": "None"})
    st = step(job, spec, None, [], t0).status
    plan = refused(job, spec, st, [pod("job-prepare", s.ROLE_PREPARE, phase="Pending")], t0,
                   SpecError("InvalidChild", "Pod job-worker-1 was refused"))
    assert plan.status["phase"] == "Failed" and plan.status["reason"] == "InvalidChild"
    assert plan.entered == "Failed" and plan.delete_pods == [] and plan.status["completionTime"]
    done = refused(job, spec, plan.status, [], later(5), SpecError("InvalidChild", "again"))
    assert done.status == plan.status and not done.events  # a finished job stays as it ended


def test_blocked_waits_then_fails_and_unblocked_clears(job, t0):
    spec = make_spec(runPolicy={"preRunningDeadlineSeconds": 100})
    st = prepared_status()
    err = CreateBlocked("QuotaExceeded", "Pod job-worker-1 does not fit in the namespace's quota now")
    first = refused(job, spec, st, [], t0, err)
    assert first.status["phase"] == "Pending" and first.status["blockedSince"] == "2026-01-01T12:00:00Z"
    assert [e.reason for e in first.events] == ["QuotaExceeded"] and err.message in first.status["message"]
    again = refused(job, spec, first.status, [], later(99), err)
    assert again.status["blockedSince"] == first.status["blockedSince"] and not again.events
    end = refused(job, spec, again.status, [], later(100), err)
    assert end.status["phase"] == "Failed" and end.status["reason"] == "QuotaExceeded"
    assert "blockedSince" not in end.status
    cleared = unblocked(again.status)
    assert "blockedSince" not in cleared and cleared["reason"] == "Pending"
    # without a deadline the wait is unbounded, as for a Pending pod
    forever = make_spec(runPolicy={"preRunningDeadlineSeconds": None})
    assert refused(job, forever, again.status, [], later(10 ** 6), err).status["phase"] == "Pending"
