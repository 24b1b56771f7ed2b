"""What one message-passing layer runs on: a block, CSR by destination.

A layer maps input rows (`num_src` of them) to output rows (`num_dst`); the output nodes are the
first `num_dst` input nodes, so a node's own row (self-loops, SAGE's root weight, GIN's (1+eps)
term) is `h[v]` for v < num_dst. Row v's in-neighbours are `indices[indptr[v]:indptr[v+1]]`
(input-row ids; no self-loops, no duplicates). A model of L layers runs on L blocks, input layer
first, block l's `num_dst` being block l+1's `num_src`: training computes only the rows the seeds
need (their shrinking L-hop in-neighbourhood), evaluation only the rows it keeps.

`deg` holds the *global* in-degree (self-loops excluded) of every input row, which GCN's
normalisation uses: a halo node's local in-degree is 0. `kept` is, per output row, how many
in-neighbours the block kept when it samples them (None: all of them); GCN scales a sampled row's
neighbour terms by deg / kept so the sum over the sample estimates the sum over all neighbours.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor


@dataclass
class Block:
    indptr: Tensor                 # int64 [num_dst + 1], indptr[0] == 0
    indices: Tensor                # int32 or int64 [E], values in [0, num_src)
    num_src: int
    deg: Tensor                    # int32/int64 [num_src]: global in-degree of the input rows
    kept: Optional[Tensor] = None  # int [num_dst]: in-neighbours kept when sampled, else None
    # What a layer derives from the block alone (GCN's edge weights, ...), computed once per block.
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_dst(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    def local_in_degree(self) -> Tensor:
        """In-edges of each output row inside this block (int64 [num_dst])."""
        return self.indptr[1:] - self.indptr[:-1]

    def dst_of_edges(self) -> Tensor:
        """The output row of every edge (int64 [E]), in CSR order."""
        return torch.repeat_interleave(torch.arange(self.num_dst), self.local_in_degree(),
                                       output_size=self.num_edges)

    def to_edge_index(self) -> Tensor:
        """int64 [2, E] (src, dst): for reference implementations and tests."""
        return torch.stack([self.indices.long(), self.dst_of_edges()])

    @staticmethod
    def from_edge_index(edge_index: Tensor, num_src: int, num_dst: int, deg: Tensor,
                        kept: Optional[Tensor] = None) -> "Block":
        """A block from (src, dst) pairs with dst < num_dst <= num_src (any order)."""
        src, dst = edge_index.long()
        order = torch.argsort(dst * max(1, num_src) + src)
        indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=indptr[1:])
        return Block(indptr, src[order].to(torch.int32), num_src, deg, kept)


def full_block(edge_index: Tensor, num_nodes: int, deg: Tensor) -> Block:
    """The whole graph as one block: every node is an output row (single process, tests).
    `edge_index` must be clean as a block requires (the dataset loaders make it so)."""
    return Block.from_edge_index(edge_index, num_nodes, num_nodes, deg)
