"""What only a real kubelet and real images show: the images' user and read-only root, the trainer's
entry points, who may write to a claim or a hostPath, probes, `kubectl logs` and Service DNS.

Generic pods use the operator image (it has Python and is on every cluster the suite runs on)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

# What the operator puts on every trainer pod (grappa_operator/desired.py) and the chart on its own.
RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
              "capabilities": {"drop": ["ALL"]}}


def _image(kind: str) -> str:
    image = h.OPERATOR_IMAGE if kind == "operator" else h.TRAINER_IMAGE
    if not image:
        pytest.fail(f"GRAPPA_E2E_{kind.upper()}_IMAGE is not set: these tests check the image under test "
                    "(make test and hack/kind-e2e.sh set it)")
    return image


def _pod(name: str, image: str, script: str, *, pod_security: dict[str, Any] | None = None,
         volumes: list[dict[str, Any]] | None = None, mounts: list[dict[str, Any]] | None = None,
         init: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    """A one-container pod running `sh -c script` with a writable /tmp and a read-only root."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                            **(pod_security or {})},
        "containers": [{"name": "main", "image": image, "imagePullPolicy": h.PULL_POLICY,
                        "command": ["sh", "-c", script], "securityContext": RESTRICTED,
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *(mounts or [])],
                        **container}],
        "volumes": [{"name": "tmp", "emptyDir": {}}, *(volumes or [])],
    }
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _run(cluster: Cluster, namespace: str, pod: dict[str, Any], phase: str = "Succeeded") -> str:
    """Creates the pod, waits for it to end and returns `kubectl logs` of its main container."""
    h.apply_file(cluster, namespace, pod)
    name = pod["metadata"]["name"]
    done = cluster.wait_pod_phase(namespace, name, ("Succeeded", "Failed"), timeout=h.scaled(180))
    logs = cluster.container_log(namespace, name, "main")
    assert done["status"]["phase"] == phase, f"{name} ended {done['status']['phase']}:\n{logs}\n" \
                                             f"{cluster.describe_pod(namespace, name)}"
    return logs


def test_images_run_as_10001_with_a_read_only_root(cluster: Cluster, namespace: str) -> None:
    """No runAsUser: the kubelet starts the images' own USER, and runAsNonRoot admits it only
    because that user is numeric and not root."""
    probe = ("import os, errno\n"
             "try:\n    open('/opt/venv/probe', 'w')\n    root = 'writable'\n"
             "except OSError as e:\n    root = errno.errorcode[e.errno]\n"
             "open('/tmp/probe', 'w').write('x')\n"
             "try:\n    import torch\n    torch_state = 'torch ' + torch.__version__\n"
             "except ImportError:\n    torch_state = 'no torch'\n"
             "print(os.getuid(), os.getgid(), root, torch_state)\n")
    for kind in ("operator", "trainer"):
        script = f"python -c \"$PROBE\""
        out = _run(cluster, namespace, _pod(f"user-{kind}", _image(kind), script,
                                            env=[{"name": "PROBE", "value": probe}]))
        uid, gid, root, torch_state = out.split(maxsplit=3)
        assert (uid, gid) == ("10001", "10001"), out
        assert root == "EROFS", out  # the root filesystem is read-only, /tmp (emptyDir) is not
        if kind == "operator":
            assert torch_state.strip() == "no torch", out
        else:
            assert torch_state.startswith("torch "), out


def test_trainer_entry_points_start(cluster: Cluster, namespace: str) -> None:
    """Every command the operator gives a trainer pod parses its flags in the image as built."""
    commands = ["prepare", "aggregator", "worker", "train", "single"]
    script = " && ".join(f"python -m grappa {c} --help >/dev/null && echo {c}-ok" for c in commands)
    out = _run(cluster, namespace, _pod("entry-points", _image("trainer"), script))
    assert out.split() == [f"{c}-ok" for c in commands], out
    out = _run(cluster, namespace, _pod("operator-entry", _image("operator"),
                                        "python -m grappa_operator --help >/dev/null && echo ok"))
    assert out.strip() == "ok", out


