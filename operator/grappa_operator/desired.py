"""Desired child objects of a GrappaJob, as plain dicts: pure functions of (job, spec, attempt).

Nothing here talks to the API server; handlers.py creates what is missing and deletes what is not
wanted. Names are deterministic so that a repeated create is a harmless 409.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Optional

from grappa.config import TrainConfig, dump_config

from . import kueue, podtemplate, quantities
from . import settings as s
from .api import GrappaJobSpec, PodSettings
from .errors import SpecError

# settings holds the node table, reserved env names and name pattern the CRD's CEL rules share.
_DNS1035 = re.compile(s.DNS1035_LABEL)


@dataclass(frozen=True)
class JobRef:
    name: str
    namespace: str
    uid: str
    queue: Optional[str] = None  # Kueue LocalQueue (label kueue.x-k8s.io/queue-name)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "JobRef":
        meta = body.get("metadata") or {}
        queue = (meta.get("labels") or {}).get(kueue.QUEUE_LABEL) or None
        return cls(meta.get("name", ""), meta.get("namespace", ""), meta.get("uid", ""), queue)


# ---- names --------------------------------------------------------------------------------

def service_name(job: JobRef) -> str:
    return f"{job.name}-aggregator"


def pod_name(job: JobRef, role: str, rank: int = 0) -> str:
    return f"{job.name}-worker-{rank}" if role == s.ROLE_WORKER else f"{job.name}-{role}"


def aggregator_account(job: JobRef) -> str:
    return f"{job.name}-aggregator"


def master_addr(job: JobRef) -> str:
    # Headless Service -> the aggregator pod's IP; resolved through the pod's DNS search path.
    return f"{service_name(job)}.{job.namespace}.svc"


# ---- feasibility --------------------------------------------------------------------------

def dataset_nodes(spec: GrappaJobSpec) -> Optional[int]:
    name = spec.dataset.name
    if name == "csbm":
        return spec.dataset.synthetic.num_nodes
    if name == "rmat":
        return 2 ** spec.dataset.synthetic.scale
    return s.KNOWN_NODE_COUNTS.get(name)


def check_runnable(job: JobRef, spec: GrappaJobSpec) -> None:
    """Raise SpecError (reason + message naming the field) for a spec that can never run."""
    if len(job.name) > s.MAX_JOB_NAME or not _DNS1035.match(job.name):
        raise SpecError("InvalidName", f"metadata.name {job.name!r} must be a DNS-1035 label of at "
                        f"most {s.MAX_JOB_NAME} characters (it names the job's Service and pods)")
    nodes = dataset_nodes(spec)
    if nodes is not None and spec.partitions > nodes:
        raise SpecError("TooManyPartitions", f"spec.partitions ({spec.partitions}) exceeds the "
                        f"{nodes} nodes of dataset {spec.dataset.name!r}: use at most {nodes}")
    chunks = spec.grappa.chunks
    if nodes is not None and chunks is not None and chunks > nodes:
        raise SpecError("TooManyChunks", f"spec.grappa.chunks ({chunks}) exceeds the {nodes} nodes "
                        f"of dataset {spec.dataset.name!r}")
    if spec.dataset.name in ("file", "arrays") and not spec.dataset.path:
        raise SpecError("InvalidSpec", f"spec.dataset.path is required when spec.dataset.name is "
                        f"'{spec.dataset.name}'")
    if spec.metrics_port and spec.metrics_port == spec.master_port:
        raise SpecError("InvalidPort", f"spec.masterPort ({spec.master_port}) equals spec.metricsPort: "
                        "the aggregator listens on both")
    for role in ("aggregator", "worker"):
        for i, env in enumerate(getattr(spec, role).env):
            if env.name in s.RESERVED_ENV:
                raise SpecError("InvalidSpec", f"spec.{role}.env[{i}].name: {env.name} is set by "
                                "the operator and cannot be overridden")
    # A template that touches what the operator owns is refused before any object exists (the
    # merge with the operator's pod finds it; built only when there is a template to check).
    if spec.aggregator.template.model_dump(exclude_defaults=True):
        pod(job, spec, s.ROLE_AGGREGATOR, 0, 0)
    if spec.worker.template.model_dump(exclude_defaults=True):
        pod(job, spec, s.ROLE_WORKER, 1, 0)


# ---- paths and config ---------------------------------------------------------------------

def run_dir(job: JobRef, spec: GrappaJobSpec) -> str:
    """Where the run's results are, as the status says: on the volume, or (a job without one)
    the s3:// URI of its home in the bucket."""
    prefix = run_prefix(job, spec)
    if prefix is not None:
        return f"s3://{spec.storage.s3.bucket}/{prefix.rstrip('/')}"
    # The uid keeps a re-created job of the same name from resuming a stale checkpoint.
    return posixpath.join(spec.storage.mount_path, job.namespace, job.name, job.uid[:8] or "run")


