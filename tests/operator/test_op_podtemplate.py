"""spec.<role>.template merged under what the operator owns (podtemplate.py, through desired.pod)."""
from __future__ import annotations

import pytest

from grappa_operator import desired
from grappa_operator import settings as s
from grappa_operator.errors import SpecError

from gj_testlib import make_spec

JOB = desired.JobRef("job", "ns", "0123456789abcdef")
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gnn"]}]}]}}}


def spec_with(role: str = "worker", **template):
    return make_spec(**{role: {"template": template}})


def worker(spec):
    return desired.pod(JOB, spec, s.ROLE_WORKER, 1, 0)


def test_no_template_changes_nothing():
    plain = worker(make_spec())
    assert worker(spec_with(metadata={}, spec={})) == plain


def test_user_only_fields_are_taken_as_written_and_owned_ones_kept():
    tmpl = {"metadata": {"labels": {"team": "graph"}, "annotations": {"owner": "ml"}},
            "spec": {"affinity": AFFINITY, "runtimeClassName": "gvisor",
                     "imagePullSecrets": [{"name": "creds"}],
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                    "whenUnsatisfiable": "DoNotSchedule"}],
                     "initContainers": [{"name": "warm", "image": "busybox"}]}}
    pod = worker(spec_with(**tmpl))
    meta, ps = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "graph" and meta["labels"][s.LABEL_JOB] == "job"
    assert meta["annotations"]["owner"] == "ml"
    assert ps["affinity"] == AFFINITY and ps["runtimeClassName"] == "gvisor"
    assert ps["imagePullSecrets"] == [{"name": "creds"}] and ps["initContainers"][0]["name"] == "warm"
    assert ps["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert ps["restartPolicy"] == "Never" and ps["containers"][0]["command"] == ["python", "-m", "grappa", "worker"]
    # the aggregator's pods are untouched by the workers' template
    assert "affinity" not in desired.pod(JOB, spec_with(**tmpl), s.ROLE_AGGREGATOR, 0, 0)["spec"]


def test_lists_are_joined_and_mounts_added_to_the_grappa_container():
    pod = worker(make_spec(worker={
        "tolerations": [{"key": "a", "operator": "Exists"}],
        "nodeSelector": {"disk": "ssd"},
        "template": {"spec": {
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "nodeSelector": {"zone": "z1", "disk": "ssd"},
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{"name": "grappa", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                            "envFrom": [{"configMapRef": {"name": "proxy"}}]},
                           {"name": "sidecar", "image": "logger"}]}}}))
    ps = pod["spec"]
    assert [t["key"] for t in ps["tolerations"]] == ["a", "b"]
    assert ps["nodeSelector"] == {"zone": "z1", "disk": "ssd"}
    assert [v["name"] for v in ps["volumes"]] == ["grappa-data", "tmp", "scratch"]
    main, side = ps["containers"]
    assert [m["mountPath"] for m in main["volumeMounts"]] == ["/grappa", "/tmp", "/scratch"]
    assert main["envFrom"] == [{"configMapRef": {"name": "proxy"}}] and side == {"name": "sidecar", "image": "logger"}


def test_defaults_the_user_may_change_win_and_non_root_stays():
    pod = worker(spec_with(spec={"terminationGracePeriodSeconds": 120,
                                 "securityContext": {"fsGroup": 2000, "runAsUser": 2000, "supplementalGroups": [5]}}))
    ps = pod["spec"]
    assert ps["terminationGracePeriodSeconds"] == 120
    sc = ps["securityContext"]
    assert (sc["fsGroup"], sc["runAsUser"], sc["supplementalGroups"], sc["runAsNonRoot"]) == (2000, 2000, [5], True)


@pytest.mark.parametrize("template, field", [
    ({"spec": {"restartPolicy": "Always"}}, "spec.worker.template.spec.restartPolicy"),
    ({"spec": {"serviceAccountName": "x"}}, "spec.worker.template.spec.serviceAccountName"),
    ({"spec": {"schedulerName": "x"}}, "spec.worker.template.spec.schedulerName"),
    ({"spec": {"securityContext": {"runAsNonRoot": False}}}, "spec.worker.template.spec.securityContext"),
    ({"spec": {"securityContext": {"runAsUser": 0}}}, "spec.worker.template.spec.securityContext"),
    ({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}, "spec.worker.template.spec.volumes[0].name"),
    ({"spec": {"containers": [{"name": "grappa", "image": "mine"}]}},
     "spec.worker.template.spec.containers[0].image"),
    ({"spec": {"containers": [{"name": "grappa", "volumeMounts": [{"name": "x", "mountPath": "/grappa"}]}]}},
     "spec.worker.template.spec.containers[0].volumeMounts[0].mountPath"),
    ({"spec": {"containers": [{"image": "nameless"}]}}, "spec.worker.template.spec.containers[0].name"),
    ({"spec": {"nodeSelector": {"disk": "hdd"}}}, "spec.worker.template.spec.nodeSelector[disk]"),
    ({"metadata": {"labels": {s.LABEL_JOB: "other"}}}, f"spec.worker.template.metadata.labels[{s.LABEL_JOB}]"),
    ({"metadata": {"labels": {"grappa.dev/anything": "x"}}}, "spec.worker.template.metadata.labels[grappa.dev/anything]"),
    ({"metadata": {"annotations": {"prometheus.io/port": "1"}}},
     "spec.worker.template.metadata.annotations[prometheus.io/port]"),
])
def test_owned_fields_are_refused_naming_the_field(template, field):
    spec = make_spec(worker={"nodeSelector": {"disk": "ssd"}, "template": template})
    with pytest.raises(SpecError) as err:
        desired.check_runnable(JOB, spec)
    assert err.value.reason == "InvalidSpec" and err.value.message.startswith(field + ":"), err.value.message


def test_hints_say_where_to_set_an_owned_container_field():
    spec = spec_with(spec={"containers": [{"name": "grappa", "resources": {}}]})
    with pytest.raises(SpecError, match=r"set spec\.worker\.resources"):
        desired.check_runnable(JOB, spec)


def test_prepare_pod_takes_the_aggregators_template():
    spec = spec_with("aggregator", metadata={"labels": {"team": "graph"}}, spec={"affinity": AFFINITY})
    prep = desired.prepare_pod(JOB, spec, 0)
    assert prep["metadata"]["labels"]["team"] == "graph" and prep["spec"]["affinity"] == AFFINITY


def test_kueue_workload_counts_what_the_template_adds():
    spec = spec_with(spec={"affinity": AFFINITY, "runtimeClassName": "gvisor"})
    wl = desired.workload(desired.JobRef("job", "ns", "u", queue="lq"), spec)
    workers = wl["spec"]["podSets"][1]["template"]["spec"]
    assert workers["affinity"] == AFFINITY and workers["runtimeClassName"] == "gvisor"


def test_image_default_comes_from_the_operator(monkeypatch):
    assert worker(make_spec())["spec"]["containers"][0]["image"] == s.DEFAULT_TRAINER_IMAGE
    monkeypatch.setenv(s.TRAINER_IMAGE_ENV, "registry.example/grappa-trainer:7")
    assert worker(make_spec())["spec"]["containers"][0]["image"] == "registry.example/grappa-trainer:7"
    named = make_spec(worker={"image": "mine:1"})
    assert worker(named)["spec"]["containers"][0]["image"] == "mine:1"
