"""Blocks: what one message-passing layer runs on (CSR by destination), and their builders.

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
`cut_estimate` (None: off) extends that estimate to a sample of none: an output row with global
in-degree d > 0 and no in-edge in the block (a halo node, whose in-edges live on other workers) is
given d copies of itself as in-neighbours, each of GCN weight cut_estimate / sqrt(d + 1)
(cut_estimate: the mean of (d_u + 1)^(-1/2) over in-edge sources u; models/ops.py `cut_rows`).

Builders (`seed_blocks`): full-graph training needs the seeds' outputs only: layer L computes
the seeds, layer L-1 the seeds and their in-neighbours, and so on down to the input rows, the
seeds' L-hop in-neighbourhood. Computing just those rows gives the seeds' outputs and the
gradient exactly (tests check it) at a fraction of the cost when the seeds are a minority of the
local nodes.
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
    cut_estimate: Optional[float] = None  # rows cut from their in-edges are estimated (above)
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


def in_edges(indptr: Tensor, indices: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """(counts per row, concatenated in-neighbours of `rows`) from a CSR by destination."""
    start = indptr.index_select(0, rows)
    count = indptr.index_select(0, rows + 1) - start
    total = int(count.sum())
    # slot = start[row] + position within the row's run
    shift = start - (torch.cumsum(count, 0) - count)
    slots = torch.arange(total) + torch.repeat_interleave(shift, count, output_size=total)
    return count, indices.index_select(0, slots).long()


def seed_blocks(indptr: Tensor, indices: Tensor, deg: Tensor, seeds: Tensor, layers: int
                ) -> tuple[Tensor, list[Block]]:
    """(input rows, blocks input layer first) computing `seeds`' outputs through `layers` layers.
    Each block's output rows are the first rows of its input rows, as Block requires."""
    num_nodes = indptr.numel() - 1
    pos = torch.full((num_nodes,), -1, dtype=torch.int64)  # position in the current input rows
    rows = seeds.long()
    blocks: list[Block] = []
    for _ in range(layers):
        count, src = in_edges(indptr, indices, rows)
        pos[rows] = torch.arange(rows.numel())
        fresh = torch.unique(src[pos.index_select(0, src) < 0])
        pos[fresh] = torch.arange(rows.numel(), rows.numel() + fresh.numel())
        inputs = torch.cat([rows, fresh])
        block_indptr = torch.zeros(rows.numel() + 1, dtype=torch.int64)
        torch.cumsum(count, 0, out=block_indptr[1:])
        blocks.append(Block(block_indptr, pos.index_select(0, src).to(torch.int32), inputs.numel(),
                            deg.index_select(0, inputs)))
        pos.index_fill_(0, inputs, -1)
        rows = inputs
    return rows, blocks[::-1]


def owned_block(indptr: Tensor, indices: Tensor, deg: Tensor, num_dst: int) -> Block:
    """Every in-edge of the first `num_dst` local rows, over all local rows (exact evaluation:
    the output rows are a worker's base nodes, the inputs base plus halo)."""
    e = int(indptr[num_dst])
    return Block(indptr[:num_dst + 1].clone(), indices[:e], deg.numel(), deg)


def full_blocks(edge_index: Tensor, num_nodes: int, num_layers: int) -> list[Block]:
    """The whole graph as every layer's block (every node computed at every layer)."""
    deg = torch.bincount(edge_index[1], minlength=num_nodes)
    return [full_block(edge_index, num_nodes, deg)] * num_layers