def run_prefix(job: JobRef, spec: GrappaJobSpec) -> Optional[str]:
    """storage.s3.runPrefix of a job without a volume: beside its store in the bucket, keyed as a
    volume's runDir is (the uid: a re-created job resumes no stale checkpoint); None with a volume."""
    if spec.storage.volume:
        return None
    return f"{spec.storage.s3.prefix}runs/{job.namespace}/{job.name}/{job.uid[:8] or 'run'}/"


def trainer_run_dir(job: JobRef, spec: GrappaJobSpec) -> str:
    """runDir as the trainer sees it: the volume's, or each pod's emptyDir when the run lives in
    the bucket (the aggregator's holds its results until they are uploaded)."""
    if spec.storage.volume:
        return run_dir(job, spec)
    return posixpath.join(s.LOCAL_DATA_PATH, "run")


PREDICTIONS = "predictions"  # a predict job's outputs, under its run directory


def artifacts(run_dir_: str, spec: Optional[GrappaJobSpec] = None) -> dict[str, str]:
    """Where the trainer writes what a user comes back for (docs/architecture.md, run directory);
    a predict job's outputs instead when `spec.predict` is set (README, "Using the trained model")."""
    if spec is not None and spec.predict is not None:
        out = posixpath.join(run_dir_, PREDICTIONS)
        p = spec.predict
        if spec.task == "link-prediction":  # a link model: embeddings always, no classes
            files = [("embeddings", "embeddings.npy"), ("manifest", "manifest.json")]
            files += [("pairScores", "pair_scores.npy")] if p.pairs else []
            files += [("topk", "topk.npy"), ("topkScores", "topk_scores.npy")] if p.queries else []
            files += [("evaluation", "evaluation.json")] if p.evaluate else []
            # a graph from tables: the embeddings keyed by the nodes table's ids as well
            files += [("table", "predictions.parquet")] if spec.dataset.name == "tables" else []
            return {name: posixpath.join(out, rel) for name, rel in files}
        files = [("predictions", "predictions.npy"), ("manifest", "manifest.json")]
        files += [("scores", "scores.npy")] if spec.predict.scores else []
        files += [("embeddings", "embeddings.npy")] if spec.predict.embeddings else []
        files += [("evaluation", "evaluation.json")] if spec.predict.evaluate else []
        files += [("table", "predictions.parquet")] if spec.dataset.name == "tables" else []
        return {name: posixpath.join(out, rel) for name, rel in files}
    files = [("model", "model.pt"), ("report", "report.json"), ("plot", "training.png"),
             ("checkpoints", "checkpoints")]
    if not run_dir_.startswith("s3://"):  # the pods' logs are kept on a volume only
        files.append(("logs", "logs"))
    return {name: posixpath.join(run_dir_, rel) for name, rel in files}


