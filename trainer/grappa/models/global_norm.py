"""GCN normalisation with the whole graph's degrees, for a user's `GCNConv(normalize=False)`:

    w_uv = s_v / sqrt((d_u + 1)(d_v + 1))   for each edge u -> v,    w_vv = 1 / (d_v + 1)

d = the global in-degree (`global_degree`, what Grappa passes a forward that names it), s_v =
d_v / k_v with k_v the in-edges of v present in `edge_index` (1 when all are: full-graph steps,
exact inference; the sampled share's inverse in mini-batch steps, so the sum over the sample
estimates the sum over all neighbours). This is the built-in GCN's normalisation (gcn.py); PyG's
own `gcn_norm` uses the degrees within `edge_index`, which on a partition are 0 for halo rows.

The self-loops are appended after the edges, one per row: use the result in a model that does
not trim its layers (PyG's trimming drops edges from the end).
"""
from __future__ import annotations

import torch
from torch import Tensor


def gcn_norm(edge_index: Tensor, global_degree: Tensor) -> tuple[Tensor, Tensor]:
    """(edge_index with a self-loop per row appended, float32 weights)."""
    n = global_degree.numel()
    src, dst = edge_index[0].long(), edge_index[1].long()
    deg = global_degree.to(torch.float64)
    dhat = deg + 1.0
    kept = torch.zeros(n, dtype=torch.float64).index_add_(0, dst, torch.ones(dst.numel(), dtype=torch.float64))
    scale = torch.where(kept > 0, deg / kept.clamp(min=1.0), torch.ones_like(deg))
    w = (dhat[src] * dhat[dst]).rsqrt() * scale[dst]
    loops = torch.arange(n, device=edge_index.device)
    return (torch.cat([torch.stack([src, dst]), torch.stack([loops, loops])], dim=1),
            torch.cat([w, 1.0 / dhat]).to(torch.float32))
