"""The test bed itself: version, health, namespaces and real RBAC decisions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def test_version_is_stamped(cluster: Cluster) -> None:
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    server = out["serverVersion"]["gitVersion"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+.*", server) and not server.startswith("v0.0.0"), out
    if cluster.expected_version:
        assert server == cluster.expected_version
        assert out["clientVersion"]["gitVersion"] == cluster.expected_version


def test_api_server_ready(cluster: Cluster) -> None:
    # Ready within a minute (scaled), not at one instant: a check can fail for a moment while
    # the loaded machine builds images beside the bed.
    answers = []

    def ready() -> bool:
        proc = cluster.kubectl("get", "--raw", "/readyz", check=False)
        answers.append((proc.stdout + proc.stderr).strip())
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    try:
        cluster.wait_for(ready, h.scaled(60), "/readyz answering ok", interval=2)
    except AssertionError as exc:
        raise AssertionError(f"/readyz never answered ok; its last answer: {answers[-1:]}") from exc


def test_nodes_ready_and_renewing_leases(cluster: Cluster) -> None:
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    assert nodes, "no nodes"
    for node in nodes:
        name = node["metadata"]["name"]
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["status"]["conditions"]
        lease = cluster.kubectl_json("get", "lease", name, "-n", "kube-node-lease")
        assert lease["spec"]["holderIdentity"] == name


def test_namespace_gets_default_sa_and_root_ca(cluster: Cluster, namespace: str) -> None:
    # serviceaccount controller and root-ca-cert-publisher are running.
    cluster.wait_for(lambda: cluster.kubectl("get", "configmap", "kube-root-ca.crt", "-n", namespace,
                                             check=False).returncode == 0, 30, "kube-root-ca.crt")


def test_rbac_is_enforced(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps",
                    "-n", namespace)
    cluster.kubectl("create", "rolebinding", "cm-reader", "--role=cm-reader",
                    f"--serviceaccount={namespace}:reader", "-n", namespace)
    who = f"--as=system:serviceaccount:{namespace}:reader"

    def can(*args: str) -> str:
        return cluster.kubectl("auth", "can-i", *args, who, check=False).stdout.strip()

    assert can("get", "configmaps", "-n", namespace) == "yes"
    assert can("list", "configmaps", "-n", namespace) == "yes"
    assert can("delete", "configmaps", "-n", namespace) == "no"
    assert can("get", "secrets", "-n", namespace) == "no"
    assert can("get", "configmaps", "-n", "default") == "no"
    assert cluster.kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"  # admin


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: smoke\nversion: 0.1.0\n",
    "values.yaml": "message: hello-from-helm\nimage: python:3.12-slim\npullPolicy: IfNotPresent\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
spec:
  replicas: 1
  selector: {matchLabels: {app: {{ .Release.Name }}-web}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}-web}}
    spec:
      containers:
      - name: web
        image: {{ .Values.image }}
        imagePullPolicy: {{ .Values.pullPolicy }}
        command: ["python", "-m", "http.server", "8000", "--bind", "$(POD_IP)"]
        env:
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: MESSAGE, value: {{ .Values.message | quote }}}
        readinessProbe: {httpGet: {path: /, port: 8000}, periodSeconds: 1}
""",
}


def test_helm_install_deployment_rollout(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """helm -> Deployment -> ReplicaSet -> Pod on a node -> Ready: the path the operator's chart takes."""
    version = cluster.helm("version", "--short").stdout.strip()
    assert version.startswith("v3") or version.startswith("v4"), version
    for rel, text in CHART.items():
        (tmp_path / "smoke" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "smoke" / rel).write_text(text)
    # Any image with Python serves; the operator's is on every cluster the suite runs on.
    image = ["--set", f"image={h.OPERATOR_IMAGE}", "--set", f"pullPolicy={h.PULL_POLICY}"] if h.OPERATOR_IMAGE else []
    cluster.helm("install", "smk", str(tmp_path / "smoke"), "-n", namespace, *image, "--wait", "--timeout", "120s")
    cluster.kubectl("rollout", "status", "deployment/smk-web", "-n", namespace, "--timeout=60s")
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "app=smk-web")["items"]
    assert len(pods) == 1 and pods[0]["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert "smk" in cluster.helm("list", "-n", namespace, "-q").stdout.split()
    cluster.helm("uninstall", "smk", "-n", namespace, "--wait", "--timeout", "120s")
    cluster.wait_for(lambda: not cluster.kubectl_json("get", "pods", "-n", namespace)["items"], 60,
                     "pods of the uninstalled release gone")
