"""Plain sidecars in a pod template never hang or decide a job (issue 28, item 2): each pod is
judged by its `grappa` container, as a Job judges its main container, and a pod kept Running only
by other containers is deleted once the grappa container is done with it."""
from __future__ import annotations

from typing import Any, Optional

from grappa_operator import settings as s
from grappa_operator.desired import JobRef
from grappa_operator.status import PodObs, step

from gj_testlib import T0, later, make_spec, running_status

JOB = JobRef("job", "ns", "0123456789abcdef")


def raw_pod(name: str, role: str, rank: Optional[int], grappa: dict[str, Any], phase: str = "Running",
            sidecar: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    labels = {s.LABEL_ROLE: role, s.LABEL_ATTEMPT: "0"}
    if rank is not None:
        labels[s.LABEL_RANK] = str(rank)
    statuses = [{"name": "grappa", "state": grappa},
                {"name": "log-shipper", "state": sidecar or {"running": {"startedAt": "2026-01-01T12:00:00Z"}}}]
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T12:00:00Z", "labels": labels},
            "status": {"phase": phase, "containerStatuses": statuses}}


RUNNING = {"running": {"startedAt": "2026-01-01T12:00:00Z"}}


def done(code: int, message: str = "") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "message": message, "reason": "Completed" if code == 0 else "Error"}}


def test_a_pod_is_judged_by_its_grappa_container():
    p = PodObs.from_pod(raw_pod("job-prepare", s.ROLE_PREPARE, None, done(0)))
    assert (p.phase, p.exit_code, p.lingering) == ("Succeeded", 0, True)
    # a sidecar that failed after grappa succeeded neither fails the pod nor lends its exit code
    p = PodObs.from_pod(raw_pod("job-prepare", s.ROLE_PREPARE, None, done(0), phase="Failed",
                                sidecar=done(1, "shipper crashed")))
    assert (p.phase, p.exit_code, p.message, p.lingering) == ("Succeeded", 0, "Completed", False)
    p = PodObs.from_pod(raw_pod("job-worker-1", s.ROLE_WORKER, 1, done(3, "grappa: error: bad row")))
    assert (p.phase, p.exit_code, p.message, p.lingering) == ("Failed", 3, "grappa: error: bad row", True)
    p = PodObs.from_pod(raw_pod("job-worker-1", s.ROLE_WORKER, 1, RUNNING, sidecar=done(0)))
    assert (p.phase, p.exit_code, p.lingering) == ("Running", None, False)


def test_a_pod_between_its_containers_stopping_and_its_terminal_phase_is_kept():
    """The kubelet reports Succeeded a moment after the last container stopped: with no other
    container running, that pod is done but not lingering, so cleanup keeps it (and its log)."""
    raw = raw_pod("job-aggregator", s.ROLE_AGGREGATOR, 0, done(0))
    raw["status"]["containerStatuses"] = raw["status"]["containerStatuses"][:1]  # no sidecar
    agg = PodObs.from_pod(raw)
    assert (agg.phase, agg.lingering) == ("Succeeded", False)
    workers = [PodObs.from_pod(raw_pod(f"job-worker-{r}", s.ROLE_WORKER, r, RUNNING)) for r in (1, 2)]
    plan = step(JOB, make_spec(), running_status(), [agg, *workers], later(60))
    assert plan.status["phase"] == "Succeeded"
    assert sorted(plan.delete_pods) == ["job-worker-1", "job-worker-2"]  # the aggregator stays


def test_prepare_pod_kept_running_by_a_sidecar_moves_on_and_is_deleted():
    spec = make_spec()
    st = step(JOB, spec, None, [], T0).status
    prep = PodObs.from_pod(raw_pod("job-prepare", s.ROLE_PREPARE, None, done(0)))
    plan = step(JOB, spec, st, [prep], later(30))
    assert plan.status["prepared"] is True and plan.status["phase"] == "Pending"
    assert plan.create_group and plan.delete_pods == ["job-prepare"]
    assert [e.reason for e in plan.events] == ["Prepared"]


def _group(agg: dict[str, Any], worker: dict[str, Any] = RUNNING) -> list[PodObs]:
    pods = [raw_pod("job-aggregator", s.ROLE_AGGREGATOR, 0, agg)]
    pods += [raw_pod(f"job-worker-{r}", s.ROLE_WORKER, r, worker) for r in (1, 2)]
    return [PodObs.from_pod(p) for p in pods]


def test_aggregator_done_with_sidecars_running_succeeds_and_cleans_up():
    plan = step(JOB, make_spec(), running_status(), _group(done(0), done(0)), later(60))
    assert plan.status["phase"] == "Succeeded"
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]
    # cleanPodPolicy None keeps them, sidecars and all, as asked
    keep = step(JOB, make_spec(runPolicy={"cleanPodPolicy": "None"}), running_status(),
                _group(done(0), done(0)), later(60))
    assert keep.status["phase"] == "Succeeded" and keep.delete_pods == []


def test_grappa_failure_behind_a_running_sidecar_restarts_or_fails():
    plan = step(JOB, make_spec(), running_status(), _group(RUNNING, done(1, "Traceback")), later(60))
    assert plan.status["phase"] == "Restarting" and plan.status["reason"] == "PodFailed"
    assert sorted(plan.delete_pods) == ["job-aggregator", "job-worker-1", "job-worker-2"]
    st = step(JOB, make_spec(), None, [], T0).status
    prep = PodObs.from_pod(raw_pod("job-prepare", s.ROLE_PREPARE, None, done(3, "grappa: error: x.csv row 2")))
    failed = step(JOB, make_spec(), st, [prep], later(30))
    assert failed.status["phase"] == "Failed" and failed.status["reason"] == "CannotRun"
    assert failed.delete_pods == ["job-prepare"]  # its sidecar would otherwise run forever

