"""Full-communication baseline (`strategy: full`): the feature-fetching training Grappa avoids.

Partitions are fixed (each worker's base chunks, no variable chunk). Every step, each worker
fetches the input features of its remote in-neighbours from the workers that own them, and before
every later layer their activations; the backward pass returns the gradients of those activations
to their owners (BNS-GCN with p = 1, DistDGL-style feature fetching). Gradients then go through the
same aggregator and optimizer as Grappa, unweighted: with every neighbour present,
sum_p grad_p / sum_p seeds_p is exactly the full-graph gradient.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from .local_graph import LocalGraph, relabel
from .models import GNN, MessageGraph


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


def build_plan(g: LocalGraph, owner: Tensor, me: int, num_workers: int, peers: Peers) -> HaloPlan:
    """Tell every owner which of its nodes I need and learn which of mine each peer needs.

    `owner`: worker index per global node. Two fixed-size messages per pair, then the ids."""
    halo_ids = g.global_ids[g.num_owned:]
    halo_owner = owner[halo_ids]
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


class _HaloExchange(torch.autograd.Function):
    """Forward: fetch halo activations. Backward: return their gradients to the owners, who add
    them to the gradients of the rows they sent."""

    @staticmethod
    def forward(ctx, h_own: Tensor, plan: HaloPlan, peers: Peers) -> Tensor:
        ctx.plan, ctx.peers = plan, peers
        return fetch_rows(h_own.detach(), plan, peers)

    @staticmethod
    def backward(ctx, grad: Tensor):
        plan, peers = ctx.plan, ctx.peers
        grad_own = grad[:plan.num_owned].clone()
        recvs = {q: grad.new_empty(rows.numel(), grad.shape[1]) for q, rows in plan.send_rows.items()}
        peers.exchange({q: grad[rows].contiguous() for q, rows in plan.recv_rows.items()}, recvs, "fetch")
        for q, rows in plan.send_rows.items():
            grad_own.index_add_(0, rows, recvs[q])
        return grad_own, None, None


def forward_full(model: GNN, x_own: Tensor, mg: MessageGraph, plan: HaloPlan, peers: Peers) -> Tensor:
    """Logits of the owned nodes with every remote neighbour's features and activations fetched.
    Every worker must call this in lockstep (the exchanges pair up layer by layer)."""
    h = model.prepare_input(fetch_rows(x_own, plan, peers))
    last = len(model.layers) - 1
    for i in range(last + 1):
        out = model.layer(i, h, mg)[:plan.num_owned]
        if i < last:
            h = _HaloExchange.apply(out, plan, peers)
    return out
