"""A child pod the real API server refuses ends the job Failed at once, with a reason, a message
naming the object, the spec field and the fix, and a Warning Event; the create is not retried
forever (grappa_operator/refusals.py). Every case here is refused at the first pod (prepare), so
no container ever starts."""

from __future__ import annotations

from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

# (id, spec.aggregator settings, expected reason, texts the job's message must contain)
CASES = [
    ("missing-service-account", {"serviceAccountName": "no-such-sa"}, "CreateRefused",
     ["Pod ", "no-such-sa", "spec.aggregator.serviceAccountName"]),
    ("missing-priority-class", {"priorityClassName": "no-such-class"}, "CreateRefused",
     ["Pod ", "no-such-class", "spec.aggregator.priorityClassName"]),
    ("bad-toleration", {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "InvalidChild",
     ["Pod ", "tolerations", "spec.aggregator.tolerations"]),
]


def _assert_failed_at_once(cluster: Cluster, release: h.Release, ns: str, name: str, reason: str,
                           texts: list[str]) -> None:
    job = h.wait_job(cluster, ns, name, lambda j: h.phase(j) == "Failed", "phase Failed",
                     timeout=h.scaled(30), rel=release, fail_on_failed=False)
    st = job["status"]
    assert st["reason"] == reason, st
    for text in texts:
        assert text in st["message"], (text, st)
    assert not h.job_pods(cluster, ns, name), h.diagnostics(cluster, ns, name, release)
    h.job_warnings(cluster, ns, name, lambda e: e["reason"] == reason, f"the {reason} Warning Event")


@pytest.mark.parametrize("aggregator,reason,texts", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_pod_fails_the_job(cluster: Cluster, release: h.Release, namespace: str,
                                   aggregator: dict[str, Any], reason: str, texts: list[str]) -> None:
    name = "refused"
    h.apply_file(cluster, namespace, h.job_manifest(name, aggregator=aggregator))
    _assert_failed_at_once(cluster, release, namespace, name, reason, texts)


def test_quota_that_can_never_fit_fails_the_job(cluster: Cluster, release: h.Release, namespace: str) -> None:
    """A pod count quota of 0: the request alone exceeds the hard limit, so waiting cannot help."""
    h.apply_file(cluster, namespace, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                                      "spec": {"hard": {"pods": "0"}}})
    cluster.wait_for(lambda: cluster.kubectl_json("get", "resourcequota", "no-pods", "-n", namespace)
                     .get("status", {}).get("hard"), h.scaled(30), "the quota controller to fill in status.hard")
    h.apply_file(cluster, namespace, h.job_manifest("over-quota"))
    _assert_failed_at_once(cluster, release, namespace, "over-quota", "QuotaExceeded",
                           ["Pod ", "pods: requested 1 > limited 0", "ResourceQuota"])
