"""A worker's local subgraph for one round: base + variable chunks, plus their 1-hop halo.

Every in-edge of an owned (base or variable) node is present, so owned nodes are *complete*; halo
nodes carry features and global degrees but no in-edges, so message passing stops at them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor

from .chunks.store import ChunkStore


@dataclass
class LocalGraph:
    global_ids: Tensor  # local index -> global id; owned nodes first (base chunks first), then halo
    num_base: int
    num_owned: int
    x: Tensor
    y: Tensor
    deg: Tensor  # global in-degree, self-loops excluded
    edge_index: Tensor  # local ids, src -> dst, no self-loops; every dst is owned
    train_mask: Tensor  # base training nodes only: the seeds
    val_mask: Tensor
    test_mask: Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.global_ids.numel())

    @property
    def num_halo(self) -> int:
        return self.num_nodes - self.num_owned

    @property
    def complete(self) -> Tensor:
        return torch.arange(self.num_nodes) < self.num_owned

    @property
    def seeds(self) -> Tensor:
        return self.train_mask.nonzero().view(-1)


def relabel(global_ids: Tensor, query: Tensor) -> Tensor:
    """Positions of `query` ids inside `global_ids` (all must be present)."""
    order = torch.argsort(global_ids)
    pos = torch.searchsorted(global_ids[order], query)
    return order[pos]


def build_local_graph(store: ChunkStore, base: Sequence[int],
                      variable: Optional[int] = None) -> LocalGraph:
    """Load the base chunks (and the variable chunk) and the halo rows they need from the store."""
    owned_chunks = [store.load_chunk(k) for k in base]
    num_base = sum(int(c.nodes.numel()) for c in owned_chunks)
    if variable is not None:
        owned_chunks.append(store.load_chunk(variable))

    owned = torch.cat([c.nodes for c in owned_chunks])
    edges = torch.cat([c.edge_index for c in owned_chunks], dim=1)
    src = edges[0]
    owned_sorted = torch.sort(owned).values
    pos = torch.searchsorted(owned_sorted, src).clamp(max=owned_sorted.numel() - 1)
    is_owned = owned_sorted[pos] == src
    halo = torch.unique(src[~is_owned])
    halo_x, halo_deg = store.load_node_rows(halo)

    global_ids = torch.cat([owned, halo])
    edge_index = torch.stack([relabel(global_ids, edges[0]), relabel(global_ids, edges[1])])

    def owned_cat(attr: str) -> Tensor:
        return torch.cat([getattr(c, attr) for c in owned_chunks])

    num_owned = int(owned.numel())
    pad = torch.zeros(halo.numel(), dtype=torch.bool)
    base_only = torch.arange(num_owned) < num_base

    def split_mask(attr: str) -> Tensor:
        return torch.cat([owned_cat(attr) & base_only, pad])

    y = torch.cat([owned_cat("y"), torch.full((halo.numel(),), -1, dtype=torch.long)])
    return LocalGraph(
        global_ids=global_ids, num_base=num_base, num_owned=num_owned,
        x=torch.cat([owned_cat("x"), halo_x]).to(torch.float32), y=y,
        deg=torch.cat([owned_cat("in_degree"), halo_deg]).to(torch.long),
        edge_index=edge_index,
        train_mask=split_mask("train_mask"), val_mask=split_mask("val_mask"),
        test_mask=split_mask("test_mask"),
    )
