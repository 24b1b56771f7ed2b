"""The graph a model runs on: edges plus the per-edge weights some layers need."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class MessageGraph:
    """Edges (src -> dst, no self-loops) and, for GCN, the normalised adjacency with self-loops
    as a CSR matrix (rows = dst): one sparse product per layer instead of a gathered message per
    edge, about 4x faster and half the memory on a 2M-edge graph.

    `deg` holds *global* in-degrees (self-loops excluded) of every node: with local degrees a halo
    node (in-degree 0 locally) would send messages inflated by sqrt(deg), the largest error source
    the method doc measured.
    """

    edge_index: Tensor
    num_nodes: int
    deg: Tensor
    gcn_adj: Optional[Tensor] = None


def build_message_graph(edge_index: Tensor, num_nodes: int, deg: Tensor,
                        sampled_in: Optional[Tensor] = None, need_gcn: bool = True) -> MessageGraph:
    """Precompute what the layers need once per graph (once per round, or per sampled batch).

    GCN weight of u -> v: 1 / sqrt((d_u + 1)(d_v + 1)) with global degrees d, self-loop 1/(d_v + 1).
    When neighbours were sampled (`sampled_in[v]` of d_v kept), neighbour weights are scaled by
    d_v / sampled_in[v] so the sum over the sample estimates the sum over all neighbours.
    """
    g = MessageGraph(edge_index=edge_index, num_nodes=num_nodes, deg=deg)
    if not need_gcn:
        return g
    src, dst = edge_index
    dhat = deg.to(torch.float32) + 1.0
    w = (dhat[src] * dhat[dst]).rsqrt()
    if sampled_in is not None:
        kept = sampled_in.to(torch.float32).clamp(min=1.0)
        w = w * (deg.to(torch.float32)[dst] / kept[dst])
    loops = torch.arange(num_nodes, device=edge_index.device)
    rows = torch.cat([dst, loops])
    cols = torch.cat([src, loops])
    with warnings.catch_warnings():  # "sparse CSR support is in beta": sparse @ dense is stable
        warnings.simplefilter("ignore", UserWarning)
        # coalesce sums repeated edges, as the per-edge scatter did
        g.gcn_adj = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.cat([w, 1.0 / dhat]),
                                            (num_nodes, num_nodes)).coalesce().to_sparse_csr()
    return g
