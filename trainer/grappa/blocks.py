"""The rows each layer must compute, as blocks (models/block.py) over a local graph's CSR.

Full-graph training needs the seeds' outputs only: layer L computes the seeds, layer L-1 the
seeds and their in-neighbours, and so on down to the input rows, the seeds' L-hop
in-neighbourhood. Computing just those rows gives the seeds' outputs and the gradient exactly
(tests check it) at a fraction of the cost when the seeds are a minority of the local nodes.
"""
from __future__ import annotations

import torch
from torch import Tensor

from grappa.models.block import Block


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
