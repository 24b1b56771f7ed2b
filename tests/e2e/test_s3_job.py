"""A GrappaJob without a volume (no claim, no hostPath, no PVC at all): its store and its run live
in a bucket of SeaweedFS running in the test's namespace. The job Succeeds with s3:// artifacts,
then `grappa predict --model s3://...` in a pod of the trainer image predicts from the same
bucket and uploads its outputs beside the model.

SeaweedFS is the bed's own `weed` (hack/seaweedfs.sh, a static Go binary), which the node mounts
from the host (hack/kind/README.md: $GRAPPA_E2E_NODE_WEED names it in the node), run by a pod of
the operator image through a hostPath: no image is built or loaded for it. A pod of the trainer
image makes the bucket once the gateway takes writes (boto3). Everything is in the test's
namespace and goes with it; the test starts no process on the host.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.seaweedfs]

NODE_WEED = os.environ.get("GRAPPA_E2E_NODE_WEED", "")  # weed's path in the node (the bed sets it)
BUCKET, PREFIX, SECRET, S3_PORT = "grappa-e2e", "csbm/", "seaweedfs", 8333
RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}

# hack/weed_server.py's master settings (MASTER_TOML): one volume a collection, no wait for veteran volume servers
MASTER_TOML = '[master.volume_growth]\ncopy_1 = 1\nallocation_deferral = "0s"\n'

# The bucket, once the gateway takes writes (some 8 s after weed starts: hack/weed_server.py ready).
MAKE_BUCKET = """
import os, time
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                connect_timeout=2, read_timeout=10))
bucket, deadline = os.environ["BUCKET"], time.monotonic() + 150
while True:
    try:
        try:
            s3.create_bucket(Bucket=bucket)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        s3.put_object(Bucket=bucket, Key="probe", Body=b"ok")
        assert s3.get_object(Bucket=bucket, Key="probe")["Body"].read() == b"ok"
        s3.delete_object(Bucket=bucket, Key="probe")
        break
    except (BotoCoreError, ClientError) as e:
        if time.monotonic() > deadline:
            raise
        print("waiting:", e, flush=True)
        time.sleep(0.5)
print("bucket ready", flush=True)
"""

# Every key in the bucket, as one line of JSON after KEYS (the predict pod's last word); before it,
# after MEMORY, the memory cgroup figures of the run's report and of the predict's manifest.
LIST_KEYS = """
import json, os
import boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=os.environ["BUCKET"])
        for o in page.get("Contents", [])]
def read(suffix):
    key = next((k for k in keys if k.endswith(suffix)), None)
    return json.loads(s3.get_object(Bucket=os.environ["BUCKET"], Key=key)["Body"].read()) if key else {}
memory = {k: v for k, v in (read("/report.json").get("memory") or {}).items() if "cgroup" in k}
memory["coordinator"] = read("predictions/manifest.json").get("coordinator")
print("MEMORY " + json.dumps(memory), flush=True)
print("KEYS " + json.dumps(keys), flush=True)
"""


def _creds_env() -> list[dict[str, Any]]:
    """The Secret's keys as the operator gives them to a job's pods (storage.s3.secretName)."""
    return [{"name": key, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": key}}}
            for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")] + [
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}]  # never ask for an instance's credentials


def _secret() -> dict[str, Any]:
    key, secret = "GRAPPA" + secrets.token_hex(7).upper(), secrets.token_urlsafe(30)
    identities = {"identities": [{"name": "grappa-e2e", "credentials": [{"accessKey": key, "secretKey": secret}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
            "stringData": {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                           "s3.json": json.dumps(identities), "master.toml": MASTER_TOML}}


def _seaweedfs() -> list[dict[str, Any]]:
    """weed from the node's mount in a pod of the operator image (any image runs a static binary):
    master, volume server and filer on the pod's loopback, the S3 gateway on its address behind a
    Service; its data in an emptyDir."""
    folder, _, binary = NODE_WEED.rpartition("/")
    command = [
        f"/opt/seaweedfs/{binary}", "-logtostderr", "-config_dir=/config", "server",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=/data",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-master.volumePreallocate=false",
        "-volume.max=0", "-volume.preStopSeconds=0", "-filer",
        "-s3", "-s3.ip.bind=0.0.0.0", f"-s3.port={S3_PORT}", "-s3.config=/config/s3.json",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false",
    ]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seaweedfs", "labels": {"app": "seaweedfs"}},
           "spec": {
               "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,  # its data goes with it
               "securityContext": POD_SECURITY,
               "containers": [{
                   "name": "weed", "image": h.OPERATOR_IMAGE, "imagePullPolicy": h.PULL_POLICY,
                   "command": command, "ports": [{"name": "s3", "containerPort": S3_PORT}],
                   "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}, "securityContext": RESTRICTED,
                   "volumeMounts": [{"name": "weed", "mountPath": "/opt/seaweedfs", "readOnly": True},
                                    {"name": "config", "mountPath": "/config", "readOnly": True},
                                    {"name": "data", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"}]}],
               "volumes": [{"name": "weed", "hostPath": {"path": folder, "type": "Directory"}},
                           {"name": "config", "secret": {"secretName": SECRET, "items": [
                               {"key": "s3.json", "path": "s3.json"}, {"key": "master.toml", "path": "master.toml"}]}},
                           {"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "seaweedfs"},
               "spec": {"selector": {"app": "seaweedfs"}, "ports": [{"name": "s3", "port": S3_PORT,
                                                                      "targetPort": S3_PORT}]}}
    return [pod, service]


def _client_pod(name: str, endpoint: str, script: str, env: dict[str, str]) -> dict[str, Any]:
    """A pod of the trainer image (boto3, grappa) with the Secret's credentials."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "securityContext": POD_SECURITY,
        "containers": [{"name": "main", "image": h.TRAINER_IMAGE, "imagePullPolicy": h.PULL_POLICY,
                        "command": ["sh", "-c", script], "securityContext": RESTRICTED,
                        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}},
                        "env": _creds_env() + [{"name": k, "value": v} for k, v in
                                               {"ENDPOINT": endpoint, "BUCKET": BUCKET, "OMP_NUM_THREADS": "1",
                                                **env}.items()],
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {}}]}}


