"""Worker-to-worker halo exchange: who owns which halo row, fetching rows from their owners, and
the autograd function that sends activations forward and their gradients back.

Used by the strategies that exchange rows (strategies/full.py, varco.py, retexo.py).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Optional, Protocol

import torch
from torch import Tensor

from grappa.data.local_graph import LocalGraph, relabel


class Peers(Protocol):
    """Worker-to-worker messages; peers are 0-based worker indices."""

    def exchange(self, sends: dict[int, Tensor], recvs: dict[int, Tensor], kind: str) -> None:
        """Send every `sends[q]` to q and fill every `recvs[q]` from q, all at once."""


class LinkPeers:
    """Peers over the job's gloo group (worker index i is rank i + 1)."""

    def __init__(self, link) -> None:
        self.link = link

    def exchange(self, sends: dict[int, Tensor], recvs: dict[int, Tensor], kind: str) -> None:
        self.link.exchange({q + 1: t for q, t in sends.items()}, {q + 1: t for q, t in recvs.items()},
                           kind)


class ThreadPeers:
    """In-memory peers for P workers running as threads of one process (tests, simulation)."""

    def __init__(self, num_workers: int) -> None:
        self.boxes = {(s, d): queue.Queue() for s in range(num_workers) for d in range(num_workers)}
        self.bytes = {"sent": 0, "received": 0}
        self._lock = threading.Lock()

    def bind(self, me: int) -> "_BoundThreadPeers":
        return _BoundThreadPeers(self, me)


@dataclass
class _BoundThreadPeers:
    hub: ThreadPeers
    me: int

    def exchange(self, sends: dict[int, Tensor], recvs: dict[int, Tensor], kind: str) -> None:
        for q, t in sends.items():
            self.hub.boxes[(self.me, q)].put(t.detach().clone())
        for q, buf in recvs.items():
            buf.copy_(self.hub.boxes[(q, self.me)].get(timeout=120))
        with self.hub._lock:
            self.hub.bytes["sent"] += sum(t.numel() * t.element_size() for t in sends.values())
            self.hub.bytes["received"] += sum(t.numel() * t.element_size() for t in recvs.values())


@dataclass
class HaloPlan:
    """Which rows cross which worker pair. Only pairs with rows to move appear, so both ends of a
    pair agree on whether to talk."""

    send_rows: dict[int, Tensor]  # peer -> my owned local rows that peer needs
    recv_rows: dict[int, Tensor]  # peer -> my halo local rows that peer owns
    num_owned: int
    num_nodes: int

    @property
    def rows_fetched(self) -> int:
        return sum(int(r.numel()) for r in self.recv_rows.values())


def build_plan(g: LocalGraph, halo_owner: Tensor, me: int, num_workers: int, peers: Peers) -> HaloPlan:
    """Tell every owner which of its nodes I need and learn which of mine each peer needs.

    `halo_owner`: worker index of each halo node. Two fixed-size messages per pair, then the ids."""
    halo_ids = g.global_ids[g.num_owned:]
    others = [q for q in range(num_workers) if q != me]
    need = {q: halo_ids[halo_owner == q] for q in others}
    counts = {q: torch.empty(1, dtype=torch.long) for q in others}
    peers.exchange({q: torch.tensor([need[q].numel()]) for q in others}, counts, "control")
    wanted = {q: torch.empty(int(counts[q]), dtype=torch.long) for q in others if int(counts[q])}
    peers.exchange({q: ids for q, ids in need.items() if ids.numel()}, wanted, "control")
    recv_rows = {q: g.num_owned + torch.nonzero(halo_owner == q).view(-1) for q in others
                 if need[q].numel()}
    send_rows = {q: relabel(g.global_ids, ids) for q, ids in wanted.items()}
    return HaloPlan(send_rows, recv_rows, g.num_owned, g.num_nodes)


def fetch_rows(h_own: Tensor, plan: HaloPlan, peers: Peers) -> Tensor:
    """[owned rows of h_own; halo rows fetched from their owners], no autograd."""
    out = h_own.new_zeros(plan.num_nodes, h_own.shape[1])
    out[:plan.num_owned] = h_own
    recvs = {q: h_own.new_empty(rows.numel(), h_own.shape[1]) for q, rows in plan.recv_rows.items()}
    peers.exchange({q: h_own[rows] for q, rows in plan.send_rows.items()}, recvs, "fetch")
    for q, rows in plan.recv_rows.items():
        out[rows] = recvs[q]
    return out


def _count(log: Optional[dict], key: tuple, tensors) -> None:
    if log is not None:
        log[key] = log.get(key, 0) + sum(t.numel() * t.element_size() for t in tensors)


class _HaloExchange(torch.autograd.Function):
    """Forward: fetch halo activations. Backward: return their gradients to the owners, who add
    them to the gradients of the rows they sent. With a codec (VARCO) both directions travel
    compressed; the owner also sends the codec's side matrix (low-rank basis) when it has one."""

    @staticmethod
    def forward(ctx, h_own: Tensor, plan: HaloPlan, peers: Peers, codec, layer: int,
                log: Optional[dict]) -> Tensor:
        ctx.plan, ctx.peers, ctx.codec, ctx.layer, ctx.log = plan, peers, codec, layer, log
        h_own = h_own.detach()
        if codec is None:
            out = fetch_rows(h_own, plan, peers)
            _count(log, (layer, "forward"), [h_own[r] for r in plan.send_rows.values()])
            return out
        d, side = h_own.shape[1], codec.side_shape()
        extra = side[0] if side else 0
        sends, ctx.my_sides = {}, {}
        for q, rows in plan.send_rows.items():
            wire, s = codec.encode(h_own[rows])
            ctx.my_sides[q] = s
            sends[q] = torch.cat([wire, s]) if side else wire
        recvs = {q: h_own.new_empty(rows.numel() + extra, codec.k) for q, rows in plan.recv_rows.items()}
        peers.exchange(sends, recvs, "fetch")
        _count(log, (layer, "forward"), sends.values())
        out = h_own.new_zeros(plan.num_nodes, d)
        out[:plan.num_owned] = h_own
        ctx.their_sides = {}
        for q, rows in plan.recv_rows.items():
            buf = recvs[q]
            s = buf[rows.numel():] if side else None
            ctx.their_sides[q] = s
            out[rows] = codec.decode(buf[:rows.numel()], s)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        plan, peers, codec = ctx.plan, ctx.peers, ctx.codec
        grad_own = grad[:plan.num_owned].clone()
        width = grad.shape[1] if codec is None else codec.k
        recvs = {q: grad.new_empty(rows.numel(), width) for q, rows in plan.send_rows.items()}
        if codec is None:
            sends = {q: grad[rows].contiguous() for q, rows in plan.recv_rows.items()}
        else:
            sends = {q: codec.encode_grad(grad[rows], ctx.their_sides[q]) for q, rows in plan.recv_rows.items()}
        peers.exchange(sends, recvs, "fetch")
        _count(ctx.log, (ctx.layer, "backward"), sends.values())
        for q, rows in plan.send_rows.items():
            g = recvs[q] if codec is None else codec.decode_grad(recvs[q], ctx.my_sides[q])
            grad_own.index_add_(0, rows, g)
        return grad_own, None, None, None, None, None
