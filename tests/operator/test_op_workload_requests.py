"""The Workload's pod sets ask Kueue for what the pods will really request (issue 28, item 1).

Kueue counts a pod set's quota with the scheduler's formula over the pod template it is given, so
the oracle here is that formula, written out independently of kueue.template_spec: the larger of
(containers + native sidecars) and the largest init container (plus the sidecars started before
it), plus the pod overhead; a limit without a request is the request. Each pod set's template must
give the same numbers as the pods the operator creates.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from grappa_operator import desired
from grappa_operator import settings as s

from gj_testlib import make_spec

QJOB = desired.JobRef("job", "ns", "0123456789abcdef", "lq")


def _container_requests(c: dict[str, Any]) -> dict[str, Decimal]:
    res = c.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    return {k: parse_quantity(v) for k, v in {**limits, **requests}.items()}  # limits default requests


def _add(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: a.get(k, Decimal(0)) + b.get(k, Decimal(0)) for k in {*a, *b}}


def _max(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: max(a.get(k, Decimal(0)), b.get(k, Decimal(0))) for k in {*a, *b}}


def scheduler_requests(pod_spec: dict[str, Any]) -> dict[str, Decimal]:
    """One pod's requests as kube-scheduler (and Kueue, through the same helper) computes them."""
    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        total = _add(total, _container_requests(c))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in pod_spec.get("initContainers") or []:
        req = _container_requests(c)
        if c.get("restartPolicy") == "Always":  # a native sidecar: runs beside the containers
            total = _add(total, req)
            sidecars = _add(sidecars, req)
            init_peak = _max(init_peak, sidecars)
        else:  # a plain init container runs alone, beside the sidecars started before it
            init_peak = _max(init_peak, _add(req, sidecars))
    total = _max(total, init_peak)
    return _add(total, {k: parse_quantity(v) for k, v in (pod_spec.get("overhead") or {}).items()})


SIDECAR = {"name": "log-shipper", "image": "fluent-bit:3", "restartPolicy": "Always",
           "resources": {"requests": {"cpu": "150m", "memory": "64Mi"}}}
INIT = {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "32Mi"}}}
LIMITS_ONLY = {"name": "metrics-agent", "image": "agent:1", "resources": {"limits": {"cpu": "50m", "memory": "16Mi"}}}


def _spec(worker_template: dict[str, Any], **worker: Any):
    return make_spec(partitions=3,
                     aggregator={"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                                 "template": {"spec": {"initContainers": [SIDECAR]}}},
                     worker={"template": worker_template, **worker})


def _pod_sets(spec) -> dict[str, dict[str, Any]]:
    wl = desired.workload(QJOB, spec)
    return {ps["name"]: ps for ps in wl["spec"]["podSets"]}


def _check_same_as_pods(spec) -> dict[str, dict[str, Decimal]]:
    sets = _pod_sets(spec)
    agg = desired.pod(QJOB, spec, s.ROLE_AGGREGATOR, 0, 0)
    workers = desired.group_pods(QJOB, spec, 0)[1:]
    prep = desired.prepare_pod(QJOB, spec, 0)
    want_agg = scheduler_requests(agg["spec"])
    assert scheduler_requests(sets["aggregator"]["template"]["spec"]) == want_agg
    # the prepare pod runs alone, before the group, inside the aggregator's admitted share
    assert scheduler_requests(prep["spec"]) == want_agg
    for w in workers:
        assert scheduler_requests(sets["workers"]["template"]["spec"]) == scheduler_requests(w["spec"])
    return {name: scheduler_requests(ps["template"]["spec"]) for name, ps in sets.items()}


def test_native_sidecars_are_counted_in_both_pod_sets():
    got = _check_same_as_pods(_spec({"spec": {"initContainers": [SIDECAR]}},
                                    resources={"requests": {"cpu": "1", "memory": "2Gi"}}))
    assert got["workers"] == {"cpu": Decimal("1.150"), "memory": parse_quantity("2Gi") + parse_quantity("64Mi")}
    assert got["aggregator"] == {"cpu": Decimal("0.650"), "memory": parse_quantity("1Gi") + parse_quantity("64Mi")}


def test_a_larger_init_container_sets_the_pod_request():
    # 2 CPUs of init container beside the 150m sidecar started before it > 1 CPU + 150m running
    got = _check_same_as_pods(_spec({"spec": {"initContainers": [SIDECAR, INIT]}},
                                    resources={"requests": {"cpu": "1", "memory": "2Gi"}}))
    assert got["workers"]["cpu"] == Decimal("2.150")
    assert got["workers"]["memory"] == parse_quantity("2Gi") + parse_quantity("64Mi")


def test_the_pod_overhead_is_the_runtime_classs_which_kueue_adds():
    """A template may not set `overhead` (Kubernetes takes it from the RuntimeClass and refuses
    another: test_op_cel.py); the pod sets carry runtimeClassName, from which Kueue adds it."""
    spec = _spec({"spec": {"runtimeClassName": "kata"}}, resources={"requests": {"cpu": "1", "memory": "1Gi"}})
    got = _check_same_as_pods(spec)
    assert got["workers"] == {"cpu": Decimal("1"), "memory": parse_quantity("1Gi")}
    template = _pod_sets(spec)["workers"]["template"]["spec"]
    assert template["runtimeClassName"] == "kata" and "overhead" not in template


def test_limits_without_requests_are_the_requests():
    spec = _spec({"spec": {"containers": [LIMITS_ONLY]}}, resources={"limits": {"cpu": "2", "memory": "4Gi"}})
    got = _check_same_as_pods(spec)
    assert got["workers"] == {"cpu": Decimal("2.050"), "memory": parse_quantity("4Gi") + parse_quantity("16Mi")}
    # written out as requests, as the API server defaults them on the pod: Kueue needs no defaulting
    template = _pod_sets(spec)["workers"]["template"]["spec"]
    for c in template["containers"]:
        assert c["resources"]["requests"] == c["resources"]["limits"], c


def test_only_what_kueue_counts_and_places_is_carried():
    spec = _spec({"spec": {"initContainers": [{**SIDECAR, "env": [{"name": "A", "value": "b"}],
                                               "volumeMounts": [{"name": "tmp", "mountPath": "/x"}]}]}})
    template = _pod_sets(spec)["workers"]["template"]["spec"]
    assert template["initContainers"] == [{"name": "log-shipper", "image": "fluent-bit:3", "restartPolicy": "Always",
                                           "resources": {"requests": {"cpu": "150m", "memory": "64Mi"}}}]
