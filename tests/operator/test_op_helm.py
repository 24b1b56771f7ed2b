"""`helm lint` and `helm template` with a real helm (skipped when none is installed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "grappa"
sys.path.insert(0, str(REPO / "hack"))
from manifests import find_helm  # noqa: E402

import kind_bed  # noqa: E402

HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm binary ($GRAPPA_CONTROLPLANE_BIN/helm or PATH)")


@pytest.fixture(scope="module", autouse=True)
def helm_home(tmp_path_factory):
    global HELM_HOME
    kind_bed.require(kind_bed.TOOLS, "helm")  # built by `make test` beside the unit tests
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
    # the only namespaced Role is the leader election's Lease, in the release namespace
    assert [(o["metadata"]["name"], o["metadata"]["namespace"]) for o in objs if o["kind"] == "Role"] == [
        ("grappa-operator-leader", "grappa-system")]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRAPPA_LEADER_LEASE"] == "grappa-system/grappa-operator-leader"
    assert any(o["kind"] == "PodDisruptionBudget" for o in objs)
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
    roles = [o for o in objs if o["kind"] == "Role" and not o["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    # The user-facing roles aggregated into admin/edit/view are bound by nobody but the cluster's
    # own bindings of those roles (test_aggregated_user_roles); the operator's must stay read-only.
    cluster = [o for o in objs if o["kind"] == "ClusterRole"
               and not any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in o["metadata"]["labels"])]
    assert [o["metadata"]["name"] for o in cluster] == ["grappa-operator-discovery"]
    for cr in cluster:  # only read-only discovery stays cluster-wide
        for rule in cr["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}
    dep = next(o for o in objs if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRAPPA_WATCH_NAMESPACES"] == "team-a,team-b"
    assert {o["kind"] for o in objs} >= {"ServiceMonitor", "PodMonitor"}


def test_single_replica_without_election_is_recreated_and_more_needs_election():
    objs = render("replicaCount=1", "leaderElection.enabled=false")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    env = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "GRAPPA_LEADER_LEASE" not in env and not [o for o in objs if o["kind"] == "Role"]
    assert "needs leaderElection.enabled" in helm_fails("template", "x", str(CHART), "--set", "replicaCount=3",
                                                        "--set", "leaderElection.enabled=false")


def helm_fails(*args: str) -> str:
    env = {**os.environ, "HELM_CACHE_HOME": str(HELM_HOME / "cache"),
           "HELM_CONFIG_HOME": str(HELM_HOME / "config"), "HELM_DATA_HOME": str(HELM_HOME / "data")}
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0, f"helm {args} succeeded:\n{proc.stdout[:2000]}"
    return proc.stderr


SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _schema_paths(node: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, sub in node.get("properties", {}).items():
        out.add(prefix + k)
        out |= _schema_paths(sub, prefix + k + ".")
    return out


def _value_paths(node: dict, prefix: str = "", free: frozenset = frozenset()) -> set[str]:
    out = set()
    for k, v in node.items():
        path = prefix + k
        out.add(path)
        if isinstance(v, dict) and path not in free:
            out |= _value_paths(v, path + ".", free)
    return out


def test_schema_covers_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # Maps of free keys (labels, Kubernetes objects passed through) are typed, not enumerated.
    free = frozenset(p for p in _value_paths(values) if _lookup(SCHEMA, p).get("additionalProperties") is not False
                     and "properties" not in _lookup(SCHEMA, p))
    missing = _value_paths(values, free=free) - _schema_paths(SCHEMA)
    assert not missing, f"values.yaml keys without a schema entry: {sorted(missing)}"
    stale = {p for p in _schema_paths(SCHEMA) if p.count(".") < 2} - _value_paths(values)
    assert not stale, f"schema entries no value in values.yaml has: {sorted(stale)}"
    assert SCHEMA["additionalProperties"] is False


def _lookup(schema: dict, path: str) -> dict:
    node = schema
    for part in path.split("."):
        node = node.get("properties", {}).get(part, {})
    return node


@pytest.mark.parametrize("setting,named", [
    ("metrics.prot=9090", "prot"),                    # a typo of a key
    ("watchNamespace={a}", "watchNamespace"),          # a typo at the top level
    ("metrics.port=abc", "/metrics/port"),            # a string where a port goes
    ("metrics.port=70000", "/metrics/port"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("metrics.service.type=Headless", "/metrics/service/type"),
    ("livenessProbe.periodSeconds=0", "/livenessProbe/periodSeconds"),
    ("aggregateRoles.enabled=maybe", "/aggregateRoles/enabled"),
    ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
    ("watchNamespaces={Team_A}", "/watchNamespaces/0"),
])
def test_schema_refuses_bad_values_naming_them(setting, named):
    err = helm_fails("template", "grappa", str(CHART), "--set", setting)
    assert "schema" in err and named in err, err


def test_defaults_and_documented_combinations_pass_the_schema():
    render()
    render("watchNamespaces={a,b}", "gangScheduling.volcano=true", "resources.limits.cpu=1",
           "metrics.service.type=NodePort", "nameOverride=gx", "serviceAccount.create=false",
           "serviceAccount.name=sa", "image.tag=1.2.3", "tolerations[0].operator=Exists")


def test_kube_version_floor():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.30.0-0"
    err = helm_fails("template", "grappa", str(CHART), "--kube-version", "1.29.9")
    assert "kubeVersion" in err or "1.30" in err, err
    render()  # helm's default version satisfies it
    helm("template", "grappa", str(CHART), "--kube-version", "1.30.0")


def names(objs: list[dict]) -> dict[str, str]:
    return {f"{o['kind']}": o["metadata"]["name"] for o in objs if o["kind"] != "CustomResourceDefinition"}


def test_default_names_are_unchanged():
    # tests/e2e/helpers.py Release.fullname and existing installs rely on these.
    for release, base in (("grappa", "grappa-operator"), ("my-grappa", "my-grappa-operator"),
                          ("ops", "ops-grappa-operator")):
        objs = render_release(release)
        dep = next(o for o in objs if o["kind"] == "Deployment")
        assert dep["metadata"]["name"] == base
        svc = next(o for o in objs if o["kind"] == "Service")
        assert svc["metadata"]["name"] == f"{base}-metrics"
        assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "grappa"


def render_release(release: str, *sets: str) -> list[dict]:
    args = ["template", release, str(CHART), "--namespace", "grappa-system"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]


def _all_names(objs: list[dict]) -> list[str]:
    out = [o["metadata"]["name"] for o in objs]
    for o in objs:
        for sub in o.get("subjects", []):
            out.append(sub["name"])
        if "roleRef" in o:
            out.append(o["roleRef"]["name"])
        spec = o.get("spec", {}).get("template", {}).get("spec", {})
        if spec.get("serviceAccountName"):
            out.append(spec["serviceAccountName"])
    return out


def test_name_overrides_are_used_everywhere():
    objs = render_release("rel", "nameOverride=gx", "metrics.serviceMonitor.enabled=true",
                          "metrics.podMonitor.enabled=true", "metrics.trainerPodMonitor.enabled=true")
    for n in _all_names(objs):
        assert n.startswith("rel-gx-operator"), n
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "gx"
    assert dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "gx"
    for o in objs:
        assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "gx", o["metadata"]
    objs = render_release("rel", "fullnameOverride=ops", "watchNamespaces={a}")
    for n in _all_names(objs):
        assert n == "ops" or n.startswith("ops-"), n
    svc = next(o for o in objs if o["kind"] == "Service")
    assert svc["metadata"]["name"] == "ops-metrics"


def test_long_names_stay_within_the_dns_label_limit():
    objs = render_release("r", "fullnameOverride=" + "a" * 63)
    svc = next(o for o in objs if o["kind"] == "Service")
    assert len(svc["metadata"]["name"]) <= 63 and svc["metadata"]["name"].endswith("-metrics")
    # Services are DNS labels (63); the other kinds are DNS subdomains (253).
    assert all(len(o["metadata"]["name"]) <= 63 for o in objs if o["kind"] in ("Service", "Deployment"))
    assert all(len(n) <= 253 for n in _all_names(objs))


def test_aggregated_user_roles():
    objs = render()
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    edit, view = roles["grappa-operator-edit"], roles["grappa-operator-view"]
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in labels
    assert edit["rules"] == [{"apiGroups": ["grappa.dev"], "resources": ["grappajobs"],
                              "verbs": ["create", "update", "patch", "delete", "get", "list", "watch"]}]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert set(view["metadata"]["labels"]) & {"rbac.authorization.k8s.io/aggregate-to-edit",
                                              "rbac.authorization.k8s.io/aggregate-to-admin"} == set()
    assert view["rules"] == [{"apiGroups": ["grappa.dev"], "resources": ["grappajobs", "grappajobs/status"],
                              "verbs": ["get", "list", "watch"]}]
    # Not bound to anything by the chart: the built-in roles' bindings grant them.
    bound = {o["roleRef"]["name"] for o in objs if "roleRef" in o}
    assert not bound & {"grappa-operator-edit", "grappa-operator-view"}
    off = render("aggregateRoles.enabled=false")
    assert not any(o["metadata"]["name"].endswith(("-edit", "-view")) for o in off)


def render_notes(*sets: str) -> str:
    """NOTES.txt as helm renders it after an install (helm template skips it): the same text
    through `tpl` in a copy of the chart."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "grappa"
        shutil.copytree(CHART, copy)
        shutil.copy(copy / "templates" / "NOTES.txt", copy / "notes.src")
        (copy / "templates" / "notes-rendered.yaml").write_text(
            'notes: {{ tpl (.Files.Get "notes.src") . | toJson }}\n')
        args = ["template", "rel", str(copy), "-n", "ops", "--show-only", "templates/notes-rendered.yaml"]
        for s in sets:
            args += ["--set", s]
        return yaml.safe_load(helm(*args))["notes"]


def test_notes_work_without_the_repository():
    notes = render_notes()
    # A packaged chart has no repository checkout: no repo paths, only commands that work anywhere.
    for repo_path in ("manifests/", "charts/", "docs/", "examples/", "hack/", ".md"):
        assert repo_path not in notes, (repo_path, notes)
    assert "kubectl -n ops logs deploy/rel-grappa-operator" in notes
    assert "port-forward svc/rel-grappa-operator-metrics 8080" in notes
    assert "--server-side" in notes and "crds/" in notes
    assert "port-forward" not in render_notes("metrics.service.enabled=false")