def predict_env(spec: GrappaJobSpec) -> dict[str, Any]:
    """What a predict job's pods run (grappa.inference.pod reads it): the model file resolved on
    the volume, the outputs asked for."""
    p = spec.predict
    assert p is not None
    def on_volume(path: str) -> str:
        return path if path.startswith("/") else posixpath.join(spec.storage.mount_path, path)
    env = {"model": on_volume(p.model), "scores": p.scores, "embeddings": p.embeddings,
           "embeddingDtype": p.embedding_dtype, "evaluate": p.evaluate, "out": PREDICTIONS}
    # a link-prediction model's inputs, only when given (a node model's env stays as it was)
    env.update({key: on_volume(v) for key, v in (("pairs", p.pairs), ("queries", p.queries),
                                                  ("candidates", p.candidates)) if v is not None})
    if p.top_k is not None:
        env["topK"] = p.top_k
    return env


def train_config(job: JobRef, spec: GrappaJobSpec) -> TrainConfig:
    # without a volume, relative dataset locations resolve on the pod's emptyDir (prepare's only)
    mount = spec.storage.mount_path if spec.storage.volume else s.LOCAL_DATA_PATH
    rd = trainer_run_dir(job, spec)
    # storage.s3: storeDir is each pod's local mirror of the bucket (data/s3/mirror.py), on its emptyDir
    store = posixpath.join(s.LOCAL_DATA_PATH, "store") if spec.storage.bucket_store else posixpath.join(rd, "store")
    cfg = spec.to_train_config(run_dir=rd, store_dir=store)
    if cfg.storage.fetch != "direct":  # fetched round data goes to the worker pod's emptyDir
        cfg.storage = cfg.storage.model_copy(update={"local_dir": s.LOCAL_DATA_PATH})
    prefix = run_prefix(job, spec)
    if prefix is not None:  # no volume: the run's home is the bucket (trainer data/s3/run_home.py)
        s3 = cfg.storage.s3.model_copy(update={"run_prefix": prefix})
        cfg.storage = cfg.storage.model_copy(update={"s3": s3})
    # Relative dataset locations live on the shared volume.
    root = cfg.dataset.root or "data"
    cfg.dataset.root = root if root.startswith("/") else posixpath.join(mount, root)
    if cfg.dataset.path and not cfg.dataset.path.startswith("/"):
        cfg.dataset.path = posixpath.join(mount, cfg.dataset.path)
    custom = cfg.model.user_model
    if custom is not None and custom.code_path and not custom.code_path.startswith("/"):
        # a copy: cfg shares its sections with the spec
        cfg.model = cfg.model.model_copy(update={"custom": custom.model_copy(
            update={"code_path": posixpath.join(mount, custom.code_path)})})
    return cfg


# ---- objects ------------------------------------------------------------------------------

def labels(job: JobRef, role: Optional[str] = None, rank: Optional[int] = None,
           attempt: Optional[int] = None) -> dict[str, str]:
    out = {s.LABEL_JOB: job.name, s.LABEL_MANAGED_BY: s.MANAGED_BY, "app.kubernetes.io/name": "grappa"}
    if role is not None:
        out[s.LABEL_ROLE] = role
    if rank is not None:
        out[s.LABEL_RANK] = str(rank)
    if attempt is not None:
        out[s.LABEL_ATTEMPT] = str(attempt)
    return out


def owner_reference(job: JobRef) -> dict[str, Any]:
    return {"apiVersion": s.API_VERSION, "kind": s.KIND, "name": job.name, "uid": job.uid,
            "controller": True, "blockOwnerDeletion": True}


def _meta(job: JobRef, name: str, lbls: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": job.namespace, "labels": lbls,
            "ownerReferences": [owner_reference(job)], **extra}


def _volume(spec: GrappaJobSpec) -> Optional[dict[str, Any]]:
    st = spec.storage
    if not st.volume:
        return None
    if st.claim_name:
        return {"name": "grappa-data", "persistentVolumeClaim": {"claimName": st.claim_name}}
    return {"name": "grappa-data", "hostPath": {"path": st.host_path, "type": "DirectoryOrCreate"}}


