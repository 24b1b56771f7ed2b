"""The kubernetes-client adapter against a recording HTTP server: paths, verbs, content types."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes
import pytest

from gj_testlib import make_spec

from grappa_operator import desired
from grappa_operator.desired import JobRef
from grappa_operator.errors import CreateBlocked, SpecError
from grappa_operator.kubeapi import Kube

POD = {"metadata": {"name": "demo-worker-1", "ownerReferences": [{"uid": "u1"}]}}
STRAY = {"metadata": {"name": "demo-worker-2", "ownerReferences": [{"uid": "old"}]}}


class Recorder(BaseHTTPRequestHandler):
    calls: list = []
    reply: dict = {}

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        Recorder.calls.append((self.command, self.path, self.headers.get("Content-Type"), body))
        status, payload = Recorder.reply.get((self.command, self.path.split("?")[0]), (200, {}))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _handle

    def log_message(self, *args):
        pass


@pytest.fixture
def kube():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    Recorder.calls, Recorder.reply = [], {}
    yield Kube(kubernetes.client.ApiClient(cfg))
    server.shutdown()


def test_job_status_and_pods(kube):
    base = "/apis/grappa.dev/v1alpha1/namespaces/ns/grappajobs/demo"
    Recorder.reply = {("GET", base): (200, {"metadata": {"name": "demo"}}),
                      ("GET", "/api/v1/namespaces/ns/pods"): (200, {"items": [POD, STRAY]})}
    assert kube.get_job("ns", "demo")["metadata"]["name"] == "demo"
    kube.patch_status("ns", "demo", {"phase": "Running"})
    method, path, ctype, body = Recorder.calls[-1]
    assert (method, path, ctype, body) == ("PATCH", base + "/status", "application/merge-patch+json",
                                           {"status": {"phase": "Running"}})
    pods = kube.list_pods(JobRef("demo", "ns", "u1"))
    assert [p["metadata"]["name"] for p in pods] == ["demo-worker-1"]  # other job's leftovers ignored
    from urllib.parse import unquote
    assert "labelSelector=grappa.dev/job-name=demo" in unquote(Recorder.calls[-1][1])


def test_missing_job_is_none_and_404_delete_is_fine(kube):
    Recorder.reply = {("GET", "/apis/grappa.dev/v1alpha1/namespaces/ns/grappajobs/gone"): (404, {}),
                      ("DELETE", "/api/v1/namespaces/ns/pods/gone"): (404, {})}
    assert kube.get_job("ns", "gone") is None
    kube.delete_pod("ns", "gone")


def test_create_is_idempotent_and_refusals_are_spec_errors(kube):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    assert kube.create(pod) is True
    Recorder.reply = {("POST", "/api/v1/namespaces/ns/pods"): (409, {})}
    assert kube.create(pod) is False
    Recorder.reply = {("POST", "/api/v1/namespaces/ns/pods"): (422, {"message": "spec.containers[0].resources: bad"})}
    with pytest.raises(SpecError, match="resources"):
        kube.create(pod)
    pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ns"}}
    Recorder.reply = {("POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups"): (404, {})}
    with pytest.raises(SpecError, match="schedulingPolicy"):
        kube.create(pg)
    Recorder.reply = {}
    job = JobRef("demo", "ns", "u1")
    spec = make_spec(schedulingPolicy={"gang": True}, worker={
        "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}, "tolerations": [{"operator": "Exists"}],
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]})
    objs = desired.supporting_objects(job, spec) + desired.group_pods(job, spec, 0) + [desired.prepare_pod(job, spec, 0)]
    for obj in objs:  # the real client accepts every object the operator builds
        assert kube.create(obj) is True
        sent = Recorder.calls[-1]
        assert sent[0] == "POST" and sent[3] == json.loads(json.dumps(obj)), obj["kind"]
    paths = {c[1] for c in Recorder.calls[-len(objs):]}
    assert paths == {"/api/v1/namespaces/ns/services", "/api/v1/namespaces/ns/serviceaccounts",
                     "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles",
                     "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings",
                     "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups",
                     "/api/v1/namespaces/ns/pods"}
    agg = next(c[3] for c in Recorder.calls if c[3] and c[3]["metadata"]["name"] == "demo-aggregator"
               and c[3].get("kind") == "Pod")
    assert agg["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_event_refers_to_the_job(kube):
    body = {"metadata": {"name": "demo", "namespace": "ns", "uid": "u1"}}
    kube.post_event(body, "Warning", "PodFailed", "pod demo-worker-1 failed", "2030-01-01T00:00:00Z")
    method, path, _, ev = Recorder.calls[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/events")
    assert ev["involvedObject"]["kind"] == "GrappaJob" and ev["involvedObject"]["uid"] == "u1"
    assert ev["reason"] == "PodFailed" and ev["type"] == "Warning"


def test_refusals_over_http(kube):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker-1", "namespace": "ns",
                                                           "labels": {"grappa.dev/role": "worker"}}}
    path = ("POST", "/api/v1/namespaces/ns/pods")
    Recorder.reply = {path: (403, {"kind": "Status", "message": 'pods "demo-worker-1" is forbidden: '
                                   'violates PodSecurity "restricted:latest": runAsNonRoot != true'})}
    with pytest.raises(SpecError) as info:
        kube.create(pod)
    assert info.value.reason == "CreateRefused" and "Pod demo-worker-1" in info.value.message
    Recorder.reply = {path: (403, {"message": "exceeded quota: q, requested: cpu=1, used: cpu=3, limited: cpu=4"})}
    with pytest.raises(CreateBlocked):
        kube.create(pod)
    Recorder.reply = {path: (422, {"message": "invalid", "details": {"causes": [
        {"field": "spec.tolerations[0].effect", "message": "Unsupported value"}]}})}
    with pytest.raises(SpecError, match=r"spec.tolerations\[0\].effect.*fix spec.worker.tolerations"):
        kube.create(pod)
    for code in (429, 500):
        Recorder.reply = {path: (code, {"message": "later"})}
        with pytest.raises(kubernetes.client.rest.ApiException):
            kube.create(pod)


def test_kueue_workloads_and_cluster_objects(kube):
    base = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"
    Recorder.reply = {("GET", base + "/grappajob-demo"): (200, {"metadata": {"name": "grappajob-demo"}}),
                      ("GET", base + "/gone"): (404, {}),
                      ("GET", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/spot"): (200, {"spec": {"nodeLabels": {"a": "b"}}}),
                      ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/nope"): (404, {})}
    assert kube.get_workload("ns", "grappajob-demo")["metadata"]["name"] == "grappajob-demo"
    assert kube.get_workload("ns", "gone") is None
    assert kube.get_cluster_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", "spot") == {"spec": {"nodeLabels": {"a": "b"}}}
    assert kube.get_cluster_object("scheduling.k8s.io", "v1", "priorityclasses", "nope") is None
    Recorder.reply = {("GET", base + "/boom"): (500, {})}
    with pytest.raises(kubernetes.client.rest.ApiException):
        kube.get_workload("ns", "boom")
    # the release patch goes to the status subresource, its null clears the admission
    kube.patch_workload("ns", "grappajob-demo", {"status": {"conditions": [], "admission": None}}, True)
    assert Recorder.calls[-1] == ("PATCH", base + "/grappajob-demo/status", "application/merge-patch+json",
                                  {"status": {"conditions": [], "admission": None}})
    kube.patch_workload("ns", "grappajob-demo", {"spec": {"active": False}})
    assert Recorder.calls[-1] == ("PATCH", base + "/grappajob-demo", "application/merge-patch+json",
                                  {"spec": {"active": False}})


def test_workload_create_and_its_refusals(kube):
    job = JobRef("demo", "ns", "u1", "lq")
    wl = desired.workload(job, make_spec())
    path = ("POST", "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads")
    assert kube.create(wl) is True
    assert Recorder.calls[-1][:2] == path and Recorder.calls[-1][3] == json.loads(json.dumps(wl))
    Recorder.reply = {path: (409, {})}
    assert kube.create(wl) is False
    Recorder.reply = {path: (404, {"kind": "Status", "message": "the server could not find the requested resource"})}
    with pytest.raises(SpecError) as info:
        kube.create(wl)
    assert info.value.reason == "KueueMissing" and "kueue.x-k8s.io/queue-name" in info.value.message
    Recorder.reply = {path: (403, {"message": 'User "x" cannot create resource "workloads"'})}
    with pytest.raises(SpecError, match="ClusterRole grants kueue.x-k8s.io workloads"):
        kube.create(wl)


def test_a_hung_api_server_fails_the_call_instead_of_blocking(monkeypatch):
    """Every call carries a timeout: a server that accepts but never answers raises."""
    import socket
    import urllib3

    from grappa_operator import kubeapi
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts (in the kernel's backlog) and never replies
    monkeypatch.setattr(kubeapi, "REQUEST_TIMEOUT", (1.0, 0.3))
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    cfg.retries = False
    try:
        with pytest.raises(urllib3.exceptions.ReadTimeoutError):
            kubeapi.Kube(kubeapi.TimedApiClient(cfg)).get_job("ns", "demo")
    finally:
        listener.close()
