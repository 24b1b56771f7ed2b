"""Seed coverage: how complete a seed's (L-1)-hop computation graph is on the local subgraph.

c = (D^-1 (A + I))^(L-1) h, with h = 1 on complete (owned) nodes and 0 on halo nodes, mean
aggregation over in-neighbours plus self. L = 1 gives c = 1. Fixed within a round.

Each hop walks the CSR in slabs of destination rows: the gathered neighbour values are summed as
differences of a running sum, so the extra memory is one slab (8 bytes per edge of it), never a
per-edge array of the whole graph (a sparse matrix here cost ~22 bytes per local edge at its peak,
more than the local graph itself).
"""
from __future__ import annotations

import torch
from torch import Tensor

_SLAB_EDGES = 1 << 20


def _neighbour_sums(indptr: Tensor, indices: Tensor, h: Tensor) -> Tensor:
    n = indptr.numel() - 1
    out = torch.empty(n, dtype=h.dtype)
    lo = 0
    while lo < n:
        # the largest row range starting at lo with at most _SLAB_EDGES edges (at least one row)
        hi = int(torch.searchsorted(indptr, indptr[lo] + _SLAB_EDGES, right=True)) - 1
        hi = min(n, max(hi, lo + 1))
        e0, e1 = int(indptr[lo]), int(indptr[hi])
        running = torch.zeros(e1 - e0 + 1, dtype=h.dtype)
        torch.cumsum(h.index_select(0, indices[e0:e1].long()), 0, out=running[1:])
        ends = indptr[lo:hi + 1] - e0
        out[lo:hi] = running[ends[1:]] - running[ends[:-1]]
        lo = hi
    return out


def coverage(indptr: Tensor, indices: Tensor, complete: Tensor, num_layers: int) -> Tensor:
    """float64 coverage of every local node; CSR by destination (`indptr` over all nodes)."""
    n = complete.numel()
    if num_layers <= 1:
        return torch.ones(n, dtype=torch.float64)
    indptr = indptr.to(torch.int64)
    h = complete.to(torch.float64)
    deg = (indptr[1:] - indptr[:-1]).to(torch.float64) + 1.0
    for _ in range(num_layers - 1):
        h = (h + _neighbour_sums(indptr, indices, h)) / deg
    return h
