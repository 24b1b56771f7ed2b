"""The node agent: registration, heartbeats, the pod watch, and a tiny PVC provisioner."""

from __future__ import annotations

import logging
import platform
import threading
import time
import uuid
from datetime import datetime, timezone
from urllib.parse import quote

from .context import NodeContext
from .kube import ApiError, Obj
from .pod import PodWorker, now_iso

log = logging.getLogger("processnode.node")

LEASE_SECONDS = 40
RENEW_EVERY = 10.0
STATUS_EVERY = 60.0


def _micro_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Node:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.stop = threading.Event()
        self._finished: set[str] = set()  # uids whose worker has finalized; ignore their echoes
        self._boot_id = str(uuid.uuid4())

    # ---- registration and heartbeats ----------------------------------------------------
    def _conditions(self) -> list[Obj]:
        t = now_iso()

        def cond(ctype: str, status: str, reason: str, msg: str) -> Obj:
            return {"type": ctype, "status": status, "reason": reason, "message": msg,
                    "lastHeartbeatTime": t, "lastTransitionTime": self._started}
        return [cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "process node"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "process node"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "process node"),
                cond("Ready", "True", "KubeletReady", "process node is posting ready status")]

    def _node_status(self, version: str) -> Obj:
        cap = dict(self.ctx.allocatable, **{"ephemeral-storage": "100Gi"})
        return {
            "capacity": cap, "allocatable": cap, "conditions": self._conditions(),
            # No Hostname address: the API server would resolve it through DNS if it ever dialled
            # the node (logs, exec); with only an InternalIP any such dial stays on loopback.
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._kubelet_port}},
            "nodeInfo": {"machineID": self._boot_id.replace("-", ""), "systemUUID": self._boot_id,
                         "bootID": self._boot_id, "kernelVersion": platform.release(),
                         "osImage": "grappa process node", "containerRuntimeVersion": "processnode://1",
                         "kubeletVersion": version, "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
        }

    def register(self) -> None:
        from .kubeletapi import serve

        kube, name = self.ctx.kube, self.ctx.name
        self._kubelet_port = serve(self.ctx)
        self._started = now_iso()
        version = kube.request("GET", "/version").get("gitVersion", "v0.0.0")
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "grappa.dev/process-node": "true"}},
                "spec": {}}
        try:
            kube.request("POST", "/api/v1/nodes", body)
        except ApiError as e:
            if e.status != 409:
                raise
        kube.patch(f"/api/v1/nodes/{name}/status", {"status": self._node_status(version)})
        # TaintNodesByCondition taints every new Node not-ready; upstream the node lifecycle
        # controller lifts it once the kubelet reports Ready. That controller is not run here.
        kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, strategic=False)
        self._version = version
        self._renew_lease()
        log.info("node %s registered (kubelet version %s)", name, version)

    def _renew_lease(self) -> None:
        kube, name = self.ctx.kube, self.ctx.name
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()}
        try:
            kube.patch(path, {"spec": spec}, strategic=False)
        except ApiError as e:
            if e.status != 404:
                raise
            kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                         {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec})

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self.stop.wait(RENEW_EVERY):
            try:
                self._renew_lease()
                if time.monotonic() - last_status >= STATUS_EVERY:
                    self.ctx.kube.patch(f"/api/v1/nodes/{self.ctx.name}/status",
                                        {"status": {"conditions": self._conditions()}})
                    last_status = time.monotonic()
            except Exception as e:  # noqa: BLE001 - keep heartbeating through API hiccups
                log.warning("heartbeat failed: %s", e)

    # ---- PVC provisioner -----------------------------------------------------------------
    def _provision_loop(self) -> None:
        """Bind every pending claim to a hostPath PV backed by a folder of this node.

        There is no storage provisioner or PV binder in this cluster; doing both jobs in a few
        lines keeps claim-using workloads schedulable. The folder is what pods mount.
        """
        from .volumes import claim_dir

        kube = self.ctx.kube
        while not self.stop.wait(2.0):
            try:
                claims = kube.request("GET", "/api/v1/persistentvolumeclaims")["items"]
                for pvc in claims:
                    if pvc.get("status", {}).get("phase") != "Pending" or pvc["spec"].get("volumeName"):
                        continue
                    self._bind(pvc, str(claim_dir(self.ctx.workdir, pvc["metadata"]["namespace"],
                                                  pvc["metadata"]["name"])))
                live = {p["metadata"]["uid"] for p in claims}
                pvs = kube.request("GET", "/api/v1/persistentvolumes",
                                   params={"labelSelector": "grappa.dev/process-node=true"})["items"]
                for pv in pvs:
                    ref = pv["spec"].get("claimRef", {})
                    if ref.get("uid") not in live and not pv["metadata"].get("deletionTimestamp"):
                        kube.request("DELETE", f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
            except Exception as e:  # noqa: BLE001
                log.warning("provisioner: %s", e)

    def _bind(self, pvc: Obj, path: str) -> None:
        kube, meta = self.ctx.kube, pvc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        size = pvc["spec"].get("resources", {}).get("requests", {}).get("storage", "1Gi")
        modes = pvc["spec"].get("accessModes") or ["ReadWriteOnce"]
        pv_name = f"pvc-{meta['uid']}"
        pv = {"apiVersion": "v1", "kind": "PersistentVolume",
              "metadata": {"name": pv_name, "labels": {"grappa.dev/process-node": "true"}},
              "spec": {"capacity": {"storage": size}, "accessModes": modes,
                       "persistentVolumeReclaimPolicy": "Delete",
                       "storageClassName": pvc["spec"].get("storageClassName") or "",
                       "hostPath": {"path": path},
                       "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                    "namespace": ns, "name": name, "uid": meta["uid"]}}}
        try:
            kube.request("POST", "/api/v1/persistentvolumes", pv)
        except ApiError as e:
            if e.status != 409:
                raise
        kube.patch(f"/api/v1/persistentvolumes/{pv_name}/status", {"status": {"phase": "Bound"}},
                   strategic=False)
        base = f"/api/v1/namespaces/{quote(ns)}/persistentvolumeclaims/{quote(name)}"
        kube.patch(base, {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                          "spec": {"volumeName": pv_name}}, strategic=False)
        kube.patch(base + "/status", {"status": {"phase": "Bound", "accessModes": modes,
                                                 "capacity": {"storage": size}}}, strategic=False)
        log.info("bound claim %s/%s to %s (%s)", ns, name, pv_name, path)

    # ---- pods ----------------------------------------------------------------------------
    def _dispatch(self, etype: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        with self.ctx.lock:
            worker = self.ctx.workers.get(uid)
        if etype == "DELETED":
            self._finished.discard(uid)
            if worker is not None:
                worker.gone()
            return
        if worker is not None:
            worker.update(pod)
            return
        if uid in self._finished:
            return
        worker = PodWorker(self.ctx, pod)
        with self.ctx.lock:
            self.ctx.workers[uid] = worker
        self._finished.add(uid)  # from now on only this worker handles it
        worker.start()

    def _watch_pods(self) -> None:
        kube, sel = self.ctx.kube, f"spec.nodeName={self.ctx.name}"
        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    listing = kube.request("GET", "/api/v1/pods", params={"fieldSelector": sel})
                    seen = set()
                    for pod in listing["items"]:
                        seen.add(pod["metadata"]["uid"])
                        self._dispatch("ADDED", pod)
                    with self.ctx.lock:
                        vanished = [w for uid, w in self.ctx.workers.items() if uid not in seen]
                    for w in vanished:
                        w.gone()
                    rv = listing["metadata"]["resourceVersion"]
                for ev in kube.watch("/api/v1/pods", {"fieldSelector": sel, "resourceVersion": rv,
                                                      "timeoutSeconds": 60}):
                    if self.stop.is_set():
                        return
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        rv = ""  # 410 Gone and friends: relist
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if ev["type"] != "BOOKMARK":
                        self._dispatch(ev["type"], obj)
            except Exception as e:  # noqa: BLE001
                if not self.stop.is_set():
                    log.warning("pod watch: %s; relisting", e)
                    rv = ""
                    self.stop.wait(1.0)

    def run(self) -> None:
        self.register()
        for target in (self._heartbeat_loop, self._provision_loop):
            threading.Thread(target=target, daemon=True, name=target.__name__).start()
        threading.Thread(target=self._watch_pods, daemon=True, name="pod-watch").start()
        (self.ctx.workdir / "ready").write_text(now_iso() + "\n")

    def shutdown(self) -> None:
        """Stop every pod's processes (the API objects are left alone: the cluster goes too)."""
        self.stop.set()
        with self.ctx.lock:
            workers = list(self.ctx.workers.values())
        for w in workers:
            w.shutdown()
        for w in workers:
            w.join(timeout=15)
