"""`helm lint` and `helm template` with a real helm (skipped when none is installed)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "grappa"


def find_helm() -> str | None:
    bin_dir = os.environ.get("GRAPPA_CONTROLPLANE_BIN")
    if bin_dir and os.access(Path(bin_dir) / "helm", os.X_OK):
        return str(Path(bin_dir) / "helm")
    found = shutil.which("helm")
    if found:
        return found
    cached = sorted(glob.glob(os.path.expanduser("~/.cache/grappa/controlplane-*/bin/helm")))
    return cached[-1] if cached else None


HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm binary ($GRAPPA_CONTROLPLANE_BIN/helm or PATH)")


@pytest.fixture(scope="module", autouse=True)
def helm_home(tmp_path_factory):
    global HELM_HOME
    HELM_HOME = tmp_path_factory.mktemp("helm")  # helm writes caches: keep them out of $HOME


HELM_HOME = Path("/nonexistent")


def helm(*args: str) -> str:
    env = {**os.environ, "HELM_CACHE_HOME": str(HELM_HOME / "cache"),
           "HELM_CONFIG_HOME": str(HELM_HOME / "config"), "HELM_DATA_HOME": str(HELM_HOME / "data")}
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def render(*sets: str) -> list[dict]:
    args = ["template", "grappa", str(CHART), "--namespace", "grappa-system", "--include-crds"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]


def test_lint_is_clean():
    out = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out
    helm("lint", "--strict", str(CHART), "--set", "watchNamespaces={a,b}",
         "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.trainerPodMonitor.enabled=true")


def test_default_render_cluster_wide():
    objs = render()
    kinds = sorted({o["kind"] for o in objs})
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
            "Service", "ConfigMap"} <= set(kinds)
    assert "Role" not in kinds
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert set(cm["data"]) == {"grappa-operator.json", "grappa-training.json"}
    for role in (o for o in objs if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert "secrets" not in rule["resources"]


def test_namespaced_render_uses_roles():
    objs = render("watchNamespaces={team-a,team-b}", "metrics.serviceMonitor.enabled=true",
                  "metrics.podMonitor.enabled=true", "metrics.trainerPodMonitor.enabled=true")
    roles = [o for o in objs if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    cluster = [o for o in objs if o["kind"] == "ClusterRole"]
    for cr in cluster:  # only read-only discovery stays cluster-wide
        for rule in cr["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}
    dep = next(o for o in objs if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRAPPA_WATCH_NAMESPACES"] == "team-a,team-b"
    assert {o["kind"] for o in objs} >= {"ServiceMonitor", "PodMonitor"}
