"""The rendezvous store rank 0 hosts, listening only on $GRAPPA_RENDEZVOUS_ADDRESS when it is set:
torch's TCPStore otherwise listens on every interface. `grappa train` sets 127.0.0.1 (a local run
is reachable from this machine only); pods leave it unset, so workers reach the aggregator
through its Service."""
from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist


def bind_address() -> str:
    return os.environ.get("GRAPPA_RENDEZVOUS_ADDRESS", "").strip()


def open_store(host: str, port: int, world: int, rank: int, timeout: timedelta) -> dist.TCPStore:
    """Rank 0 serves the store, the others connect to it (no waiting for everyone here)."""
    addr = bind_address()
    if rank != 0 or not addr:
        return dist.TCPStore(host, port, world, is_master=rank == 0, timeout=timeout,
                             wait_for_workers=False)
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, port))
    sock.listen(max(128, world))
    # The store owns the descriptor from here (detach: Python must not close it).
    return dist.TCPStore(addr, port, world, is_master=True, timeout=timeout,
                         master_listen_fd=sock.detach(), wait_for_workers=False)
