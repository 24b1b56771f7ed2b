"""Thin synchronous adapter over the kubernetes client (handlers call it through a thread).

Only reads/writes the objects of a GrappaJob; never connects to pods.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

import kubernetes
from kubernetes.client.rest import ApiException

from . import kueue, refusals
from . import settings as s
from .desired import JobRef
from .errors import CreateBlocked, SpecError

log = logging.getLogger(__name__)


def load_credentials() -> None:
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()


# (connect, read) seconds of every call: a hung API server connection fails the one reconcile
# (retried at the next resync) instead of holding its thread forever.
REQUEST_TIMEOUT = (5.0, 30.0)


class TimedApiClient(kubernetes.client.ApiClient):
    """An ApiClient whose calls all carry REQUEST_TIMEOUT unless a call names its own."""

    def call_api(self, *args: Any, _request_timeout: Any = None, **kwargs: Any):
        return super().call_api(*args, _request_timeout=_request_timeout or REQUEST_TIMEOUT, **kwargs)


class Kube:
    def __init__(self, api_client: Optional[kubernetes.client.ApiClient] = None):
        self.client = api_client or TimedApiClient()
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)

    # -- the job ------------------------------------------------------------------------------
    def get_job(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        return self._get_or_none(lambda: self.custom.get_namespaced_custom_object(
            s.GROUP, s.VERSION, namespace, s.PLURAL, name))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            s.GROUP, s.VERSION, namespace, s.PLURAL, name, {"status": status}, _preload_content=False)

    def delete_job(self, namespace: str, name: str) -> None:
        self._ignore_404(lambda: self.custom.delete_namespaced_custom_object(
            s.GROUP, s.VERSION, namespace, s.PLURAL, name, propagation_policy="Background",
            _preload_content=False))

    # -- children -----------------------------------------------------------------------------
    def list_pods(self, job: JobRef) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(job.namespace, label_selector=f"{s.LABEL_JOB}={job.name}",
                                             _preload_content=False)
        items = json.loads(resp.data).get("items") or []
        # Pods of a deleted job with the same name may linger until garbage collection.
        return [p for p in items
                if any(o.get("uid") == job.uid for o in (p["metadata"].get("ownerReferences") or []))]

    def create(self, obj: dict[str, Any]) -> bool:
        """Create one child; False when it already exists."""
        ns, kind = obj["metadata"]["namespace"], obj["kind"]
        raw = {"_preload_content": False}  # we never read the reply: skip model deserialisation
        calls = {
            "Pod": lambda: self.core.create_namespaced_pod(ns, obj, **raw),
            "Service": lambda: self.core.create_namespaced_service(ns, obj, **raw),
            "ServiceAccount": lambda: self.core.create_namespaced_service_account(ns, obj, **raw),
            "Role": lambda: self.rbac.create_namespaced_role(ns, obj, **raw),
            "RoleBinding": lambda: self.rbac.create_namespaced_role_binding(ns, obj, **raw),
        }
        if kind == "Workload":
            calls[kind] = lambda: self.custom.create_namespaced_custom_object(
                kueue.GROUP, kueue.VERSION, ns, kueue.WORKLOADS, obj, **raw)
        if kind == "PodGroup":
            group, version = obj["apiVersion"].split("/")
            calls[kind] = lambda: self.custom.create_namespaced_custom_object(
                group, version, ns, "podgroups", obj, **raw)
        try:
            calls[kind]()
            return True
        except ApiException as err:
            if err.status == 409:  # deterministic names: it exists already
                return False
            meaning = refusal_error(obj, err)
            if meaning is None:  # 429, 5xx, ...: retried at the next resync
                raise
            raise meaning from None

    # -- Kueue (kueue.py) ----------------------------------------------------------------------
    def get_workload(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        return self._get_or_none(lambda: self.custom.get_namespaced_custom_object(
            kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name))

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> Optional[dict[str, Any]]:
        """A cluster-scoped object (ResourceFlavor, PriorityClass, ...); None when absent."""
        return self._get_or_none(lambda: self.custom.get_cluster_custom_object(group, version, plural, name))

    def patch_workload(self, namespace: str, name: str, patch: dict[str, Any], status: bool = False) -> None:
        call = (self.custom.patch_namespaced_custom_object_status if status
                else self.custom.patch_namespaced_custom_object)
        call(kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, patch, _preload_content=False)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._ignore_404(lambda: self.core.delete_namespaced_pod(name, namespace, _preload_content=False))

    def post_event(self, job_body: dict[str, Any], type_: str, reason: str, message: str,
                   timestamp: str) -> None:
        meta = job_body["metadata"]
        self.core.create_namespaced_event(meta["namespace"], {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": s.API_VERSION, "kind": s.KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:1024],
            "firstTimestamp": timestamp, "lastTimestamp": timestamp, "count": 1,
            "source": {"component": s.MANAGED_BY},
            "reportingComponent": f"{s.GROUP}/operator", "reportingInstance": s.MANAGED_BY,
        }, _preload_content=False)

    @staticmethod
    def _get_or_none(call) -> Optional[dict[str, Any]]:
        try:
            return call()
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    @staticmethod
    def _ignore_404(call) -> None:
        try:
            call()
        except ApiException as err:
            if err.status != 404:
                raise


def refusal_error(obj: dict[str, Any], err: ApiException) -> Optional[Exception]:
    """The user-facing error of a refused create: SpecError (fail), CreateBlocked (wait), None (retry)."""
    refusal = refusals.classify(obj, err.status, err.body)
    if refusal is None:
        return None
    if refusal.permanent:
        return SpecError(refusal.reason, refusal.message)
    return CreateBlocked(refusal.reason, refusal.message)
