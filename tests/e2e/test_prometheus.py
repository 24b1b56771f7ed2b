"""Prometheus (Debian's package, hack/install-prometheus.sh) scrapes the operator and the trainer
pods while the happy-path GrappaJob runs; every PromQL expression of the chart's Grafana
dashboards must then return data through Prometheus's HTTP API.

Expressions are evaluated as range queries over the session's run (from just before the job was
applied until now, 1 s steps): the trainers' series end with their pods, so an instant query
after the job would rightly be empty. A failed job is created here so that the "Failed jobs"
panel has something to show."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

DASHBOARDS = sorted((h.CHART / "dashboards").glob("*.json"))


@pytest.fixture(scope="session")
def prom(cluster: Cluster, release: h.Release, request: pytest.FixtureRequest) -> h.Prometheus:
    p = h.prometheus(cluster, release, request)
    if p.error:
        pytest.fail(f"Prometheus is not running: {p.error}")
    return p


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(file, panel title, expr) of every target of every panel, rows included."""
    out: list[tuple[str, str, str]] = []

    def walk(panels: list[dict[str, Any]], fname: str) -> None:
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((fname, p.get("title", f"panel {p.get('id')}"), t["expr"]))
            walk(p.get("panels", []), fname)
    for f in DASHBOARDS:
        walk(json.loads(f.read_text()).get("panels", []), f.name)
    return out


QUERIES = dashboard_queries()
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana template variables -> concrete values; an unknown variable fails loudly."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise AssertionError(f"dashboard uses template variable ${name}, which this test does not know "
                                 f"how to fill: {expr}")
        return values[name]
    return _VAR.sub(sub, expr)


def test_dashboards_have_queries() -> None:
    assert len(DASHBOARDS) >= 2 and len(QUERIES) >= 20, (DASHBOARDS, len(QUERIES))


@pytest.fixture(scope="module")
def failed_job(cluster: Cluster, release: h.Release, prom: h.Prometheus):
    """A job whose first pod the API server refuses (an invalid toleration): Failed at once, no
    pods. (Infeasible specs such as more partitions than nodes are refused at admission now.)"""
    ns = cluster.create_namespace(f"e2e-prom-{uuid.uuid4().hex[:6]}")
    job = h.job_manifest("too-wide", aggregator={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]})
    h.apply_file(cluster, ns, job)
    h.wait_job(cluster, ns, "too-wide", lambda j: h.phase(j) == "Failed", "phase Failed",
               timeout=h.scaled(60), rel=release, fail_on_failed=False)
    yield ns, "too-wide"
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_prometheus_scraped_operator_and_trainers(cluster: Cluster, prom: h.Prometheus, happy: h.JobRun) -> None:
    seen = prom.targets_seen
    assert seen["operator"], seen
    mine = [t for t in seen["trainers"] if t.startswith(f"{happy.namespace}/{happy.name}-")]
    assert f"{happy.namespace}/{happy.name}-aggregator" in mine, seen
    assert any("-worker-" in t for t in mine), seen
    # The operator target is up now; the happy job's aggregator was up while it ran.
    up = prom.query('up{job="grappa-operator"} == 1')
    assert up, (prom.targets(), prom.log_tail())
    agg = prom.query_range(f'up{{namespace_pod="{happy.namespace}/{happy.name}-aggregator"}}',
                           happy.started_wall, time.time())
    assert any(float(v) == 1 for s in agg for _, v in s["values"]), (agg, prom.targets())


def _id(i: int, fname: str, title: str) -> str:
    return f"{fname[:-5]}-{i}-" + re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_")


@pytest.mark.parametrize("fname,title,expr", QUERIES, ids=[_id(i, f, t) for i, (f, t, _) in enumerate(QUERIES)])
def test_dashboard_expression_returns_data(cluster: Cluster, prom: h.Prometheus, happy: h.JobRun,
                                           failed_job: tuple[str, str], fname: str, title: str, expr: str) -> None:
    # The dashboards' $namespace/$job are regex matchers (multi-value): select both the happy job
    # and the failed one, as a user picking the two in Grafana would.
    fns, fname_job = failed_job
    values = {"namespace": f"({happy.namespace}|{fns})", "job": f"({happy.name}|{fname_job})", "__rate_interval": "1m",
              "__interval": "15s", "__range": "5m", "datasource": "prometheus"}
    q = substitute(expr, values)
    end_deadline = time.monotonic() + h.scaled(30)
    while True:  # the failed job's series appears at the next scrape after it failed
        result = prom.query_range(q, happy.started_wall - 5, time.time())
        finite = [float(v) for s in result for _, v in s["values"] if not math.isnan(float(v))]
        if finite or time.monotonic() > end_deadline:
            break
        time.sleep(2)
    assert result, (f"{fname}, panel {title!r}: {q!r} returned no series over the run "
                    f"({time.time() - happy.started_wall:.0f}s); scraped targets: {prom.targets_seen}")
    assert finite, f"{fname}, panel {title!r}: {q!r} returned only NaN: {json.dumps(result)[:1500]}"


