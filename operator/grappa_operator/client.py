"""A small client for GrappaJobs from Python, in the kubernetes library's idiom (docs/api.md).

    from grappa_operator.client import GrappaJobClient
    client = GrappaJobClient(namespace="ml")
    client.submit("cora-gatv2", config, storage={"claimName": "grappa-data"})
    for line in client.logs("cora-gatv2", follow=True): print(line)
    job = client.wait("cora-gatv2")            # Succeeded or Failed, with status.progress
    client.artifacts("cora-gatv2")["model"]    # the model file on the volume
    client.delete("cora-gatv2")

The resource is built from the same pydantic models as the CRD (`api.GrappaJobSpec`, whose
training sections are `grappa.config`'s), so a spec the client submits is one the operator
accepts; a bad one fails here, naming the field. Torch-free, as the whole operator package.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator, Optional, Union

from pydantic import ValidationError

from grappa.config import TrainConfig, dump_config

from . import settings as s
from .api import GrappaJobSpec, describe_errors
from .desired import JobRef, pod_name

FINISHED = ("Succeeded", "Failed")
# TrainConfig fields that are where a run lives on one machine, not part of a GrappaJob
# (the operator sets them under storage.mountPath).
LOCAL_ONLY = ("runDir", "storeDir", "metricsPort")


def job_spec(config: Union[TrainConfig, dict], storage: dict, **spec: Any) -> GrappaJobSpec:
    """A GrappaJob spec from a training config (a TrainConfig or its mapping), the storage
    volume and any other spec fields (`worker={...}`, `runPolicy={...}`, `predict={...}`)."""
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.model_validate(config)
    data = {k: v for k, v in json.loads(dump_config(cfg)).items() if k not in LOCAL_ONLY}
    try:
        return GrappaJobSpec.model_validate({**data, "storage": storage, **spec})
    except ValidationError as err:
        raise ValueError("invalid GrappaJob: " + describe_errors(err)) from None


def job_manifest(name: str, config: Union[TrainConfig, dict], storage: dict,
                 labels: Optional[dict] = None, **spec: Any) -> dict[str, Any]:
    """The GrappaJob resource (defaults left to the API server)."""
    body = job_spec(config, storage, **spec).model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    body["storage"] = {**body.get("storage", {}), **storage}  # one source, as given
    return {"apiVersion": s.API_VERSION, "kind": s.KIND,
            "metadata": {"name": name, **({"labels": labels} if labels else {})}, "spec": body}


class GrappaJobClient:
    def __init__(self, namespace: str = "default", api_client: Any = None) -> None:
        """`api_client`: a kubernetes.client.ApiClient; default: the in-cluster service account,
        else the kubeconfig's current context."""
        import kubernetes
        if api_client is None:
            try:
                kubernetes.config.load_incluster_config()
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config()
            api_client = kubernetes.client.ApiClient()
        self.namespace = namespace
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self._watch = kubernetes.watch.Watch

    # -- one job ---------------------------------------------------------------------------------
    def submit(self, name: str, config: Union[TrainConfig, dict], storage: dict,
               labels: Optional[dict] = None, **spec: Any) -> dict:
        """Create the GrappaJob `name`; returns the created object."""
        body = job_manifest(name, config, storage, labels, **spec)
        return self.custom.create_namespaced_custom_object(
            s.GROUP, s.VERSION, self.namespace, s.PLURAL, body)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(s.GROUP, s.VERSION, self.namespace, s.PLURAL, name)

    def status(self, name: str) -> dict:
        return self.get(name).get("status") or {}

    def artifacts(self, name: str) -> dict:
        """Paths of the run's outputs on the job's volume (model, report, checkpoints, logs; a
        predict job's predictions), and its runDir."""
        st = self.status(name)
        return {**(st.get("artifacts") or {}), **({"runDir": st["runDir"]} if st.get("runDir") else {})}

    def delete(self, name: str) -> None:
        """Delete the job (its pods go with it; the volume's files stay)."""
        self.custom.delete_namespaced_custom_object(s.GROUP, s.VERSION, self.namespace, s.PLURAL, name)

    # -- following it ----------------------------------------------------------------------------
    def watch(self, name: str, timeout: Optional[float] = None) -> Iterator[dict]:
        """The job object at every change, until it is Succeeded or Failed (or `timeout` seconds
        pass: TimeoutError). Each has `status.phase` and `status.progress` (epoch, loss,
        valAcc, etaSeconds, ...)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        version = None
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"GrappaJob {self.namespace}/{name} not finished after {timeout} s")
            w = self._watch()
            kwargs: dict[str, Any] = {"field_selector": f"metadata.name={name}",
                                      "timeout_seconds": int(min(left, 60)) + 1 if left is not None else 60}
            if version:
                kwargs["resource_version"] = version
            for event in w.stream(self.custom.list_namespaced_custom_object, s.GROUP, s.VERSION,
                                  self.namespace, s.PLURAL, **kwargs):
                job = event["object"]
                version = (job.get("metadata") or {}).get("resourceVersion", version)
                if event["type"] == "DELETED":
                    raise LookupError(f"GrappaJob {self.namespace}/{name} was deleted")
                yield job
                if (job.get("status") or {}).get("phase") in FINISHED:
                    w.stop()
                    return

    def wait(self, name: str, timeout: Optional[float] = None,
             on_progress: Optional[Callable[[str, dict], None]] = None) -> dict:
        """Block until the job is Succeeded or Failed; returns it. `on_progress(phase, progress)`
        is called at every change."""
        job: dict = {}
        for job in self.watch(name, timeout):
            if on_progress is not None:
                st = job.get("status") or {}
                on_progress(st.get("phase") or "", st.get("progress") or {})
        return job

    def logs(self, name: str, role: str = s.ROLE_AGGREGATOR, rank: int = 0, follow: bool = False,
             tail_lines: Optional[int] = None) -> Iterator[str]:
        """The log of the job's aggregator (or `role="worker", rank=r`, or the prepare pod), line
        by line; `follow` streams it until the container ends."""
        pod = pod_name(JobRef(name, self.namespace, ""), role, rank)
        kwargs: dict[str, Any] = {"container": s.CONTAINER_NAME}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if follow:
            yield from self._watch().stream(self.core.read_namespaced_pod_log, pod, self.namespace,
                                            follow=True, **kwargs)
            return
        yield from self.core.read_namespaced_pod_log(pod, self.namespace, **kwargs).splitlines()
