"""What a refused create means: every permanent refusal names the object, the field and the fix."""
from __future__ import annotations

import json

import pytest

from grappa_operator import settings as s
from grappa_operator.refusals import classify, quantity, quota_never_fits

WORKER = {"apiVersion": "v1", "kind": "Pod", "metadata": {
    "name": "demo-worker-1", "labels": {s.LABEL_ROLE: s.ROLE_WORKER}}}
AGGREGATOR = {"apiVersion": "v1", "kind": "Pod", "metadata": {
    "name": "demo-aggregator", "labels": {s.LABEL_ROLE: s.ROLE_AGGREGATOR}}}
PODGROUP = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "demo"}}


def status(message: str, code: int, causes=None) -> str:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}
    if causes:
        body["details"] = {"causes": causes}
    return json.dumps(body)


def test_invalid_pod_field_names_object_field_and_fix():
    body = status('Pod "demo-worker-1" is invalid: spec.tolerations[0].operator: Invalid value: "Maybe"', 422,
                  [{"reason": "FieldValueInvalid", "message": 'Invalid value: "Maybe"',
                    "field": "spec.tolerations[0].operator"}])
    r = classify(WORKER, 422, body)
    assert r is not None and r.permanent and r.reason == "InvalidChild"
    assert "Pod demo-worker-1" in r.message and "spec.tolerations[0].operator" in r.message
    assert r.message.endswith("fix spec.worker.tolerations")


def test_invalid_without_causes_keeps_the_message():
    r = classify(AGGREGATOR, 400, status("the body is not a Pod", 400))
    assert r.permanent and "the body is not a Pod" in r.message and "Pod demo-aggregator" in r.message


@pytest.mark.parametrize("message,needle", [
    ('pods "demo-aggregator" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes '
     '(volume "grappa-data")', "spec.storage.claimName"),
    ('pods "demo-aggregator" is forbidden: violates PodSecurity "restricted:latest": '
     'allowPrivilegeEscalation != false', "spec.aggregator"),
    ('pods "demo-aggregator" is forbidden: error looking up service account ns/trainer: '
     'serviceaccount "trainer" not found', "spec.aggregator.serviceAccountName"),
    ('pods "demo-aggregator" is forbidden: no PriorityClass with name high was found',
     "spec.aggregator.priorityClassName"),
    ('pods is forbidden: User "system:serviceaccount:grappa-system:grappa" cannot create resource '
     '"pods" in API group "" in the namespace "ns"', "Least privilege"),
])
def test_forbidden_is_permanent_with_a_fix(message, needle):
    r = classify(AGGREGATOR, 403, status(message, 403))
    assert r.permanent and r.reason == "CreateRefused"
    assert "Pod demo-aggregator" in r.message and message in r.message and needle in r.message


def test_gang_without_rbac_or_scheduler():
    msg = ('podgroups.scheduling.volcano.sh is forbidden: User "system:serviceaccount:g:g" cannot '
           'create resource "podgroups" in API group "scheduling.volcano.sh" in the namespace "ns"')
    r = classify(PODGROUP, 403, status(msg, 403))
    assert r.permanent and "gangScheduling.volcano" in r.message and "PodGroup demo" in r.message
    missing = classify(PODGROUP, 404, status("the server could not find the requested resource", 404))
    assert missing.reason == "GangSchedulerMissing" and "spec.schedulingPolicy" in missing.message
    pc = classify(PODGROUP, 403, status("no PriorityClass with name x was found", 403))
    assert "spec.schedulingPolicy.priorityClassName" in pc.message


QUOTA = ('pods "demo-worker-1" is forbidden: exceeded quota: compute, requested: limits.cpu={req},'
         'requests.memory=1Gi, used: limits.cpu=3,requests.memory=2Gi, limited: limits.cpu=4,'
         'requests.memory=8Gi')


def test_quota_that_frees_up_waits_and_one_that_never_fits_fails():
    wait = classify(WORKER, 403, status(QUOTA.format(req="2"), 403))
    assert wait.reason == "QuotaExceeded" and not wait.permanent and "Pod demo-worker-1" in wait.message
    never = classify(WORKER, 403, status(QUOTA.format(req="6"), 403))
    assert never.reason == "QuotaExceeded" and never.permanent
    assert "limits.cpu: requested 6 > limited 4" in never.message and "spec.worker.resources" in never.message


@pytest.mark.parametrize("code", [404, 408, 429, 500, 503, 504])
def test_transient_errors_are_retried_unchanged(code):
    assert classify(WORKER, code, status("try again", code)) is None


@pytest.mark.parametrize("body", [None, "", "not json", b"\xff", "[1, 2]", json.dumps({"details": "x"})])
def test_odd_bodies_still_give_a_message(body):
    r = classify(WORKER, 422, body)
    assert r.permanent and r.message.startswith("Pod demo-worker-1 was refused")


def test_quantities():
    assert quantity("500m") == 0.5 and quantity("2Gi") == 2 ** 31 and quantity("4") == 4
    assert quantity("1e3") == 1000 and quantity("x") is None and quantity("3Zi") is None
    assert quota_never_fits("exceeded quota: q, requested: cpu=500m, used: cpu=0, limited: cpu=1") == ""
    assert quota_never_fits("something else") == ""


WORKLOAD = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
    "name": "grappajob-demo", "labels": {s.LABEL_JOB: "demo"}}}


def test_workload_api_missing_is_permanent_and_names_the_label():
    r = classify(WORKLOAD, 404, status("the server could not find the requested resource", 404))
    assert r is not None and r.permanent and r.reason == "KueueMissing"
    assert r.message.startswith("metadata.labels[kueue.x-k8s.io/queue-name]: ")
    assert "kueue.x-k8s.io/v1beta2 is not installed" in r.message
    assert "GrappaJob.v1alpha1.grappa.dev" in r.message and "remove the label" in r.message
    # a Pod's 404 is still transient
    assert classify(WORKER, 404, status("not found", 404)) is None


def test_workload_forbidden_names_the_charts_cluster_role():
    msg = ('workloads.kueue.x-k8s.io is forbidden: User "system:serviceaccount:g:g" cannot create '
           'resource "workloads" in API group "kueue.x-k8s.io" in the namespace "ns"')
    r = classify(WORKLOAD, 403, status(msg, 403))
    assert r.permanent and r.reason == "CreateRefused"
    assert r.message.startswith("Workload grappajob-demo was refused (403): " + msg)
    assert r.message.endswith("; the operator may not create Kueue Workloads: upgrade the chart (its "
                              "ClusterRole grants kueue.x-k8s.io workloads) or remove the queue label")
    assert "Least privilege" not in r.message


def test_invalid_workload_is_permanent_without_a_pod_fix():
    body = status("Workload.kueue.x-k8s.io \"grappajob-demo\" is invalid", 422,
                  [{"field": "spec.podSets[1].count", "message": "must be greater than or equal to 1"}])
    r = classify(WORKLOAD, 422, body)
    assert r.permanent and r.reason == "InvalidChild" and "spec.podSets[1].count" in r.message
    assert "fix spec." not in r.message