def _weed_log(cluster: Cluster, ns: str) -> str:
    return "\n--- seaweedfs (last lines):\n" + "\n".join(
        cluster.container_log(ns, "seaweedfs", "weed").splitlines()[-30:])


def _finished(cluster: Cluster, ns: str, name: str, what: str, timeout: float) -> str:
    """Until the pod ends (Succeeded, else the test fails with its log and SeaweedFS's), failing at
    once when SeaweedFS itself ended; the pod's log."""
    def ended() -> dict[str, Any] | None:
        weed = cluster.pod(ns, "seaweedfs")
        if weed and weed["status"].get("phase") in ("Succeeded", "Failed"):
            raise AssertionError(f"SeaweedFS ended ({weed['status']['phase']}) while waiting for {what}"
                                 f"{_weed_log(cluster, ns)}\n{cluster.describe_pod(ns, 'seaweedfs')}")
        p = cluster.pod(ns, name)
        return p if p and p["status"].get("phase") in ("Succeeded", "Failed") else None
    try:
        done = cluster.wait_for(ended, timeout, what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.describe_pod(ns, name)}{_weed_log(cluster, ns)}") from None
    log = cluster.container_log(ns, name, "main")
    assert done["status"]["phase"] == "Succeeded", (
        f"{what}: pod {name} ended {done['status']['phase']}:\n{log[-6000:]}{_weed_log(cluster, ns)}")
    return log


def _job(name: str, endpoint: str) -> dict[str, Any]:
    """test_predict's small job (P = 2, full-graph, exact evaluation), one epoch, in the bucket."""
    job = h.job_manifest(name, epochs=1, partitions=2)
    spec = job["spec"]
    spec["training"] = {k: v for k, v in spec["training"].items() if k not in ("batchSize", "fanouts")}
    spec["training"]["mode"] = "full-graph"
    # no claimName, no hostPath: the job lives in the bucket (workers fetch their rounds from it)
    spec["storage"] = {"fetch": "prefetch",
                       "s3": {"endpoint": endpoint, "bucket": BUCKET, "prefix": PREFIX, "secretName": SECRET}}
    return job


