"""Cluster DNS without a DNS server: Service names found in a container's environment are
rewritten to the IPs of the pods behind the Service before the process starts, and a per-pod
/etc/hosts lists what resolves at that moment.

Why rewriting: a real cluster resolves `<svc>.<ns>.svc` through CoreDNS to a ClusterIP that
kube-proxy forwards to a pod. Here neither exists, and ClusterIPs must never be dialled, so the
name is replaced by what the ClusterIP would forward to (one ready backing pod) or, for headless
Services, by what DNS would return (the ready pods' own IPs).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from .kube import Kube, Obj

log = logging.getLogger("processnode.dns")

CLUSTER_DOMAIN = "cluster.local"
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
# A host name, optionally followed by :port, not glued to other name characters.
_HOST = re.compile(rf"(?<![A-Za-z0-9._-])({_LABEL}(?:\.{_LABEL})*)(?::([0-9]{{1,5}}))?(?![A-Za-z0-9_-])")


@dataclass(frozen=True)
class Target:
    ns: str
    service: str
    hostname: str | None  # `<hostname>.<subdomain>.<ns>.svc`: one pod of a headless Service
    explicit: bool        # written with `.svc`: the intent is certain, so waiting is justified


class Resolver:
    def __init__(self, kube: Kube, apiserver_port: int, wait_seconds: float) -> None:
        self.kube = kube
        self.apiserver_port = apiserver_port
        self.wait_seconds = wait_seconds

    # ---- parsing -------------------------------------------------------------------------
    def _target(self, name: str, pod_ns: str, whole_value: bool) -> Target | None:
        parts = name.split(".")
        if name.endswith(".svc." + CLUSTER_DOMAIN):
            parts = parts[:-2]
        if parts[-1] == "svc" and len(parts) in (3, 4):
            if len(parts) == 3:
                return Target(parts[1], parts[0], None, True)
            return Target(parts[2], parts[1], parts[0], True)
        if parts[-1].isdigit():  # numbers and IP addresses
            return None
        if len(parts) == 2:
            return Target(parts[1], parts[0], None, False)
        if len(parts) == 1 and whole_value:
            # A bare word is only taken for a name when it is the whole value (or a URL's host):
            # otherwise any word in a JSON blob that happens to equal a Service name would change.
            return Target(pod_ns, parts[0], None, False)
        return None

    # ---- lookups -------------------------------------------------------------------------
    def _service(self, ns: str, name: str) -> Obj | None:
        return self.kube.get(f"/api/v1/namespaces/{quote(ns)}/services/{quote(name)}")

    def _backends(self, svc: Obj, self_uid: str) -> list[Obj]:
        """Pods a Service would route to, ready ones only (as EndpointSlices would list them),
        except that the starting pod itself counts: a process resolving its own headless name
        must not wait for its own readiness."""
        selector = svc["spec"].get("selector")
        if not selector:
            return []
        ns = svc["metadata"]["namespace"]
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = self.kube.request("GET", f"/api/v1/namespaces/{quote(ns)}/pods",
                                 params={"labelSelector": sel})["items"]
        publish_all = bool(svc["spec"].get("publishNotReadyAddresses"))
        out = []
        for p in pods:
            st = p.get("status", {})
            if not st.get("podIP") or p["metadata"].get("deletionTimestamp"):
                continue
            if st.get("phase") in ("Succeeded", "Failed"):
                continue
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))
            if ready or publish_all or p["metadata"]["uid"] == self_uid:
                out.append(p)
        return sorted(out, key=lambda p: p["metadata"]["name"])

    def _resolve(self, t: Target, self_uid: str, port: str | None, deadline: float,
                 cancelled: Callable[[], bool]) -> str | None:
        """`ip` or `ip:port` for the target, or None when it is not a Service we can resolve."""
        if t.service == "kubernetes" and t.ns == "default":
            # The API server: only reachable at its real loopback address and port.
            return "127.0.0.1" + (f":{self.apiserver_port}" if port else "")
        while True:
            svc = self._service(t.ns, t.service)
            if svc is not None:
                pods = self._backends(svc, self_uid)
                if t.hostname is not None:
                    pods = [p for p in pods if p["spec"].get("hostname") == t.hostname
                            and p["spec"].get("subdomain") == t.service]
                if pods:
                    return pods[0]["status"]["podIP"] + self._port(svc, pods[0], port)
            elif not t.explicit:
                return None
            if cancelled():  # the pod is being deleted: stop waiting for its peers
                return None
            if time.monotonic() > deadline:
                log.warning("service %s/%s has no ready backend after %.0fs; name left as is",
                            t.ns, t.service, self.wait_seconds)
                return None
            time.sleep(0.5)

    @staticmethod
    def _port(svc: Obj, pod: Obj, port: str | None) -> str:
        """A ClusterIP Service maps its port to the pod's targetPort; DNS for headless Services
        returns pod IPs, so the client already uses the pod's port."""
        if port is None:
            return ""
        if svc["spec"].get("clusterIP") == "None":
            return f":{port}"
        for sp in svc["spec"].get("ports", []):
            if str(sp.get("port")) == port:
                tp = sp.get("targetPort", sp["port"])
                if isinstance(tp, int) or str(tp).isdigit():
                    return f":{tp}"
                for c in pod["spec"].get("containers", []):
                    for cp in c.get("ports", []):
                        if cp.get("name") == tp:
                            return f":{cp['containerPort']}"
        return f":{port}"

    # ---- public --------------------------------------------------------------------------
    def rewrite_env(self, env: dict[str, str], pod: Obj,
                    cancelled: Callable[[], bool] = lambda: False,
                    only: set[str] | None = None) -> dict[str, str]:
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        deadline = time.monotonic() + self.wait_seconds
        out: dict[str, str] = {}
        for key, value in env.items():
            if only is not None and key not in only:
                out[key] = value
                continue

            def sub(m: re.Match[str], value: str = value) -> str:
                name, port = m.group(1), m.group(2)
                whole = m.group(0) == value or value[:m.start()].endswith("://")
                t = self._target(name, ns, whole)
                if t is None:
                    return m.group(0)
                try:
                    r = self._resolve(t, uid, port, deadline, cancelled)
                except Exception as e:  # noqa: BLE001 - a lookup error must not kill the pod worker
                    log.warning("resolving %s: %s", name, e)
                    return m.group(0)
                if r is None:
                    return m.group(0)
                log.info("env %s: %s -> %s", key, m.group(0), r)
                return r
            out[key] = _HOST.sub(sub, value)
        return out

    def hosts_file(self, pod: Obj, pod_ip: str) -> str:
        """/etc/hosts as the kubelet writes it, plus the Services resolvable right now."""
        meta, spec = pod["metadata"], pod["spec"]
        ns = meta["namespace"]
        hostname = spec.get("hostname") or meta["name"][:63]
        lines = ["# Kubernetes-managed hosts file (written by the process node).",
                 "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        own = hostname
        if spec.get("subdomain"):
            own = f"{hostname}.{spec['subdomain']}.{ns}.svc.{CLUSTER_DOMAIN}\t{hostname}"
        lines.append(f"{pod_ip}\t{own}")
        lines.append("127.0.0.1\tkubernetes.default.svc.cluster.local kubernetes.default.svc "
                     "kubernetes.default")
        try:
            services = self.kube.request("GET", f"/api/v1/namespaces/{quote(ns)}/services")["items"]
        except Exception as e:  # noqa: BLE001
            log.warning("listing services for hosts file: %s", e)
            services = []
        for svc in services:
            name = svc["metadata"]["name"]
            try:
                backends = self._backends(svc, meta["uid"])
            except Exception:  # noqa: BLE001
                continue
            if svc["spec"].get("clusterIP") != "None":
                backends = backends[:1]
            for p in backends:
                names = f"{name}.{ns}.svc.{CLUSTER_DOMAIN} {name}.{ns}.svc {name}.{ns} {name}"
                lines.append(f"{p['status']['podIP']}\t{names}")
        return "\n".join(lines) + "\n"
