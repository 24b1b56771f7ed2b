"""Edge-list hygiene shared by every loader: no self-loops, no duplicate columns."""
from __future__ import annotations

import torch


def clean_edges(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Drop self-loops and duplicate (src, dst) columns; result sorted by (src, dst), int64."""
    src, dst = edge_index.long()
    keep = src != dst
    key = torch.unique(src[keep] * num_nodes + dst[keep])  # sorted, so also coalesced
    return torch.stack([key // num_nodes, key % num_nodes])


def symmetric_from_pairs(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Undirected edge_index (both directions) from arbitrary pairs: dedup on the unordered pair
    first, so the sort runs over E keys rather than 2E."""
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = lo != hi
    key = torch.unique(lo[keep] * num_nodes + hi[keep])
    lo, hi = key // num_nodes, key % num_nodes
    del key
    return torch.stack([torch.cat([lo, hi]), torch.cat([hi, lo])])
