"""Plain manifests, examples and dashboards: least privilege, runnable examples, documented metrics."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from grappa_operator import desired, metrics
from grappa_operator.api import parse_spec

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
DASHBOARDS = sorted((REPO / "charts" / "grappa" / "dashboards").glob("*.json"))
METRIC = re.compile(r"\b(grappa_(?:operator|trainer)_[a-z0-9_]+)")


def docs_of(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_manifests() -> list[dict]:
    return [d for p in sorted(MANIFESTS.glob("*.yaml")) for d in docs_of(p)]


def check_rules(rules: list[dict], where: str) -> None:
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(key, []), f"{where}: wildcard in {key}"
        assert "secrets" not in rule.get("resources", []), f"{where}: must not touch secrets"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), where


def test_rbac_is_least_privilege():
    objs = all_manifests()
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    assert roles
    for role in roles:
        check_rules(role["rules"], role["metadata"]["name"])
    for b in (o for o in objs if o["kind"].endswith("Binding")):
        assert b["roleRef"]["name"] != "cluster-admin"


def test_deployment_has_liveness_and_a_read_only_root():
    # replicas and leader election are the chart's (manifests/operator.yaml is it rendered)
    dep = next(o for o in all_manifests() if o["kind"] == "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["command"] == ["python", "-m", "grappa_operator"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_kustomization_lists_existing_files():
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert (MANIFESTS / res).is_file()


@pytest.mark.parametrize("path", sorted((MANIFESTS / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid_and_runnable(path):
    (obj,) = docs_of(path)
    assert obj["apiVersion"] == "grappa.dev/v1alpha1" and obj["kind"] == "GrappaJob"
    spec = parse_spec(obj["spec"])
    job = desired.JobRef(obj["metadata"]["name"], "default", "0000")
    desired.check_runnable(job, spec)
    assert spec.partitions == 4
    assert spec.grappa.rounds.every > 0  # rounds visible in status during e2e


def test_dashboards_are_grafana_json_with_queries():
    assert {p.name for p in DASHBOARDS} == {"grappa-operator.json", "grappa-training.json"}
    for p in DASHBOARDS:
        dash = json.loads(p.read_text())
        assert dash["uid"] and dash["panels"]
        exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        assert {"namespace", "job"} <= set(variables), p.name
        for name in ("namespace", "job"):  # "All" must match every series, also with no selection
            assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
            assert "grappa_operator_job_phase" in variables[name]["query"]["query"]
        assert exprs
        for e in exprs:
            assert set(re.findall(r"\$(\w+)", e)) <= {"namespace", "job"}, e
            # Every per-job series (operator job gauges; trainer series, whose `namespace` comes from
            # the scrape) is filtered by both variables, always as a regex (multi-value and All).
            for m in re.finditer(r"\b(grappa_(?:operator_job|trainer)_\w+)(\{[^}]*\})?", e):
                if m.group(1) == "grappa_operator_job_restarts_total":  # by reason only
                    continue
                assert 'namespace=~"$namespace"' in (m.group(2) or "") and 'job=~"$job"' in (m.group(2) or ""), e


def _used_metrics() -> set[str]:
    names = set()
    for p in DASHBOARDS:
        for m in METRIC.findall(p.read_text()):
            names.add(re.sub(r"_(bucket|count|sum)$", "", m))
    return names


def test_every_metric_is_documented():
    doc = (REPO / "docs" / "metrics.md").read_text()
    exported = {m.name for m in metrics.REGISTRY.collect() if m.name.startswith("grappa_operator")}
    for suffix in metrics.PROGRESS_GAUGES:
        exported.add(f"grappa_operator_job_{suffix}")
    missing = sorted(n for n in exported | _used_metrics() if n not in doc)
    assert not missing, f"undocumented in docs/metrics.md: {missing}"
