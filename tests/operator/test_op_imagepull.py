"""A pod whose image cannot be pulled fails the job within a minute, naming the image and the
setting to change, instead of waiting out preRunningDeadlineSeconds (600 s)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from grappa_operator import imagepull
from grappa_operator import settings as s
from grappa_operator.status import PodObs, step

from gj_testlib import T0, later, make_spec, prepared_status

IMAGE = "127.0.0.1:9/team/grappa-trainer:0.1.0"


def pending_pod(name: str, role: str, reason: str, rank: int | None = None, container: str = "grappa",
                init: bool = False, age: float = 0.0) -> PodObs:
    """A Pending pod as the kubelet reports it (containerStatuses[].state.waiting)."""
    labels = {s.LABEL_ROLE: role, s.LABEL_ATTEMPT: "0"}
    if rank is not None:
        labels[s.LABEL_RANK] = str(rank)
    waiting = {"reason": reason, "message": f'Back-off pulling image "{IMAGE}"' if reason == "ImagePullBackOff"
               else f'failed to pull and unpack image "{IMAGE}": connection refused'}
    statuses = [{"name": container, "image": IMAGE, "ready": False, "state": {"waiting": waiting}}]
    status = {"phase": "Pending", "initContainerStatuses" if init else "containerStatuses": statuses}
    created = (T0 - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return PodObs.from_pod({"metadata": {"name": name, "labels": labels, "creationTimestamp": created},
                            "status": status})


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_a_failing_pull_fails_the_job_after_the_grace(job, t0, reason):
    spec = make_spec(aggregator={"image": IMAGE})
    st = step(job, spec, None, [], t0).status
    prep = pending_pod("job-prepare", s.ROLE_PREPARE, reason)
    plan = step(job, spec, st, [prep], later(imagepull.PULL_GRACE_SECONDS - 1))
    assert plan.status["phase"] == "Preparing", "a registry blip gets the grace period"
    plan = step(job, spec, st, [prep], later(imagepull.PULL_GRACE_SECONDS))
    st = plan.status
    assert st["phase"] == "Failed" and st["reason"] == "ImagePullFailed"
    assert IMAGE in st["message"] and "job-prepare" in st["message"] and reason in st["message"]
    assert "set spec.aggregator.image" in st["message"]  # the prepare pod runs with the aggregator's
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["ImagePullFailed"]
    assert plan.delete_pods == ["job-prepare"]  # cleanPodPolicy Running: the Pending pod goes too
    assert imagepull.PULL_GRACE_SECONDS + 5 < 60  # + one resync: Failed within a minute


@pytest.mark.parametrize("reason", ["InvalidImageName", "ErrImageNeverPull"])
def test_a_pull_that_can_never_work_fails_at_once(job, t0, reason):
    spec = make_spec(worker={"image": IMAGE})
    pods = [pending_pod("job-aggregator", s.ROLE_AGGREGATOR, "ContainerCreating", rank=0),
            pending_pod("job-worker-1", s.ROLE_WORKER, reason, rank=1),
            pending_pod("job-worker-2", s.ROLE_WORKER, "ContainerCreating", rank=2)]
    plan = step(job, spec, prepared_status(), pods, t0)
    st = plan.status
    assert st["phase"] == "Failed" and st["reason"] == "ImagePullFailed", st
    assert "job-worker-1" in st["message"] and IMAGE in st["message"] and "spec.worker.image" in st["message"]


def test_the_default_image_names_the_chart_value(job, t0):
    spec = make_spec()  # no image: the operator's default (chart value trainerImage / imageRegistry)
    prep = pending_pod("job-prepare", s.ROLE_PREPARE, "ImagePullBackOff", age=45)
    st = step(job, spec, step(job, spec, None, [], t0).status, [prep], t0).status
    assert st["reason"] == "ImagePullFailed"
    assert "imageRegistry" in st["message"] and "trainerImage" in st["message"]
    assert "make images REGISTRY=" in st["message"]


def test_a_template_sidecar_names_its_container(job, t0):
    spec = make_spec()
    prep = pending_pod("job-prepare", s.ROLE_PREPARE, "InvalidImageName", container="proxy", init=True)
    st = step(job, spec, step(job, spec, None, [], t0).status, [prep], t0).status
    assert st["reason"] == "ImagePullFailed"
    assert "container 'proxy' in spec.aggregator.template.spec" in st["message"]


def test_pulling_or_creating_is_not_an_error(job, t0):
    spec = make_spec()
    st = step(job, spec, None, [], t0).status
    prep = pending_pod("job-prepare", s.ROLE_PREPARE, "ContainerCreating", age=300)
    plan = step(job, spec, st, [prep], t0)
    assert plan.status["phase"] == "Preparing" and prep.pull_error is None