def test_a_job_without_a_volume_trains_in_the_bucket_then_predicts_from_it(
        cluster: Cluster, release: h.Release, namespace: str) -> None:
    if not NODE_WEED:
        pytest.skip("needs SeaweedFS's weed in the node: the offline kind bed mounts it and sets "
                    "GRAPPA_E2E_NODE_WEED (hack/kind/README.md); set it to weed's path on your node")
    if not (h.OPERATOR_IMAGE and h.TRAINER_IMAGE):
        pytest.fail("GRAPPA_E2E_OPERATOR_IMAGE and GRAPPA_E2E_TRAINER_IMAGE must be set (the bed sets them)")
    ns, name, t0 = namespace, "in-bucket", time.monotonic()
    endpoint = f"http://seaweedfs.{ns}.svc:{S3_PORT}"
    for obj in [_secret(), *_seaweedfs(), _client_pod("make-bucket", endpoint, 'python -c "$SCRIPT"',
                                                      {"SCRIPT": MAKE_BUCKET})]:
        h.apply_file(cluster, ns, obj)
    _finished(cluster, ns, "make-bucket", f"bucket {BUCKET} in SeaweedFS", h.scaled(180))
    t_bucket = time.monotonic()

    h.apply_file(cluster, ns, _job(name, endpoint))
    job = h.wait_job(cluster, ns, name, lambda j: h.phase(j) == "Succeeded", "phase Succeeded", rel=release,
                     interval=0.5)
    t_job = time.monotonic()
    st = job["status"]
    home = f"s3://{BUCKET}/{PREFIX}runs/{ns}/{name}/{job['metadata']['uid'][:8]}"
    assert st["runDir"] == home, st
    assert st["artifacts"]["model"] == home + "/model.pt", st["artifacts"]
    assert all(uri.startswith(home + "/") for uri in st["artifacts"].values()), st["artifacts"]
    assert "logs" not in st["artifacts"], st["artifacts"]
    assert 0.0 < st["result"]["testAcc"] <= 1.0, st["result"]
    # no volume anywhere: no claim in the namespace, and the job's pods (those kept) mount none
    assert cluster.api_items(f"/api/v1/namespaces/{ns}/persistentvolumeclaims") == []
    for p in h.job_pods(cluster, ns, name):
        mounted = [v["name"] for v in p["spec"].get("volumes", []) if "persistentVolumeClaim" in v or "hostPath" in v]
        assert not mounted, (p["metadata"]["name"], mounted)

    model = st["artifacts"]["model"]
    predict = ('python -m grappa predict --model "$MODEL" --partitions 2 --quiet '
               '--set storage.s3.endpoint="$ENDPOINT" && python -c "$SCRIPT"')
    h.apply_file(cluster, ns, _client_pod("predict", endpoint, predict, {"MODEL": model, "SCRIPT": LIST_KEYS}))
    log = _finished(cluster, ns, "predict", f"grappa predict --model {model}", h.scaled(300))
    t_predict = time.monotonic()
    assert "Traceback" not in log, log[-6000:]
    keys = json.loads(next(line for line in reversed(log.splitlines()) if line.startswith("KEYS "))[5:])
    run = home[len(f"s3://{BUCKET}/"):] + "/"
    have = {k[len(run):] for k in keys if k.startswith(run)}
    assert {"model.pt", "report.json", "metrics.jsonl", "training.png",
            "predictions/predictions.npy", "predictions/manifest.json"} <= have, sorted(keys)
    assert any(k.startswith("checkpoints/") for k in have), sorted(keys)
    assert PREFIX + "manifest.json" in keys, sorted(keys)  # the store, prepared into the bucket
    assert not [k for k in keys if not k.startswith(PREFIX)], sorted(keys)  # nothing else (the probe went)
    # In a pod each rank's memory cgroup is its container's (what its limit is enforced on): the run's
    # report has every rank's peaks, and the predict pod's manifest its coordinator's.
    mem = json.loads(next(line for line in reversed(log.splitlines()) if line.startswith("MEMORY "))[7:])
    for kind in ("cgroup_peak", "cgroup_working_set_peak"):
        assert mem[f"worker_{kind}_bytes"] and all(v > 0 for v in mem[f"worker_{kind}_bytes"]), mem
        assert mem[f"aggregator_{kind}_bytes"] > 0, mem
    assert len(mem["worker_cgroup_cache_peak_bytes"]) == 2 and mem["aggregator_cgroup_cache_peak_bytes"] >= 0, mem
    assert mem["cgroup"]["path"] is not None and mem["cgroup"]["version"] in (1, 2), mem
    coordinator = mem["coordinator"]
    assert coordinator["peak_rss_bytes"] > 0 and coordinator["cgroup_peak_bytes"] > 0, coordinator
    assert coordinator["cgroup_working_set_peak_bytes"] > 0 and coordinator["cgroup"]["path"], coordinator
    print(f"\ns3 job: bucket {t_bucket - t0:.0f} s, job {t_job - t_bucket:.0f} s, "
          f"predict {t_predict - t_job:.0f} s")