def test_operator_per_job_series_keep_their_labels(prom: h.Prometheus, happy: h.JobRun) -> None:
    """The dashboards' legends say {{namespace}}/{{job}} for the operator's per-job gauges, which
    carry the GrappaJob's namespace and name in the labels `namespace` and `job`. Prometheus
    gives every target its own `job` label (and the Prometheus Operator a `namespace` label), so
    without honorLabels on the chart's ServiceMonitor/PodMonitor the GrappaJob's labels are
    renamed to exported_job/exported_namespace and the legends show the scrape job instead."""
    series = prom.query_range("grappa_operator_job_epoch", happy.started_wall, time.time())
    labels = [s["metric"] for s in series]
    ok = any(m.get("job") == happy.name and m.get("namespace") == happy.namespace for m in labels)
    assert prom.honor["operator"], "the chart's operator ServiceMonitor/PodMonitor must set honorLabels"
    assert ok, labels


def test_trainer_series_carry_the_operators_labels(prom: h.Prometheus, happy: h.JobRun) -> None:
    """The trainer PodMonitor trusts no label a pod exposes: `job` and `rank` come from the labels
    the operator puts on its pods, `namespace` from the target, and the trainer's own copies
    (renamed exported_* without honorLabels) are dropped."""
    assert not prom.honor["trainers"], "the trainer PodMonitor must not set honorLabels"
    series = prom.query_range(f'{{__name__=~"grappa_trainer_.+",namespace="{happy.namespace}"}}',
                              happy.started_wall, time.time())
    labels = [s["metric"] for s in series]
    assert labels, prom.targets_seen
    assert {m.get("job") for m in labels} == {happy.name}, labels[:5]
    assert {m.get("rank") for m in labels} == {str(r) for r in range(5)}, labels[:5]  # P = 4
    assert not [k for m in labels for k in m if k.startswith("exported_")], labels[:5]


FAKE_METRICS = "grappa_trainer_loss{{job=\"{job}\",namespace=\"{ns}\",rank=\"0\"}} 4242\n"


def test_a_tenant_pod_cannot_speak_for_another_namespace(cluster: Cluster, prom: h.Prometheus, happy: h.JobRun,
                                                         namespace: str) -> None:
    """A pod any tenant can create, labelled like a trainer, claiming to be the happy job in the
    happy job's namespace: its series lands in its own namespace under its own job label."""
    body = FAKE_METRICS.format(job=happy.name, ns=happy.namespace)
    server = ("import http.server as s\n"
              "class H(s.BaseHTTPRequestHandler):\n"
              "    def do_GET(self):\n"
              f"        b = {body!r}.encode(); self.send_response(200); self.end_headers(); self.wfile.write(b)\n"
              "s.HTTPServer(('0.0.0.0', 9400), H).serve_forever()\n")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "impostor", "labels": {
        "app.kubernetes.io/managed-by": "grappa-operator", "grappa.dev/role": "aggregator",
        "grappa.dev/job-name": "impostor"}},
        "spec": {"containers": [{"name": "metrics", "image": h.OPERATOR_IMAGE or "python:3.11-slim",
                                 "imagePullPolicy": h.PULL_POLICY, "command": ["python", "-c", server],
                                 "ports": [{"name": "metrics", "containerPort": 9400}]}]}}
    h.apply_file(cluster, namespace, pod)
    cluster.wait_pod_phase(namespace, "impostor", ("Running",))

    def scraped() -> list[dict[str, Any]]:
        return prom.query("grappa_trainer_loss == 4242")
    got = cluster.wait_for(scraped, h.scaled(60), "the impostor's series scraped")
    assert [(s["metric"].get("namespace"), s["metric"].get("job")) for s in got] == [(namespace, "impostor")], got
    assert not [k for s in got for k in s["metric"] if k.startswith("exported_")], got
