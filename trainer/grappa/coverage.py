"""Seed coverage: how complete a seed's (L-1)-hop computation graph is on the local subgraph.

c = (D^-1 (A + I))^(L-1) h, with h = 1 on complete (owned) nodes and 0 on halo nodes, mean
aggregation over in-neighbours plus self. L = 1 gives c = 1. Fixed within a round.
"""
from __future__ import annotations

import torch
from torch import Tensor


def coverage(edge_index: Tensor, complete: Tensor, num_layers: int) -> Tensor:
    n = complete.numel()
    h = complete.to(torch.float64)
    if num_layers <= 1:
        return torch.ones(n, dtype=torch.float64)
    src, dst = edge_index
    deg = torch.bincount(dst, minlength=n).to(torch.float64) + 1.0
    for _ in range(num_layers - 1):
        agg = h.clone()  # the self-loop term
        agg.index_add_(0, dst, h[src])
        h = agg / deg
    return h