def _env(job: JobRef, spec: GrappaJobSpec, cfg: TrainConfig, role: str, rank: Optional[int],
         pod: PodSettings) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "GRAPPA_CONFIG", "value": dump_config(cfg)},
        {"name": "GRAPPA_JOB_NAME", "value": job.name},
        {"name": "GRAPPA_JOB_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GRAPPA_DATA_ROOT", "value": cfg.dataset.root},
        {"name": "HOME", "value": "/tmp"},  # read-only root filesystem: caches go to the emptyDir
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if spec.predict is not None:
        env.append({"name": "GRAPPA_PREDICT", "value": json.dumps(predict_env(spec), sort_keys=True)})
    if rank is not None:
        env += [
            {"name": "MASTER_ADDR", "value": master_addr(job)},
            {"name": "MASTER_PORT", "value": str(spec.master_port)},
            {"name": "RANK", "value": str(rank)},
            {"name": "WORLD_SIZE", "value": str(spec.partitions + 1)},
        ]
    threads = cpu_threads(pod)
    if threads is not None and role != s.ROLE_PREPARE:
        env.append({"name": "GRAPPA_THREADS", "value": str(threads)})  # torch threads = CPU budget
    s3 = spec.storage.bucket_store
    if s3 is not None and s3.secret_name:  # boto3 reads these (data/s3/bucket.py)
        env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": s3.secret_name, "key": key}}}
                for var, key in (("AWS_ACCESS_KEY_ID", s3.access_key_id_key),
                                 ("AWS_SECRET_ACCESS_KEY", s3.secret_access_key_key))]
    user = [e.model_dump(by_alias=True, exclude_none=True) for e in pod.env]
    names = {e["name"] for e in user}
    return [e for e in env if e["name"] not in names] + user


def cpu_threads(pod: PodSettings) -> Optional[int]:
    """Torch threads from the CPU limit (else request): at least 1; None when unset or unparsable."""
    raw = pod.resources.limits.get("cpu", pod.resources.requests.get("cpu"))
    cores = None if raw is None else quantities.parse(raw)
    return None if cores is None else max(1, int(cores))


def _resources(pod: PodSettings) -> dict[str, Any]:
    res = {}
    if pod.resources.requests:
        res["requests"] = {k: str(v) for k, v in pod.resources.requests.items()}
    if pod.resources.limits:
        res["limits"] = {k: str(v) for k, v in pod.resources.limits.items()}
    return res


