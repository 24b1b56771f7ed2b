"""Seed coverage: how complete a seed's (L-1)-hop computation graph is on the local subgraph.

c = (D^-1 (A + I))^(L-1) h, with h = 1 on complete (owned) nodes and 0 on halo nodes, mean
aggregation over in-neighbours plus self. L = 1 gives c = 1. Fixed within a round; one sparse
product per layer over the local CSR.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor


def coverage(indptr: Tensor, indices: Tensor, complete: Tensor, num_layers: int) -> Tensor:
    """float64 coverage of every local node; CSR by destination (`indptr` over all nodes)."""
    n = complete.numel()
    h = complete.to(torch.float64)
    if num_layers <= 1:
        return torch.ones(n, dtype=torch.float64)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": sparse @ dense is stable
        warnings.simplefilter("ignore", UserWarning)
        adj = torch.sparse_csr_tensor(indptr, indices.long(), torch.ones(indices.numel(), dtype=torch.float64),
                                      (n, n))
    deg = (indptr[1:] - indptr[:-1]).to(torch.float64) + 1.0
    for _ in range(num_layers - 1):
        h = (h + (adj @ h.unsqueeze(1)).squeeze(1)) / deg
    return h
