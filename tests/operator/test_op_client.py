"""The Python client for GrappaJobs: the resource it builds is the one the operator accepts, and
it follows a job the kubernetes library's way (a watch of the object, the pod's log stream)."""
from __future__ import annotations

import kubernetes
import pytest

from grappa.config import TrainConfig
from grappa_operator import settings as s
from grappa_operator.api import parse_spec
from grappa_operator.client import GrappaJobClient, job_manifest
from grappa_operator.desired import JobRef, train_config

CONFIG = TrainConfig.model_validate({
    "partitions": 2, "dataset": {"name": "cora"}, "runDir": "/home/me/runs/cora", "metricsPort": 0,
    "model": {"layers": 2, "custom": {"factory": "gatv2:make_model", "codePath": "code/gatv2.py",
                                      "kwargs": {"heads": 4}}},
    "training": {"epochs": 30}})


def test_the_manifest_is_a_spec_the_operator_accepts_with_the_same_training():
    job = job_manifest("cora-gatv2", CONFIG, {"claimName": "grappa-data"}, worker={"resources": {
        "requests": {"cpu": "1"}}})
    assert job["apiVersion"] == s.API_VERSION and job["kind"] == s.KIND
    assert job["metadata"] == {"name": "cora-gatv2"}
    assert "runDir" not in job["spec"] and "metricsPort" not in job["spec"]  # the operator's to set
    spec = parse_spec(job["spec"])
    cfg = train_config(JobRef("cora-gatv2", "ml", "0123456789"), spec)
    assert cfg.model.custom.factory == "gatv2:make_model" and cfg.model.custom.kwargs == {"heads": 4}
    assert cfg.model.custom.code_path == "/grappa/code/gatv2.py"  # relative: on the volume
    assert cfg.training.epochs == 30 and cfg.partitions == 2 and cfg.dataset.name == "cora"
    assert spec.worker.resources.requests == {"cpu": "1"}


def test_a_bad_spec_fails_before_submitting_naming_the_field():
    with pytest.raises(ValueError, match="spec.storage"):
        job_manifest("x", CONFIG, {})
    with pytest.raises(ValueError, match=r"strategy 'full' cannot train model.custom"):
        job_manifest("x", CONFIG.model_dump(by_alias=True) | {"strategy": "full"}, {"claimName": "c"})


class FakeCustom:
    def __init__(self, events):
        self.calls, self.events = [], events

    def create_namespaced_custom_object(self, *args):
        self.calls.append(("create", args))
        return args[-1]

    def list_namespaced_custom_object(self, *args, **kwargs):
        self.calls.append(("list", args, kwargs))
        return self.events

    def delete_namespaced_custom_object(self, *args):
        self.calls.append(("delete", args))


class FakeWatch:
    """kubernetes.watch.Watch's interface: stream(func, *args, **kwargs) yields events/lines."""

    def stream(self, func, *args, **kwargs):
        self.stopped = False
        for item in func(*args, **kwargs):
            if self.stopped:
                return
            yield item

    def stop(self):
        self.stopped = True


class FakeCore:
    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        self.asked = (name, namespace, kwargs)
        lines = ["epoch 1", "epoch 2"]
        return iter(lines) if kwargs.get("follow") else "\n".join(lines)


def client(events=()):
    c = GrappaJobClient("ml", api_client=kubernetes.client.ApiClient())
    c.custom, c.core, c._watch = FakeCustom(list(events)), FakeCore(), FakeWatch
    return c


def job(phase, epoch):
    return {"metadata": {"name": "j", "resourceVersion": str(epoch)},
            "status": {"phase": phase, "progress": {"epoch": epoch}}}


def test_submit_wait_logs_delete():
    events = [{"type": "ADDED", "object": job("Pending", 0)}, {"type": "MODIFIED", "object": job("Running", 1)},
              {"type": "MODIFIED", "object": job("Succeeded", 2)}, {"type": "MODIFIED", "object": job("Running", 9)}]
    c = client(events)
    made = c.submit("j", CONFIG, {"claimName": "grappa-data"})
    assert c.custom.calls[0][1][:4] == (s.GROUP, s.VERSION, "ml", s.PLURAL) and made["metadata"]["name"] == "j"
    seen = []
    final = c.wait("j", on_progress=lambda phase, progress: seen.append((phase, progress["epoch"])))
    assert seen == [("Pending", 0), ("Running", 1), ("Succeeded", 2)]  # stops at a finished phase
    assert final["status"]["phase"] == "Succeeded"
    listed = [call for call in c.custom.calls if call[0] == "list"][0]
    assert listed[2]["field_selector"] == "metadata.name=j"
    assert list(c.logs("j", follow=True)) == ["epoch 1", "epoch 2"]
    assert c.core.asked[0] == "j-aggregator" and c.core.asked[2]["container"] == s.CONTAINER_NAME
    assert list(c.logs("j", role="worker", rank=2)) == ["epoch 1", "epoch 2"] and c.core.asked[0] == "j-worker-2"
    c.delete("j")
    assert c.custom.calls[-1][0] == "delete" and c.custom.calls[-1][1][-1] == "j"


def test_a_deleted_job_ends_the_wait():
    c = client([{"type": "DELETED", "object": job("Running", 1)}])
    with pytest.raises(LookupError, match="was deleted"):
        c.wait("j")
