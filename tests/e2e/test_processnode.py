"""Pods on the test bed: lifecycle, exit codes, volumes, service accounts, Service DNS, deletion,
garbage collection. Written against plain Kubernetes so they also pass on kind (the image is a
stock python image there; on the process node the image is ignored and python is the venv's)."""

from __future__ import annotations

import copy
import json
import sys
import textwrap
import time
from typing import Any

import pytest

from cluster import Cluster
from cluster.procs import group_members

pytestmark = pytest.mark.e2e
IMAGE = "python:3.12-slim"


def pod(name: str, code: str, *, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["python", "-c", textwrap.dedent(code)]}
    container.update(spec.pop("container", {}))
    meta = spec.pop("metadata", {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, **meta},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 5,
                     "containers": [container], **spec}}


def apply(cluster: Cluster, ns: str, *objs: dict[str, Any]) -> None:
    cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}), ns)


def main_status(p: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in p["status"]["containerStatuses"] if c["name"] == "main")


def local_pid(cluster: Cluster, p: dict[str, Any]) -> int:
    cid = main_status(p)["containerID"]
    assert cid.startswith("processnode://"), cid
    return int(cid.split("://")[1])


def pid_alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as dead)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_pod_runs_to_success(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, pod("ok", """
        import sys
        print("hello from", sys.argv[0])
        open("/dev/termination-log", "w").write("all done")
    """))
    p = cluster.wait_pod_phase(namespace, "ok", ("Succeeded", "Failed"))
    assert p["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "ok")
    term = main_status(p)["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term.get("message")) == (0, "Completed", "all done")
    assert "hello from -c" in cluster.kubectl("logs", "ok", "-n", namespace).stdout
    if cluster.has_process_node:
        assert p["status"]["podIP"].startswith("127.")
        assert "hello from -c" in cluster.container_log(namespace, "ok", "main")


def test_failing_pod_reports_exit_code(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, pod("bad", """
        import sys
        print("grappa: error: something broke")
        sys.exit(3)
    """, container={"terminationMessagePolicy": "FallbackToLogsOnError"}))
    p = cluster.wait_pod_phase(namespace, "bad", ("Succeeded", "Failed"))
    assert p["status"]["phase"] == "Failed"
    term = main_status(p)["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert "grappa: error: something broke" in term.get("message", "")


def test_restart_on_failure_keeps_emptydir(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, pod("flaky", """
        import os, sys
        if not os.path.exists("/scratch/tried"):
            open("/scratch/tried", "w").close()
            sys.exit(1)
        print("second attempt")
    """, restart="OnFailure", container={"volumeMounts": [{"name": "s", "mountPath": "/scratch"}]},
        volumes=[{"name": "s", "emptyDir": {}}]))
    p = cluster.wait_pod_phase(namespace, "flaky", ("Succeeded", "Failed"), timeout=120)
    assert p["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "flaky")
    st = main_status(p)
    assert st["restartCount"] == 1
    assert st["lastState"]["terminated"]["exitCode"] == 1


def test_env_volumes_and_init_containers(cluster: Cluster, namespace: str) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
          "data": {"greeting": "hi", "file.txt": "from-configmap"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
              "stringData": {"password": "s3cret"}}
    init = {"name": "init", "image": IMAGE, "command": ["python", "-c",
            "open('/shared/init-was-here', 'w').write('yes')"],
            "volumeMounts": [{"name": "work", "mountPath": "/shared"}]}
    check = """
        import os, sys
        want = {"GREETING": "hi", "PASSWORD": "s3cret", "POD_NAME": "vols", "COMBINED": "hi-vols"}
        got = {k: os.environ.get(k) for k in want}
        assert got == want, (got, want)
        assert os.environ.get("NODE"), "spec.nodeName not exposed"
        assert sys.argv[1:] == ["hi-vols", "$$(GREETING)"], sys.argv  # command is expanded too
        assert open("/cfg/file.txt").read() == "from-configmap"
        assert open("/sec/password").read() == "s3cret"
        assert open("/shared/init-was-here").read() == "yes"
        assert open("/info/name").read() == "vols"
        try:
            open("/cfg/new", "w")
            raise SystemExit("configMap volume is writable")
        except OSError:
            pass
        print("all checks passed")
    """
    p = pod("vols", check, container={
        "args": ["$(COMBINED)", "$$(GREETING)"],
        "env": [
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "COMBINED", "value": "$(GREETING)-$(POD_NAME)"},
        ],
        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"},
                         {"name": "work", "mountPath": "/shared"}, {"name": "info", "mountPath": "/info"}],
    }, initContainers=[init], volumes=[
        {"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "work", "emptyDir": {}},
        {"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
    ])
    apply(cluster, namespace, cm, secret, p)
    done = cluster.wait_pod_phase(namespace, "vols", ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "vols")
    init_st = done["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert init_st["exitCode"] == 0


SA_CHECK = """
    import json, os, ssl, sys, urllib.error, urllib.request
    base = "/var/run/secrets/kubernetes.io/serviceaccount"
    token = open(base + "/token").read()
    ns = open(base + "/namespace").read()
    ctx = ssl.create_default_context(cafile=base + "/ca.crt")
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]

    def status(path):
        req = urllib.request.Request(f"https://{host}:{port}{path}",
                                     headers={"Authorization": "Bearer " + token})
        try:
            return urllib.request.urlopen(req, context=ctx, timeout=10).status
        except urllib.error.HTTPError as e:
            return e.code

    got = {
        "own-configmap": status(f"/api/v1/namespaces/{ns}/configmaps/visible"),
        "own-secret": status(f"/api/v1/namespaces/{ns}/secrets/hidden"),
        "other-namespace": status("/api/v1/namespaces/default/configmaps"),
    }
    try:
        import kubernetes  # the product's way, when the image has the client
        kubernetes.config.load_incluster_config()
        v1 = kubernetes.client.CoreV1Api()
        got["client-get"] = v1.read_namespaced_config_map("visible", ns).data["k"]
    except ImportError:
        got["client-get"] = "v"
    print(json.dumps(got))
    sys.exit(0 if got == {"own-configmap": 200, "own-secret": 403, "other-namespace": 403,
                          "client-get": "v"} else 1)
"""


def test_service_account_token_and_rbac(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl("create", "role", "cm-get", "--verb=get", "--resource=configmaps", "-n", namespace)
    cluster.kubectl("create", "rolebinding", "cm-get", "--role=cm-get",
                    f"--serviceaccount={namespace}:reader", "-n", namespace)
    cluster.kubectl("create", "configmap", "visible", "--from-literal=k=v", "-n", namespace)
    cluster.kubectl("create", "secret", "generic", "hidden", "--from-literal=k=v", "-n", namespace)
    apply(cluster, namespace, pod("sa", SA_CHECK, serviceAccountName="reader",
                                  container={"terminationMessagePolicy": "FallbackToLogsOnError"}))
    p = cluster.wait_pod_phase(namespace, "sa", ("Succeeded", "Failed"))
    assert p["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "sa")


SERVER = """
    import os, socket
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], 8080))
    s.listen()
    while True:  # readiness probes connect too; serve until the pod is deleted
        conn, peer = s.accept()
        with conn:
            msg = conn.recv(100).decode()
            if msg:
                conn.sendall(f"pong {msg} from {os.environ['POD_IP']}".encode())
"""

CLIENT = """
    import os, socket, sys, time
    # A Service shares this pod's name: the pod's own name must not be "resolved".
    assert socket.gethostname() == os.environ["MY_NAME"] == "echo-client", (
        socket.gethostname(), os.environ["MY_NAME"])
    replies = []
    for var in ("HEADLESS", "CLUSTERIP"):
        addr = os.environ[var]
        host, port = addr.rsplit(":", 1)
        for attempt in range(60):
            try:
                with socket.create_connection((host, int(port)), timeout=5) as c:
                    c.sendall(var.encode())
                    reply = c.recv(200).decode()
                    print(var, addr, "->", reply, flush=True)
                    replies.append(reply)
                    break
            except OSError as e:
                print(var, addr, "retry:", e, flush=True)
                time.sleep(1)
        else:
            sys.exit(1)
    open("/dev/termination-log", "w").write("\\n".join(replies))
"""


def test_service_dns_between_pods(cluster: Cluster, namespace: str) -> None:
    labels = {"app": "echo"}
    server = pod("echo-server", SERVER, metadata={"labels": labels}, container={
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "echo", "containerPort": 8080}],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}})
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 8080}]}}
    clusterip = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo-cip"},
                 "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "echo"}]}}
    same_name = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo-client"},
                 "spec": {"selector": {"app": "client"}, "ports": [{"port": 9}]}}
    client = pod("echo-client", CLIENT, metadata={"labels": {"app": "client"}}, container={"env": [
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "HEADLESS", "value": f"echo.{namespace}.svc.cluster.local:8080"},
        {"name": "CLUSTERIP", "value": "echo-cip:80"}]})
    apply(cluster, namespace, headless, clusterip, same_name, server)
    srv = cluster.wait_pod_phase(namespace, "echo-server", ("Running", "Succeeded", "Failed"))
    apply(cluster, namespace, client)
    p = cluster.wait_pod_phase(namespace, "echo-client", ("Succeeded", "Failed"), timeout=120)
    assert p["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "echo-client")
    server_ip = srv["status"]["podIP"]
    replies = main_status(p)["state"]["terminated"].get("message", "")
    assert replies == f"pong HEADLESS from {server_ip}\npong CLUSTERIP from {server_ip}", replies
    if cluster.has_process_node:
        client_ip = p["status"]["podIP"]
        assert server_ip.startswith("127.") and client_ip.startswith("127.") and server_ip != client_ip
        # The product's view is unchanged: the names are only rewritten in the process's env.
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env["CLUSTERIP"] == "echo-cip:80"


def test_readiness_probe(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, pod("web", """
        import http.server, os
        http.server.HTTPServer((os.environ["POD_IP"], 8000), http.server.SimpleHTTPRequestHandler).serve_forever()
    """, restart="Always", container={
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8000}, "periodSeconds": 1},
        "livenessProbe": {"httpGet": {"path": "/", "port": 8000}, "periodSeconds": 2}}))

    def ready() -> bool:
        p = cluster.pod(namespace, "web")
        conds = {c["type"]: c["status"] for c in (p or {}).get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True"
    cluster.wait_for(ready, 60, "pod web Ready")
    assert main_status(cluster.pod(namespace, "web"))["restartCount"] == 0  # type: ignore[arg-type]


def test_deleting_pod_kills_its_processes(cluster: Cluster, namespace: str) -> None:
    if not cluster.has_process_node:
        pytest.skip("process-level check needs the process node")
    # Ignores SIGTERM, so deletion must escalate to SIGKILL after the grace period.
    apply(cluster, namespace, pod("stubborn", """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "600"])
        print("started", flush=True)
        time.sleep(600)
    """, terminationGracePeriodSeconds=2))
    p = cluster.wait_pod_phase(namespace, "stubborn", ("Running",))
    pid = local_pid(cluster, p)
    cluster.wait_for(lambda: "started" in cluster.container_log(namespace, "stubborn", "main"), 30,
                     "process started")
    assert pid_alive(pid)
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", "stubborn", "-n", namespace, "--wait=true", timeout=60)
    took = time.monotonic() - t0
    assert not pid_alive(pid)
    assert not group_members(pid), "the forked `sleep` must go with its process group"
    assert 1.5 < took < 30, took


def test_garbage_collection_of_owned_pod(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner = cluster.kubectl_json("get", "configmap", "owner", "-n", namespace)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    apply(cluster, namespace, pod("owned", "import time; time.sleep(600)", restart="Always",
                                  metadata={"ownerReferences": [ref]}))
    p = cluster.wait_pod_phase(namespace, "owned", ("Running",))
    pid = local_pid(cluster, p) if cluster.has_process_node else None
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    cluster.wait_for(lambda: cluster.pod(namespace, "owned") is None, 90, "owned pod collected")
    if pid is not None:
        assert not pid_alive(pid)


def test_pods_run_the_repo_python_and_cannot_see_the_bed(cluster: Cluster, namespace: str) -> None:
    if not cluster.has_process_node:
        pytest.skip("checks the process node's interpreter mapping")
    assert cluster.local is not None
    secret_key = cluster.local.root / "pki" / "ca.key"
    assert secret_key.exists()
    apply(cluster, namespace, pod("repo", f"""
        import os, sys, grappa
        print("grappa from", grappa.__file__, "python", sys.executable)
        assert not os.path.exists({str(secret_key)!r}), "the test bed's CA key is visible"
        assert not os.path.exists({str(cluster.local.kubeconfig)!r})
    """))
    p = cluster.wait_pod_phase(namespace, "repo", ("Succeeded", "Failed"))
    assert p["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "repo")
    log = cluster.container_log(namespace, "repo", "main")
    assert "/trainer/grappa/" in log and sys.executable in log


def test_pvc_shared_between_pods(cluster: Cluster, namespace: str) -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "runs"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}
    vol = {"volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}}],
           "container": {"volumeMounts": [{"name": "runs", "mountPath": "/runs"}]}}
    apply(cluster, namespace, pvc, pod("writer", "open('/runs/checkpoint', 'w').write('epoch 3')",
                                       **copy.deepcopy(vol)))
    w = cluster.wait_pod_phase(namespace, "writer", ("Succeeded", "Failed"), timeout=120)
    assert w["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "writer")
    apply(cluster, namespace, pod("reader", "assert open('/runs/checkpoint').read() == 'epoch 3'",
                                  **copy.deepcopy(vol)))
    r = cluster.wait_pod_phase(namespace, "reader", ("Succeeded", "Failed"), timeout=120)
    assert r["status"]["phase"] == "Succeeded", cluster.describe_pod(namespace, "reader")
    assert cluster.kubectl_json("get", "pvc", "runs", "-n", namespace)["status"]["phase"] == "Bound"
    # pvc-protection finalizers are lifted by the controllers, so the namespace can go away.
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=90s", timeout=120)