def test_claim_is_writable_by_the_trainer_user(cluster: Cluster, namespace: str) -> None:
    """The job's data folder on a ReadWriteOnce claim, with the trainer pods' own security context."""
    h.apply_file(cluster, namespace, h.storage_claim("perm-data"))
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "perm-data"}}
    out = _run(cluster, namespace, _pod(
        "claim-writer", _image("operator"), "mkdir -p /data/runs/x && echo ok >/data/runs/x/f && stat -c '%u %a' /data/runs/x/f",
        pod_security={"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        volumes=[volume], mounts=[{"name": "data", "mountPath": "/data"}]))
    assert out.split() == ["10001", "644"], out


def test_host_path_needs_an_owner_the_trainer_can_write_as(cluster: Cluster, namespace: str) -> None:
    """What docs/operator.md says about hostPath: the kubelet creates a DirectoryOrCreate folder
    as root 0755 and fsGroup does not apply to hostPath, so uid 10001 cannot write until the folder
    is given to it (here by a root init container; on a real node, `chown 10001:10001` once)."""
    path = f"/var/lib/grappa-e2e/{namespace}"
    volume = {"name": "data", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
    mount = [{"name": "data", "mountPath": "/data"}]
    write = "touch /data/f 2>&1 && echo wrote"
    denied = _run(cluster, namespace, _pod("hostpath-root-owned", _image("operator"), write,
                                           pod_security={"runAsUser": 10001, "fsGroup": 10001},
                                           volumes=[volume], mounts=mount), phase="Failed")
    assert "Permission denied" in denied, denied
    chown = {"name": "chown", "image": _image("operator"), "imagePullPolicy": h.PULL_POLICY,
             "command": ["chown", "10001:10001", "/data"], "volumeMounts": mount,
             "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "capabilities": {"add": ["CHOWN"], "drop": ["ALL"]}}}
    allowed = _run(cluster, namespace, _pod("hostpath-chowned", _image("operator"), write,
                                            pod_security={"runAsUser": 10001}, volumes=[volume],
                                            mounts=mount, init=[chown]))
    assert allowed.strip() == "wrote", allowed
    cleanup = {"name": "main", "image": _image("operator"), "imagePullPolicy": h.PULL_POLICY,
               "command": ["rm", "-rf", "/data/f"], "volumeMounts": mount}
    h.apply_file(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hostpath-clean"},
                                      "spec": {"restartPolicy": "Never", "containers": [cleanup], "volumes": [volume],
                                               "securityContext": {"runAsUser": 10001}}})


def test_probes_gate_endpoints_and_restart_containers(cluster: Cluster, namespace: str) -> None:
    """A failing readiness probe keeps a pod out of its Service; a failing liveness probe restarts it."""
    serve = "python -m http.server 8080 --bind 0.0.0.0 --directory /tmp"
    ready = _pod("probed-ready", _image("operator"), serve,
                 readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1})
    unready = _pod("probed-unready", _image("operator"), serve,
                   readinessProbe={"httpGet": {"path": "/", "port": 9999}, "periodSeconds": 1},
                   livenessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2})
    for pod in (ready, unready):
        pod["metadata"]["labels"] = {"app": "probed"}
        pod["spec"]["restartPolicy"] = "Always"
        h.apply_file(cluster, namespace, pod)
    h.apply_file(cluster, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probed"},
                                      "spec": {"selector": {"app": "probed"}, "ports": [{"port": 8080}]}})

    def endpoints() -> list[str]:
        slices = cluster.kubectl_json("get", "endpointslices", "-n", namespace,
                                      "-l", "kubernetes.io/service-name=probed")["items"]
        return sorted(ep["targetRef"]["name"] for s in slices for ep in s.get("endpoints") or []
                      if (ep.get("conditions") or {}).get("ready"))

    cluster.wait_for(lambda: endpoints() == ["probed-ready"], h.scaled(90), "only the ready pod behind the Service")

    def restarted() -> bool:
        st = (cluster.pod(namespace, "probed-unready") or {}).get("status", {})
        return any(c.get("restartCount", 0) >= 1 for c in st.get("containerStatuses", []))

    cluster.wait_for(restarted, h.scaled(90), "the liveness probe to restart probed-unready")
    assert endpoints() == ["probed-ready"]
    reasons = json.dumps([e.get("message", "") for e in h.events(cluster, namespace, "Pod", "probed-unready")])
    assert "probe failed" in reasons, reasons


def test_service_dns_between_pods(cluster: Cluster, namespace: str) -> None:
    """A client pod finds a server pod by its Service's DNS name (CoreDNS, no upstream) and talks to it."""
    server = _pod("dns-server", _image("operator"), "echo hello-over-dns >/tmp/index.html && "
                  "python -m http.server 8080 --bind 0.0.0.0 --directory /tmp",
                  readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1})
    server["metadata"]["labels"] = {"app": "dns-server"}
    h.apply_file(cluster, namespace, server)
    h.apply_file(cluster, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                                      "spec": {"selector": {"app": "dns-server"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    cluster.wait_pod_phase(namespace, "dns-server", ("Running",))
    fqdn = f"echo.{namespace}.svc.cluster.local"
    client = ("import socket, time, urllib.request\n"
              "for _ in range(60):\n"
              "    try:\n"
              f"        print(socket.gethostbyname('{fqdn}'), urllib.request.urlopen('http://echo/', timeout=2).read().decode().strip())\n"
              "        break\n"
              "    except OSError:\n"
              "        time.sleep(1)\n")
    out = _run(cluster, namespace, _pod("dns-client", _image("operator"), 'python -c "$CLIENT"',
                                        env=[{"name": "CLIENT", "value": client}]))
    service_ip = cluster.kubectl_json("get", "service", "echo", "-n", namespace)["spec"]["clusterIP"]
    assert out.split() == [service_ip, "hello-over-dns"], out
