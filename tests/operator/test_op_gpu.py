"""GPUs requested are not used (the trainer runs on CPU only): a Warning Event when the job is
accepted, naming each GPU field, and the CRD's resources description says so."""
from __future__ import annotations

import yaml

from grappa_operator import crdgen, gpu
from grappa_operator.status import step

from gj_testlib import make_spec


def _warnings(spec, job, t0):
    plan = step(job, spec, None, [], t0)
    return [e for e in plan.events if e.type == "Warning"], plan


def test_gpu_request_gets_a_warning_naming_the_field(job, t0):
    spec = make_spec(worker={"resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}}})
    warn, plan = _warnings(spec, job, t0)
    assert [e.reason for e in warn] == ["GPUNotUsed"]
    assert "spec.worker.resources.limits[nvidia.com/gpu]" in warn[0].message
    assert "CPU only" in warn[0].message
    assert plan.status["phase"] == "Preparing"  # a warning, not a refusal: the job runs
    # announced once, when the job is accepted: the next reconcile says nothing new
    again = step(job, spec, plan.status, [], t0)
    assert not [e for e in again.events if e.type == "Warning"]


def test_other_gpu_resources_are_recognised(job, t0):
    spec = make_spec(aggregator={"resources": {"requests": {"amd.com/gpu": 1, "nvidia.com/mig-1g.5gb": 1}}})
    assert gpu.requested(spec) == ["spec.aggregator.resources.requests[amd.com/gpu]",
                                   "spec.aggregator.resources.requests[nvidia.com/mig-1g.5gb]"]


def test_cpu_only_job_gets_no_warning(job, t0):
    spec = make_spec(worker={"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}})
    warn, _ = _warnings(spec, job, t0)
    assert warn == []


def test_crd_describes_gpus_as_unused():
    crd = yaml.safe_load(crdgen.render())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for role in ("aggregator", "worker"):
        desc = spec["properties"][role]["properties"]["resources"]["description"]
        assert "nvidia.com/gpu" in desc and "CPU only" in desc and "GPUNotUsed" in desc
