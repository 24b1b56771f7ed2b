"""manifests/ is the chart rendered with its defaults (`make manifests`, hack/manifests.py): a
drifted file fails here naming the fix, and what the chart grants namespace users, Kueue and
leader election is in the plain install too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
SCRIPT = REPO / "hack" / "manifests.py"
sys.path.insert(0, str(REPO / "hack"))
import manifests as gen  # noqa: E402

HELM = gen.find_helm()
needs_helm = pytest.mark.skipif(HELM is None, reason="no helm binary: `make controlplane` builds one")


def objects() -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / "operator.yaml").read_text()) if d]


def check(output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--output", str(output)],
                          capture_output=True, text=True, timeout=120)


@needs_helm
def test_checked_in_manifests_are_the_rendered_chart():
    out = check(MANIFESTS / "operator.yaml")
    assert out.returncode == 0, out.stderr


@needs_helm
def test_a_drifted_file_is_reported_with_the_fix(tmp_path):
    copy = tmp_path / "operator.yaml"
    copy.write_text((MANIFESTS / "operator.yaml").read_text().replace("replicas: 2", "replicas: 1"))
    out = check(copy)
    assert out.returncode == 1 and "run `make manifests`" in out.stderr and str(copy) in out.stderr


def test_kustomization_is_the_crd_the_namespace_and_the_rendered_chart():
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert kust["resources"] == ["crd.yaml", "namespace.yaml", "operator.yaml"]
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml")) == ["crd.yaml", "kustomization.yaml", "namespace.yaml",
                                                                "operator.yaml"]
    ns = yaml.safe_load((MANIFESTS / "namespace.yaml").read_text())["metadata"]["name"]
    for obj in objects():
        assert obj["metadata"].get("namespace", ns) == ns, obj["metadata"]
        assert not {"helm.sh/chart", "app.kubernetes.io/managed-by"} & set(obj["metadata"].get("labels", {}))


def test_namespace_users_get_aggregated_roles():
    roles = {o["metadata"]["name"]: o for o in objects() if o["kind"] == "ClusterRole"}
    edit, view = roles["grappa-operator-edit"], roles["grappa-operator-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "create" in edit["rules"][0]["verbs"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"


def test_kueue_rules_and_leader_election():
    objs = objects()
    operator = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "grappa-operator")
    assert any("workloads" in r["resources"] for r in operator["rules"]), operator["rules"]
    lease = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "grappa-operator-leader")
    assert any("leases" in r["resources"] for r in lease["rules"])
    dep = next(o for o in objs if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRAPPA_LEADER_LEASE"] == "grappa-system/grappa-operator-leader"
    assert dep["spec"]["replicas"] == 2 and any(o["kind"] == "PodDisruptionBudget" for o in objs)
