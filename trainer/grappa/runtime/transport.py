"""Point-to-point messages between the aggregator (rank 0) and the workers, with exact byte counts.

torch.distributed with gloo and `env://` rendezvous. We use send/recv rather than collectives so
the bytes each rank puts on and takes off the wire are exactly the payloads we count: a gloo
broadcast may relay through other ranks, which would make per-rank accounting a guess.
Counters are split by kind: "train" (gradients and parameters), "fetch" (remote features and
activations, worker to worker, `strategy: full` only), "eval" (layer-wise evaluation), "control"
(round set-up, commands, the initial parameters, per-epoch worker reports).
"""
from __future__ import annotations

import os
from collections import defaultdict
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from .rendezvous import init_group

KINDS = ("train", "fetch", "eval", "control")
_HEADER = 9  # ndim, dtype code, up to 7 dims


_DTYPES = [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool]


class ByteCounter:
    def __init__(self) -> None:
        self.sent: dict[str, int] = defaultdict(int)
        self.received: dict[str, int] = defaultdict(int)

    def snapshot(self) -> dict:
        return {"sent": dict(self.sent), "received": dict(self.received)}


def nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


class Link:
    """This rank's end of every aggregator <-> worker channel."""

    def __init__(self, rank: int, world_size: int, counter: Optional[ByteCounter] = None):
        self.rank = rank
        self.world_size = world_size
        self.bytes = counter or ByteCounter()

    @classmethod
    def from_env(cls, timeout_s: float = 1800.0) -> "Link":
        """Join the group described by MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (gloo)."""
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if k not in os.environ]
        if missing:
            raise RuntimeError(f"missing rendezvous environment variables: {', '.join(missing)}")
        init_group(timedelta(seconds=timeout_s))  # rendezvous.py: binds $GRAPPA_RENDEZVOUS_ADDRESS
        return cls(dist.get_rank(), dist.get_world_size())

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    # Fixed-size messages: both ends know the shape, so only the payload crosses the wire.
    def send(self, t: Tensor, dst: int, kind: str) -> None:
        dist.send(t.contiguous(), dst)
        self.bytes.sent[kind] += nbytes(t)

    def recv(self, buf: Tensor, src: int, kind: str) -> Tensor:
        dist.recv(buf, src)
        self.bytes.received[kind] += nbytes(buf)
        return buf

    def send_many(self, items: list[tuple[Tensor, int]], kind: str) -> None:
        """Send to several peers concurrently (the aggregator's parameter fan-out)."""
        works = [dist.isend(t.contiguous(), dst) for t, dst in items]
        for w in works:
            w.wait()
        for t, _ in items:
            self.bytes.sent[kind] += nbytes(t)

    def recv_many(self, items: list[tuple[Tensor, int]], kind: str) -> list[Tensor]:
        """Receive from several peers concurrently (the aggregator's gradient fan-in)."""
        works = [dist.irecv(buf, src) for buf, src in items]
        for w in works:
            w.wait()
        for buf, _ in items:
            self.bytes.received[kind] += nbytes(buf)
        return [buf for buf, _ in items]

    def exchange(self, sends: dict[int, Tensor], recvs: dict[int, Tensor], kind: str) -> None:
        """Send to and receive from several peers at once (worker <-> worker halo rows)."""
        payloads = [(t.contiguous(), dst) for dst, t in sends.items()]
        works = [dist.isend(t, dst) for t, dst in payloads]
        works += [dist.irecv(buf, src) for src, buf in recvs.items()]
        for w in works:
            w.wait()
        self.bytes.sent[kind] += sum(nbytes(t) for t, _ in payloads)
        self.bytes.received[kind] += sum(nbytes(b) for b in recvs.values())

    # Variable-size messages carry a small header (counted too) describing shape and dtype.
    def send_var(self, t: Tensor, dst: int, kind: str) -> None:
        header = torch.zeros(_HEADER, dtype=torch.int64)
        header[0] = t.dim()
        header[1] = _DTYPES.index(t.dtype)
        header[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        self.send(header, dst, kind)
        if t.numel():
            self.send(t, dst, kind)

    def recv_var(self, src: int, kind: str) -> Tensor:
        header = self.recv(torch.zeros(_HEADER, dtype=torch.int64), src, kind)
        ndim, code = int(header[0]), int(header[1])
        shape = [int(s) for s in header[2:2 + ndim]]
        buf = torch.empty(shape, dtype=_DTYPES[code])
        if buf.numel():
            self.recv(buf, src, kind)
        return buf
