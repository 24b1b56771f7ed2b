"""A halo node's in-neighbourhood, which its worker does not hold (`grappa.halo`).

A halo node h has global in-degree d_h but none of its in-edges on the worker. **cut** (the
method paper's): a layer sees only its self-loop, in GCN h_h W / (d_h + 1) where the whole graph
gives sum_{u in N(h)} h_u W / sqrt((d_u + 1)(d_h + 1)) + h_h W / (d_h + 1): shrunk by about
1 / (d_h + 1). Every owned node beside h then aggregates a halo row of the wrong size, and the
error compounds with depth. Two estimates, both from what the worker has:

- **neighbours** (`with_owned_in_edges`): on an undirected graph h's in-neighbours among the
  owned nodes are the targets of h's local edges h -> v, so the worker has them, features and
  all. Added as in-edges of h, with the row's kept count, the layers scale them to h's degree as
  they scale a sampled row (GCN: d / kept; SAGE: their mean). Chunks are a seeded hash of ids,
  so they are a random sample of N(h).
- **self** (`cut_estimate`, models/ops.py `cut_rows`): N(h) counted as d_h copies of h. GCN also
  needs each copy's (d_u + 1)^(-1/2), a neighbour's degree; it takes

      m = mean over the local in-edges u -> v (v owned) of (d_u + 1)^(-1/2),

  the mean over edge sources, which the owned nodes sample uniformly. One float per round.

Neither reads anything from the store.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from grappa.data.blocks import Block
from grappa.data.local_graph import LocalGraph


def cut_estimate(g: LocalGraph) -> float:
    """m above, over the local graph's in-edges (0.0 when it has none)."""
    if g.indices.numel() == 0:
        return 0.0
    src_deg = g.deg.index_select(0, g.indices.long()).to(torch.float64)
    return float((src_deg + 1.0).rsqrt().mean())


def estimate_cut_rows(blocks: list[Block], m: Optional[float]) -> list[Block]:  # grappa.halo: self
    """The blocks, asking their layers to estimate cut rows with m (None: leave them cut)."""
    for b in blocks:
        b.cut_estimate = m
    return blocks


def with_owned_in_edges(g: LocalGraph) -> tuple[Tensor, Tensor, Tensor]:
    """The local CSR (indptr, indices) plus, for each halo row h, an in-edge v -> h from every owned
    v with a local edge h -> v, and each row's in-edges kept (for a layer's deg / kept scaling).
    On an undirected graph those are exactly h's in-neighbours that the worker owns: a sample of
    N(h) (chunks are a hash of ids), on the worker already, features and all.

    The halo's rows are empty in the local CSR (local_graph.py), so the owned rows stay as they
    are and the halo's are appended, sorted by h from the edges h -> v alone (v ascending within
    a row, as they are found). The new CSR holds its ids in the graph's dtype; building it takes
    about 15 bytes a halo edge more (tests/trainer/test_halo_estimate.py bounds it). Sorting
    every edge, as this did first, held several int64 copies of each and ran RMAT-22 at P = 8
    out of memory (workers killed at 3.6 to 3.9 GB of anonymous memory)."""
    indptr, indices = g.indptr.numpy(), g.indices.numpy()
    owned = g.num_owned
    if indptr[owned] != indptr[-1]:  # what appending the halo's rows relies on
        raise RuntimeError("the local graph's halo rows have in-edges; with_owned_in_edges expects none")
    at = np.flatnonzero(indices >= owned)  # the edges h -> v, h in the halo, in row order
    v = (np.searchsorted(indptr, at, side="right") - 1).astype(indices.dtype)
    h = indices[at] - owned
    del at
    order = np.argsort(h, kind="stable")  # by h; v stays ascending within each
    per_halo = np.bincount(h, minlength=g.num_nodes - owned)
    del h
    out_indices = np.concatenate([indices[:indptr[owned]], v[order]])
    del v, order
    kept = np.concatenate([np.diff(indptr[:owned + 1]), per_halo]).astype(np.int64)
    out_indptr = np.zeros(g.num_nodes + 1, dtype=np.int64)
    np.cumsum(kept, out=out_indptr[1:])
    return torch.from_numpy(out_indptr), torch.from_numpy(out_indices), torch.from_numpy(kept)
