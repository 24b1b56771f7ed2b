"""httpGet and tcpSocket probes against the pod's own loopback IP."""

from __future__ import annotations

import http.client
import logging
import socket
from dataclasses import dataclass

from .kube import Obj

log = logging.getLogger("processnode.probes")


@dataclass
class ProbeState:
    next_due: float = 0.0
    successes: int = 0
    failures: int = 0


def _port(value: int | str, container: Obj) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for p in container.get("ports", []):
        if p.get("name") == value:
            return int(p["containerPort"])
    raise ValueError(f"named port {value!r} not declared by container {container['name']}")


def run_probe(probe: Obj, pod_ip: str, container: Obj) -> bool:
    """One probe attempt. `host` fields are ignored: only the pod's loopback IP is ever dialled."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            h = probe["httpGet"]
            if h.get("scheme", "HTTP").upper() != "HTTP":
                log.warning("HTTPS probes are not supported; counting as success")
                return True
            conn = http.client.HTTPConnection(pod_ip, _port(h["port"], container), timeout=timeout)
            try:
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders", [])}
                headers.setdefault("User-Agent", "kube-probe/processnode")
                conn.request("GET", h.get("path", "/"), headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            with socket.create_connection((pod_ip, _port(probe["tcpSocket"]["port"], container)), timeout):
                return True
        if "exec" in probe or "grpc" in probe:
            # Not modelled; success keeps such pods usable rather than flapping.
            return True
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return True
