"""State shared by the node's threads: configuration, IP allocation, the pgid ledger."""

from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dns import Resolver
from .kube import Kube

if TYPE_CHECKING:
    from .pod import PodWorker


@dataclass
class NodeContext:
    kube: Kube
    name: str
    workdir: Path
    python: str
    repo: Path
    apiserver_port: int
    resolver: Resolver
    allocatable: dict[str, str]
    backoff_base: float
    entrypoints: dict[str, list[str]]
    image_env: dict[str, str]
    pod_cidr_start: str = "127.10.0.2"
    hide: list[Path] = field(default_factory=list)
    workers: dict[str, "PodWorker"] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _next_ip: int = 0

    def allocate_ip(self) -> str:
        """Pod IPs are never reused within a node's life: a stale address in some client's
        environment then fails loudly instead of reaching an unrelated pod."""
        with self.lock:
            if not self._next_ip:
                self._next_ip = int(ipaddress.IPv4Address(self.pod_cidr_start))
            while True:
                ip = ipaddress.IPv4Address(self._next_ip)
                self._next_ip += 1
                if ip.packed[-1] not in (0, 1, 255):
                    break
            if ip not in ipaddress.IPv4Network("127.0.0.0/8"):
                raise RuntimeError("pod IP range exhausted")
            return str(ip)

    def record_pgid(self, pgid: int, what: str) -> None:
        """Append-only ledger so the test fixture can verify (and enforce) that every pod
        process group is gone after teardown, even if this node crashed."""
        try:  # the leader's start time tells a reused PID apart from our group
            started = int(Path(f"/proc/{pgid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            started = 0
        with self.lock, open(self.workdir / "pgids", "a") as f:
            f.write(f"{pgid} {started} {what}\n")

    def forget(self, uid: str, worker: Any) -> None:
        with self.lock:
            if self.workers.get(uid) is worker:
                del self.workers[uid]
