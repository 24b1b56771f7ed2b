"""Seed coverage: how complete a seed's (L-1)-hop computation graph is on the local subgraph.

c = (D^-1 (A + I))^(L-1) h, with h = 1 on complete (owned) nodes and 0 on halo nodes, mean
aggregation over in-neighbours plus self. L = 1 gives c = 1. Fixed within a round.

Each hop is a sparse product A h (scipy's CSR kernel, some 10x the gather-and-cumsum it replaced
on a round's graph), taken over slabs of destination rows: the CSR's own index arrays are viewed,
not copied, so the extra memory is one slab's unit weights (8 bytes per edge of it), never a
per-edge array of the whole graph (a whole-graph sparse matrix cost ~22 bytes per local edge at
its peak, more than the local graph itself).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

_SLAB_EDGES = 1 << 18


def _neighbour_sums(indptr: np.ndarray, indices: np.ndarray, h: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """(A h)[v] = sum of h over v's in-neighbours, a slab of rows at a time; `ones`: a slab's
    unit weights."""
    n = indptr.size - 1
    out = np.empty(n, dtype=h.dtype)
    lo = 0
    while lo < n:
        # the largest row range starting at lo with at most _SLAB_EDGES edges (at least one row)
        hi = int(np.searchsorted(indptr, indptr[lo] + _SLAB_EDGES, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        e0, e1 = int(indptr[lo]), int(indptr[hi])
        # (a slab of one row may pass _SLAB_EDGES)
        weights = ones[:e1 - e0] if e1 - e0 <= ones.size else np.ones(e1 - e0, dtype=h.dtype)
        rows = (indptr[lo:hi + 1] - e0).astype(indices.dtype)
        out[lo:hi] = sp.csr_array((weights, indices[e0:e1], rows), shape=(hi - lo, h.size)) @ h
        lo = hi
    return out


def coverage(indptr: Tensor, indices: Tensor, complete: Tensor, num_layers: int) -> Tensor:
    """float64 coverage of every local node; CSR by destination (`indptr` over all nodes)."""
    n = complete.numel()
    if num_layers <= 1:
        return torch.ones(n, dtype=torch.float64)
    ip = indptr.numpy().astype(np.int64, copy=False)
    ix = indices.numpy()
    h = complete.numpy().astype(np.float64)
    deg = np.diff(ip).astype(np.float64) + 1.0
    ones = np.ones(min(int(ip[-1]), _SLAB_EDGES))
    for _ in range(num_layers - 1):
        h = (h + _neighbour_sums(ip, ix, h, ones)) / deg
    return torch.from_numpy(h)
