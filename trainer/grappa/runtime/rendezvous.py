"""Joining the gloo group (`env://` variables) with rank 0's rendezvous store listening only on
$GRAPPA_RENDEZVOUS_ADDRESS when it is set: torch's TCPStore otherwise listens on every interface.
`grappa train` sets 127.0.0.1 (a local run is reachable from this machine only); pods leave it
unset, so workers reach the aggregator through its Service."""
from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch.distributed as dist


def bind_address() -> str:
    return os.environ.get("GRAPPA_RENDEZVOUS_ADDRESS", "").strip()


def init_group(timeout: timedelta) -> None:
    addr, rank = bind_address(), int(os.environ["RANK"])
    if not addr or rank != 0:
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
        return
    port, world = int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"])
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, port))
    sock.listen(max(128, world))
    # The store owns the descriptor from here (detach: Python must not close it).
    store = dist.TCPStore(addr, port, world, is_master=True, timeout=timeout,
                          master_listen_fd=sock.detach())
    # The prefix env:// adds to its own store; the other ranks join through env:// and use it.
    dist.init_process_group("gloo", store=dist.PrefixStore("default_pg", store), rank=0,
                            world_size=world, timeout=timeout)
