"""Desired child objects: names, env contract, security, volumes, RBAC, gang scheduling."""
from __future__ import annotations

import json

import pytest
from gj_testlib import make_spec

from grappa.config import validate_config
from grappa_operator import desired
from grappa_operator import settings as s
from grappa_operator.errors import SpecError


def env_of(pod):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_group_has_aggregator_and_p_workers(job):
    spec = make_spec(partitions=4)
    pods = desired.group_pods(job, spec, attempt=2)
    assert [p["metadata"]["name"] for p in pods] == ["job-aggregator"] + [f"job-worker-{r}" for r in range(1, 5)]
    for rank, p in enumerate(pods):
        env = env_of(p)
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "5"
        assert env["MASTER_ADDR"] == "job-aggregator.ns.svc" and env["MASTER_PORT"] == "29500"
        assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["GRAPPA_JOB_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["GRAPPA_JOB_NAME"] == "job"
        assert p["metadata"]["labels"][s.LABEL_ATTEMPT] == "2"
        assert p["metadata"]["ownerReferences"][0]["uid"] == job.uid
        assert p["metadata"]["ownerReferences"][0]["controller"] is True
        assert p["spec"]["restartPolicy"] == "Never"
        ports = {x["name"]: x["containerPort"] for x in p["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == 9400 and p["metadata"]["annotations"]["prometheus.io/port"] == "9400"
        cmd = p["spec"]["containers"][0]["command"]
        assert cmd == ["python", "-m", "grappa", "aggregator" if rank == 0 else "worker"]


def test_config_env_is_a_valid_train_config(job):
    spec = make_spec(partitions=3, dataset={"name": "csbm"}, grappa={"chunks": 6})
    env = env_of(desired.group_pods(job, spec, 0)[1])
    cfg = validate_config(json.loads(env["GRAPPA_CONFIG"]))
    assert cfg.partitions == 3 and cfg.grappa.chunks == 6
    assert cfg.run_dir == "/grappa/ns/job/01234567" and cfg.store_dir == cfg.run_dir + "/store"
    assert cfg.dataset.root == "/grappa/data"
    assert cfg.metrics_port == 9400


def test_relative_dataset_paths_resolve_on_the_volume(job):
    spec = make_spec(dataset={"name": "file", "path": "graphs/g.pt", "root": "/abs/root"})
    cfg = desired.train_config(job, spec)
    assert cfg.dataset.path == "/grappa/graphs/g.pt" and cfg.dataset.root == "/abs/root"


def test_security_and_volumes(job):
    spec = make_spec(storage={"claimName": "grappa-data", "mountPath": "/data"})
    for p in desired.group_pods(job, spec, 0) + [desired.prepare_pod(job, spec, 0)]:
        c = p["spec"]["containers"][0]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert p["spec"]["securityContext"]["runAsNonRoot"] is True
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert mounts == {"/data": "grappa-data", "/tmp": "tmp"}
        vols = {v["name"]: v for v in p["spec"]["volumes"]}
        assert vols["grappa-data"]["persistentVolumeClaim"] == {"claimName": "grappa-data"}
        assert vols["tmp"] == {"name": "tmp", "emptyDir": {}}


def test_fetched_rounds_go_to_a_worker_emptydir(job):
    """storage.fetch: each worker pod mounts an emptyDir and its config names it storage.localDir;
    the other pods, and a job that reads the store directly, are as before."""
    spec = make_spec(storage={"claimName": "grappa-data", "mountPath": "/data", "fetch": "prefetch"})
    for p in desired.group_pods(job, spec, 0) + [desired.prepare_pod(job, spec, 0)]:
        c = p["spec"]["containers"][0]
        worker = p["metadata"]["labels"][s.LABEL_ROLE] == s.ROLE_WORKER
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert ("/grappa-local" in mounts) == worker
        vols = {v["name"]: v for v in p["spec"]["volumes"]}
        assert (vols.get("grappa-local") == {"name": "grappa-local", "emptyDir": {}}) == worker
        cfg = json.loads(next(e["value"] for e in c["env"] if e["name"] == "GRAPPA_CONFIG"))
        assert cfg["storage"] == {"fetch": "prefetch", "haloRows": "auto", "localDir": "/grappa-local"}
    direct = make_spec(storage={"claimName": "grappa-data"})
    for p in desired.group_pods(job, direct, 0):
        assert "grappa-local" not in {v["name"] for v in p["spec"]["volumes"]}


def test_a_store_in_a_bucket_is_mirrored_on_each_pods_emptydir_with_the_secrets_credentials(job):
    """storage.s3: every pod (prepare, aggregator, workers) mounts the emptyDir, its config puts
    storeDir there (the bucket's local mirror) and names the bucket, and it gets the Secret's
    keys as boto3's variables."""
    s3 = {"endpoint": "http://seaweedfs.storage:8333", "bucket": "graphs", "prefix": "cora/",
          "secretName": "graph-store", "accessKeyIdKey": "id"}
    spec = make_spec(storage={"claimName": "grappa-data", "mountPath": "/data", "fetch": "prefetch", "s3": s3})
    for p in desired.group_pods(job, spec, 0) + [desired.prepare_pod(job, spec, 0)]:
        c = p["spec"]["containers"][0]
        assert {m["mountPath"]: m["name"] for m in c["volumeMounts"]}["/grappa-local"] == "grappa-local"
        assert {"name": "grappa-local", "emptyDir": {}} in p["spec"]["volumes"]
        cfg = json.loads(next(e["value"] for e in c["env"] if e["name"] == "GRAPPA_CONFIG"))
        assert cfg["storeDir"] == "/grappa-local/store"
        assert cfg["storage"]["s3"] == {**s3, "region": "us-east-1", "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"].startswith("AWS_")}
        assert refs == {"AWS_ACCESS_KEY_ID": {"name": "graph-store", "key": "id"},
                        "AWS_SECRET_ACCESS_KEY": {"name": "graph-store", "key": "AWS_SECRET_ACCESS_KEY"}}


def test_only_the_aggregator_gets_a_token(job, spec):
    agg, w1, _ = desired.group_pods(job, spec, 0)
    assert agg["spec"]["automountServiceAccountToken"] is True
    assert agg["spec"]["serviceAccountName"] == "job-aggregator"
    assert w1["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in w1["spec"]
    prep = desired.prepare_pod(job, spec, 0)
    assert prep["spec"]["automountServiceAccountToken"] is False
    assert "RANK" not in env_of(prep) and prep["metadata"]["name"] == "job-prepare"


def test_pod_settings_are_applied(job):
    spec = make_spec(worker={
        "image": "example/grappa:1", "resources": {"requests": {"cpu": 1, "memory": "1Gi"}},
        "nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "k", "operator": "Exists"}],
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}, {"name": "HOME", "value": "/x"}],
        "serviceAccountName": "workers"})
    w = desired.group_pods(job, spec, 0)[1]
    c = w["spec"]["containers"][0]
    assert c["image"] == "example/grappa:1"
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}
    assert w["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert w["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    env = env_of(w)
    assert env["OMP_NUM_THREADS"] == "1" and env["HOME"] == "/x"
    assert [e["name"] for e in c["env"]].count("HOME") == 1
    assert w["spec"]["serviceAccountName"] == "workers"


def test_reserved_env_is_refused(job):
    spec = make_spec(aggregator={"env": [{"name": "RANK", "value": "3"}]})
    with pytest.raises(SpecError, match=r"spec.aggregator.env\[0\].name"):
        desired.check_runnable(job, spec)


def test_service_is_headless_and_selects_the_aggregator(job, spec):
    svc = desired.service(job, spec)
    assert svc["metadata"]["name"] == "job-aggregator" and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {s.LABEL_JOB: "job", s.LABEL_ROLE: "aggregator"}
    assert {p["port"] for p in svc["spec"]["ports"]} == {29500, 9400}


def test_aggregator_rbac_is_limited_to_its_job_status(job, spec):
    sa, role, binding = desired.aggregator_rbac(job, spec)
    assert sa["kind"] == "ServiceAccount" and sa["metadata"]["name"] == "job-aggregator"
    assert role["rules"] == [{"apiGroups": ["grappa.dev"], "resources": ["grappajobs/status"],
                              "resourceNames": ["job"], "verbs": ["get", "patch"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "job-aggregator", "namespace": "ns"}]
    own = make_spec(aggregator={"serviceAccountName": "mine"})
    objs = desired.aggregator_rbac(job, own)
    assert [o["kind"] for o in objs] == ["Role", "RoleBinding"]
    assert objs[1]["subjects"][0]["name"] == "mine"


def test_gang_scheduling(job):
    assert desired.pod_group(job, make_spec()) is None
    spec = make_spec(partitions=4, schedulingPolicy={"gang": True, "queue": "ml"})
    pg = desired.pod_group(job, spec)
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1" and pg["spec"] == {"minMember": 5, "queue": "ml"}
    agg = desired.group_pods(job, spec, 0)[0]
    assert agg["spec"]["schedulerName"] == "volcano"
    assert agg["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job"
    prep = desired.prepare_pod(job, spec, 0)
    assert "scheduling.k8s.io/group-name" not in prep["metadata"].get("annotations", {})
    sp = make_spec(schedulingPolicy={"gang": True, "provider": "scheduler-plugins"})
    assert desired.pod_group(job, sp)["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    w = desired.group_pods(job, sp, 0)[1]
    assert w["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "job"
    assert w["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


@pytest.mark.parametrize("name,over,field", [
    ("job", {"partitions": 20, "dataset": {"name": "csbm", "synthetic": {"numNodes": 10}}}, "spec.partitions"),
    ("job", {"partitions": 4, "dataset": {"name": "cora"}, "grappa": {"chunks": 5000}}, "spec.grappa.chunks"),
    ("job", {"partitions": 4, "dataset": {"name": "rmat", "synthetic": {"scale": 4}}, "grappa": {"chunks": 17}},
     "spec.grappa.chunks"),
    ("job", {"partitions": 200, "dataset": {"name": "ogbn-arxiv"}, "grappa": {"chunks": 200_000}},
     "spec.grappa.chunks"),
    ("job", {"metricsPort": 29500}, "spec.masterPort"),
    ("Bad_Name", {}, "metadata.name"),
    ("x" * 60, {}, "metadata.name"),
])
def test_infeasible_specs(name, over, field):
    spec = make_spec(**over)
    with pytest.raises(SpecError) as info:
        desired.check_runnable(desired.JobRef(name, "ns", "u"), spec)
    assert field in info.value.message


def test_supporting_objects_carry_owner_and_labels(job):
    objs = desired.supporting_objects(job, make_spec(schedulingPolicy={"gang": True}))
    assert [o["kind"] for o in objs] == ["Service", "ServiceAccount", "Role", "RoleBinding", "PodGroup"]
    for o in objs:
        assert o["metadata"]["namespace"] == "ns" and o["metadata"]["labels"][s.LABEL_JOB] == "job"
        assert o["metadata"]["ownerReferences"][0]["kind"] == "GrappaJob"


@pytest.mark.parametrize("cpu,threads", [(None, None), ("500m", "1"), (2, "2"), ("3.5", "3"), ("2500e-3", "2")])
def test_torch_threads_follow_the_cpu_budget(job, cpu, threads):
    res = {"limits": {"cpu": cpu}} if cpu is not None else {}
    w = desired.group_pods(job, make_spec(worker={"resources": res}), 0)[1]
    assert env_of(w).get("GRAPPA_THREADS") == threads


@pytest.mark.parametrize("cpu,workers,want", [(None, None, None), (3, None, 3), ("500m", None, 1), (3, 2, 2)])
def test_prepare_workers_follow_the_prepare_pods_cpu_budget(job, cpu, workers, want):
    """The node's CPU count is not the pod's: unless set, prepare runs one process per CPU it may use."""
    over = {"aggregator": {"resources": {"limits": {"cpu": cpu}}} if cpu is not None else {}}
    if workers is not None:
        over["prepare"] = {"workers": workers}
    spec = make_spec(**over)
    cfg = json.loads(env_of(desired.prepare_pod(job, spec, 0))["GRAPPA_CONFIG"])
    assert cfg["prepare"].get("workers") == want
    others = json.loads(env_of(desired.group_pods(job, spec, 0)[1])["GRAPPA_CONFIG"])
    assert others["prepare"].get("workers") == workers  # only the prepare pod's config changes


# ---- Kueue: the Workload and the admission's placement ------------------------------------------

from grappa_operator import kueue  # noqa: E402

QJOB = desired.JobRef("job", "ns", "0123456789abcdef", "lq")


def test_job_ref_reads_the_queue_label():
    body = {"metadata": {"name": "j", "namespace": "ns", "uid": "u", "labels": {kueue.QUEUE_LABEL: "lq"}}}
    assert desired.JobRef.from_body(body) == desired.JobRef("j", "ns", "u", "lq")
    body["metadata"]["labels"][kueue.QUEUE_LABEL] = ""
    assert desired.JobRef.from_body(body).queue is None
    assert desired.JobRef.from_body({"metadata": {"name": "j"}}).queue is None


def test_workload_has_the_aggregator_and_the_workers_as_pod_sets():
    spec = make_spec(partitions=3,
                     aggregator={"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                     worker={"resources": {"requests": {"cpu": 2}, "limits": {"memory": "4Gi"}},
                             "nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "k", "operator": "Exists"}],
                             "priorityClassName": "batch"})
    wl = desired.workload(QJOB, spec)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2" and wl["kind"] == "Workload"
    meta = wl["metadata"]
    assert meta["name"] == "grappajob-job" and meta["namespace"] == "ns"
    assert meta["labels"] == {s.LABEL_JOB: "job", s.LABEL_MANAGED_BY: s.MANAGED_BY, "app.kubernetes.io/name": "grappa"}
    assert meta["ownerReferences"] == [{"apiVersion": "grappa.dev/v1alpha1", "kind": "GrappaJob", "name": "job",
                                        "uid": "0123456789abcdef", "controller": True, "blockOwnerDeletion": True}]
    body = wl["spec"]
    assert body["queueName"] == "lq" and "priority" not in body and "priorityClassRef" not in body
    agg, workers = body["podSets"]
    assert (agg["name"], agg["count"], workers["name"], workers["count"]) == ("aggregator", 1, "workers", 3)
    assert set(kueue.POD_SETS) == {agg["name"], workers["name"]}
    a, w = agg["template"]["spec"], workers["template"]["spec"]
    assert a["containers"] == [{"name": s.CONTAINER_NAME, "image": s.DEFAULT_TRAINER_IMAGE,
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
    # a limit without a request is the request (the API server defaults the pod so)
    assert w["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    assert w["nodeSelector"] == {"pool": "cpu"} and w["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert w["priorityClassName"] == "batch" and w["restartPolicy"] == "Never"
    assert "nodeSelector" not in a and "tolerations" not in a and "priorityClassName" not in a
    # only what Kueue counts and places: no env, volumes or security context
    assert set(a) == {"restartPolicy", "containers"}
    with pytest.raises(AssertionError):
        desired.workload(desired.JobRef("job", "ns", "u"), spec)  # no queue, no Workload


def test_workload_priority_fields():
    pc = kueue.Priority("kueue.x-k8s.io", "WorkloadPriorityClass", "high", 1000)
    body = desired.workload(QJOB, make_spec(), pc)["spec"]
    assert body["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert body["priority"] == 1000
    pod_pc = desired.workload(QJOB, make_spec(), kueue.Priority("scheduling.k8s.io", "PriorityClass", "p", -5))
    assert pod_pc["spec"]["priorityClassRef"]["kind"] == "PriorityClass" and pod_pc["spec"]["priority"] == -5


SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def test_placement_overrides_the_selector_and_adds_tolerations_once():
    spec = make_spec(worker={"nodeSelector": {"pool": "cpu", "disk": "ssd"},
                             "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                                             {"key": "k", "operator": "Equal", "value": "v"}]})
    place = {s.ROLE_WORKER: kueue.Placement({"pool": "spot", "zone": "a"},
                                            (SPOT, {"key": "gpu", "operator": "Exists"})),
             s.ROLE_AGGREGATOR: kueue.Placement({"pool": "on-demand"}, ())}
    agg, w1, w2 = desired.group_pods(QJOB, spec, 1, place)
    for w in (w1, w2):
        assert w["spec"]["nodeSelector"] == {"pool": "spot", "disk": "ssd", "zone": "a"}
        assert w["spec"]["tolerations"] == [SPOT, {"key": "k", "operator": "Equal", "value": "v"},
                                            {"key": "gpu", "operator": "Exists"}]
    assert agg["spec"]["nodeSelector"] == {"pool": "on-demand"} and "tolerations" not in agg["spec"]
    # the prepare pod runs in the aggregator's admitted share
    prep = desired.prepare_pod(QJOB, spec, 1, place)
    assert prep["spec"]["nodeSelector"] == {"pool": "on-demand"} and "tolerations" not in prep["spec"]
    only_workers = desired.prepare_pod(QJOB, spec, 1, {s.ROLE_WORKER: place[s.ROLE_WORKER]})
    assert "nodeSelector" not in only_workers["spec"]
    # without a placement the pods are exactly what they were
    assert desired.group_pods(QJOB, spec, 1, {}) == desired.group_pods(QJOB, spec, 1)
    assert desired.prepare_pod(QJOB, spec, 0, None) == desired.prepare_pod(QJOB, spec, 0)


def test_placement_does_not_change_the_workload_templates():
    """Kueue computes placement from the templates; the pods get the flavors' labels on admission."""
    spec = make_spec(worker={"nodeSelector": {"pool": "cpu"}})
    w = desired.workload(QJOB, spec)["spec"]["podSets"][1]["template"]["spec"]
    assert w["nodeSelector"] == {"pool": "cpu"}


def test_a_job_without_a_volume_lives_in_the_bucket(job):
    """storage.s3 and no claimName/hostPath: no pod mounts a volume, only its emptyDir; runDir
    is local to each pod, the run's home is the bucket beside the store (the uid's 8 characters,
    as a volume's runDir), and the status names s3:// URIs."""
    s3 = {"endpoint": "http://seaweedfs.storage:8333", "bucket": "graphs", "prefix": "cora/",
          "secretName": "graph-store"}
    spec = make_spec(storage={"fetch": "prefetch", "s3": s3})
    for p in desired.group_pods(job, spec, 0) + [desired.prepare_pod(job, spec, 0)]:
        c = p["spec"]["containers"][0]
        assert {m["name"] for m in c["volumeMounts"]} == {"tmp", "grappa-local"}
        assert all("emptyDir" in v for v in p["spec"]["volumes"])
        cfg = validate_config(json.loads(env_of(p)["GRAPPA_CONFIG"]))
        assert cfg.run_dir == "/grappa-local/run" and cfg.store_dir == "/grappa-local/store"
        assert cfg.storage.run_home.run_prefix == "cora/runs/ns/job/01234567/"
        assert cfg.dataset.root == "/grappa-local/data"  # prepare's own disk: the store goes up
    rd = desired.run_dir(job, spec)
    assert rd == "s3://graphs/cora/runs/ns/job/01234567"
    assert desired.artifacts(rd) == {"model": rd + "/model.pt", "report": rd + "/report.json",
                                     "plot": rd + "/training.png", "checkpoints": rd + "/checkpoints"}
    with pytest.raises(SpecError, match="or neither with s3.bucket"):
        make_spec(storage={"fetch": "prefetch"})


def test_artifacts_live_in_the_run_directory():
    rd = desired.run_dir(QJOB, make_spec())
    assert rd == "/grappa/ns/job/01234567"
    assert desired.artifacts(rd) == {"model": rd + "/model.pt", "report": rd + "/report.json",
                                     "plot": rd + "/training.png", "checkpoints": rd + "/checkpoints",
                                     "logs": rd + "/logs"}


def test_a_predict_job_runs_the_inference_pods_and_lists_its_outputs(job):
    """spec.predict: the same group (the prepare pod prepares spec.dataset), each rank running
    grappa.inference.pod with the model resolved on the volume; its artifacts are the outputs."""
    spec = make_spec(partitions=3, predict={"model": "runs/train/model.pt", "embeddings": 2, "scores": True})
    pods = desired.group_pods(job, spec, 0)
    for rank, p in enumerate(pods):
        cmd = p["spec"]["containers"][0]["command"]
        assert cmd == ["python", "-m", "grappa.inference.pod", "aggregator" if rank == 0 else "worker"]
        env = env_of(p)
        assert json.loads(env["GRAPPA_PREDICT"]) == {
            "model": "/grappa/runs/train/model.pt", "scores": True, "embeddings": 2,
            "embeddingDtype": "float16", "evaluate": True, "out": "predictions"}
        assert env["RANK"] == str(rank)
    assert desired.prepare_pod(job, spec, 0)["spec"]["containers"][0]["command"] == \
        ["python", "-m", "grappa", "prepare"]
    rd = desired.run_dir(job, spec)
    assert desired.artifacts(rd, spec) == {
        "predictions": rd + "/predictions/predictions.npy", "manifest": rd + "/predictions/manifest.json",
        "scores": rd + "/predictions/scores.npy", "embeddings": rd + "/predictions/embeddings.npy",
        "evaluation": rd + "/predictions/evaluation.json"}
    # a training job's pods are unchanged
    assert "GRAPPA_PREDICT" not in env_of(desired.group_pods(job, make_spec(), 0)[0])


def test_a_link_predict_job_passes_its_pair_files_and_lists_the_link_outputs(job):
    spec = make_spec(task="link-prediction", predict={"model": "runs/train/model.pt", "pairs": "pairs.npy",
                                                      "queries": "/srv/q.txt", "topK": 5})
    env = json.loads(env_of(desired.group_pods(job, spec, 0)[1])["GRAPPA_PREDICT"])
    assert (env["pairs"], env["queries"], env["topK"]) == ("/grappa/pairs.npy", "/srv/q.txt", 5)
    assert "candidates" not in env
    rd = desired.run_dir(job, spec)
    assert desired.artifacts(rd, spec) == {
        "embeddings": rd + "/predictions/embeddings.npy", "manifest": rd + "/predictions/manifest.json",
        "pairScores": rd + "/predictions/pair_scores.npy", "topk": rd + "/predictions/topk.npy",
        "topkScores": rd + "/predictions/topk_scores.npy", "evaluation": rd + "/predictions/evaluation.json"}
    from grappa_operator.api import Artifacts
    Artifacts.model_validate(desired.artifacts(rd, spec))