def pod(job: JobRef, spec: GrappaJobSpec, role: str, rank: Optional[int], attempt: int,
        placement: Optional[kueue.Placement] = None) -> dict[str, Any]:
    """One trainer pod: prepare (rank None), aggregator (rank 0) or worker (rank 1..P).

    `placement` is what a Kueue flavor assignment adds: its node labels win over the spec's
    nodeSelector (Kueue admitted the pods for those nodes) and its tolerations are appended.
    """
    settings_ = spec.worker if role == s.ROLE_WORKER else spec.aggregator
    cfg = train_config(job, spec)
    threads = cpu_threads(settings_)
    if role == s.ROLE_PREPARE and cfg.prepare.workers is None and threads is not None:
        # the node's CPU count is not the pod's CPU budget (a copy: cfg shares sections with spec)
        cfg.prepare = cfg.prepare.model_copy(update={"workers": threads})
    name = pod_name(job, role, rank or 0)
    lbls = labels(job, role, rank, attempt)
    annotations: dict[str, str] = {}
    ports: list[dict[str, Any]] = []
    if role != s.ROLE_PREPARE and spec.metrics_port:
        port = spec.metrics_port  # every pod has its own IP: one port for all ranks
        ports.append({"name": "metrics", "containerPort": port, "protocol": "TCP"})
        annotations.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(port)})
    if role == s.ROLE_AGGREGATOR:
        ports.append({"name": "rendezvous", "containerPort": spec.master_port, "protocol": "TCP"})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # the operator restarts the whole group, never a single pod
        "automountServiceAccountToken": role == s.ROLE_AGGREGATOR,
        "enableServiceLinks": False,  # rendezvous uses MASTER_ADDR; no *_SERVICE_HOST clutter
        "terminationGracePeriodSeconds": 30,  # the aggregator checkpoints on SIGTERM (~1-2 s; docs/architecture.md)
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": s.CONTAINER_NAME,
            "image": settings_.image or s.trainer_image(),
            "imagePullPolicy": settings_.image_pull_policy,
            # a predict job's ranks run the inference pass (grappa.inference.pod), the rest `grappa ROLE`
            "command": (["python", "-m", "grappa.inference.pod", role]
                        if spec.predict is not None and role != s.ROLE_PREPARE else ["python", "-m", "grappa", role]),
            "env": _env(job, spec, cfg, role, rank, settings_),
            "ports": ports,
            "resources": _resources(settings_),
            "volumeMounts": ([{"name": "grappa-data", "mountPath": spec.storage.mount_path}]
                             if spec.storage.volume else []) + [{"name": "tmp", "mountPath": "/tmp"}],
            "terminationMessagePath": s.TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": {
                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
            },
        }],
        "volumes": [v for v in (_volume(spec), {"name": "tmp", "emptyDir": {}}) if v is not None],
    }
    # storage.localDir (a worker's fetched rounds) and storage.s3's mirror: node-local disk
    if (role == s.ROLE_WORKER and cfg.storage.fetch != "direct") or spec.storage.bucket_store is not None:
        pod_spec["containers"][0]["volumeMounts"].append({"name": "grappa-local", "mountPath": s.LOCAL_DATA_PATH})
        pod_spec["volumes"].append({"name": "grappa-local", "emptyDir": {}})
    if role == s.ROLE_AGGREGATOR:
        pod_spec["serviceAccountName"] = settings_.service_account_name or aggregator_account(job)
    elif settings_.service_account_name:
        pod_spec["serviceAccountName"] = settings_.service_account_name
    selector = {**settings_.node_selector, **(placement.node_selector if placement else {})}
    if selector:
        pod_spec["nodeSelector"] = selector
    tolerations = [t.model_dump(by_alias=True, exclude_none=True) for t in settings_.tolerations]
    tolerations += [t for t in (placement.tolerations if placement else ()) if t not in tolerations]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if settings_.priority_class_name:
        pod_spec["priorityClassName"] = settings_.priority_class_name
    sp = spec.scheduling_policy
    if sp.scheduler_name or sp.gang:
        pod_spec["schedulerName"] = sp.scheduler_name or (
            "volcano" if sp.provider == "volcano" else "scheduler-plugins-scheduler")
    if sp.gang and role != s.ROLE_PREPARE:  # the gang is the P+1 training pods
        if sp.provider == "volcano":
            annotations["scheduling.k8s.io/group-name"] = job.name
        else:
            lbls["scheduling.x-k8s.io/pod-group"] = job.name
    meta = _meta(job, name, lbls)
    if annotations:
        meta["annotations"] = annotations
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    where_role = s.ROLE_WORKER if role == s.ROLE_WORKER else s.ROLE_AGGREGATOR
    return podtemplate.apply(obj, settings_.template.model_dump(by_alias=True), f"spec.{where_role}.template",
                             where_role)


def group_pods(job: JobRef, spec: GrappaJobSpec, attempt: int,
               placement: Optional[dict[str, kueue.Placement]] = None) -> list[dict[str, Any]]:
    place = placement or {}
    pods = [pod(job, spec, s.ROLE_AGGREGATOR, 0, attempt, place.get(s.ROLE_AGGREGATOR))]
    pods += [pod(job, spec, s.ROLE_WORKER, r, attempt, place.get(s.ROLE_WORKER))
             for r in range(1, spec.partitions + 1)]
    return pods


def prepare_pod(job: JobRef, spec: GrappaJobSpec, attempt: int,
                placement: Optional[dict[str, kueue.Placement]] = None) -> dict[str, Any]:
    # Under Kueue the prepare pod runs alone, before the group, on the aggregator's admitted share.
    return pod(job, spec, s.ROLE_PREPARE, None, attempt, (placement or {}).get(s.ROLE_AGGREGATOR))


def workload(job: JobRef, spec: GrappaJobSpec, priority: Optional[kueue.Priority] = None) -> dict[str, Any]:
    """The Kueue Workload of a queued job: the aggregator and the P workers as two pod sets, so
    Kueue admits the whole group at once (kueue.py). `priority` is resolved by the caller (it
    reads the PriorityClass or WorkloadPriorityClass, as Kueue's own integrations do)."""
    assert job.queue, "only a job labelled kueue.x-k8s.io/queue-name has a Workload"
    agg, worker = pod(job, spec, s.ROLE_AGGREGATOR, 0, 0), pod(job, spec, s.ROLE_WORKER, 1, 0)
    body: dict[str, Any] = {
        "queueName": job.queue,
        "podSets": [
            {"name": "aggregator", "count": 1, "template": {"spec": kueue.template_spec(agg)}},
            {"name": "workers", "count": spec.partitions, "template": {"spec": kueue.template_spec(worker)}},
        ],
    }
    if priority is not None:
        body["priorityClassRef"] = {"group": priority.group, "kind": priority.kind, "name": priority.name}
        body["priority"] = priority.value
    return {"apiVersion": f"{kueue.GROUP}/{kueue.VERSION}", "kind": "Workload",
            "metadata": _meta(job, kueue.workload_name(job.name), labels(job)), "spec": body}


def service(job: JobRef, spec: GrappaJobSpec) -> dict[str, Any]:
    ports = [{"name": "rendezvous", "port": spec.master_port, "targetPort": spec.master_port,
              "protocol": "TCP"}]
    if spec.metrics_port:
        ports.append({"name": "metrics", "port": spec.metrics_port, "targetPort": spec.metrics_port,
                      "protocol": "TCP"})
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _meta(job, service_name(job), labels(job)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # rendezvous starts before any readiness
            "selector": {s.LABEL_JOB: job.name, s.LABEL_ROLE: s.ROLE_AGGREGATOR},
            "ports": ports,
        },
    }


def aggregator_rbac(job: JobRef, spec: GrappaJobSpec) -> list[dict[str, Any]]:
    """ServiceAccount (unless the user names one) + Role limited to this job's status + binding."""
    account = spec.aggregator.service_account_name or aggregator_account(job)
    name = aggregator_account(job)
    objs: list[dict[str, Any]] = []
    if not spec.aggregator.service_account_name:
        objs.append({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": _meta(job, name, labels(job, s.ROLE_AGGREGATOR))})
    objs.append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": _meta(job, name, labels(job, s.ROLE_AGGREGATOR)),
        "rules": [{"apiGroups": [s.GROUP], "resources": [f"{s.PLURAL}/status"],
                   "resourceNames": [job.name], "verbs": ["get", "patch"]}],
    })
    objs.append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": _meta(job, name, labels(job, s.ROLE_AGGREGATOR)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": job.namespace}],
    })
    return objs


def pod_group(job: JobRef, spec: GrappaJobSpec) -> Optional[dict[str, Any]]:
    sp = spec.scheduling_policy
    if not sp.gang:
        return None
    body: dict[str, Any] = {"minMember": spec.partitions + 1}
    if sp.provider == "volcano":
        api = "scheduling.volcano.sh/v1beta1"
        if sp.queue:
            body["queue"] = sp.queue
        if sp.priority_class_name:
            body["priorityClassName"] = sp.priority_class_name
    else:
        api = "scheduling.x-k8s.io/v1alpha1"
        if sp.schedule_timeout_seconds:
            body["scheduleTimeoutSeconds"] = sp.schedule_timeout_seconds
    return {"apiVersion": api, "kind": "PodGroup", "metadata": _meta(job, job.name, labels(job)),
            "spec": body}


def supporting_objects(job: JobRef, spec: GrappaJobSpec) -> list[dict[str, Any]]:
    """Everything but pods: created once, before the first pod, garbage-collected with the job."""
    objs = [service(job, spec), *aggregator_rbac(job, spec)]
    pg = pod_group(job, spec)
    if pg:
        objs.append(pg)
    return objs
