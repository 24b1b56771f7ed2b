"""GIN layer (sum aggregation, trainable eps):

    h'_v = MLP((1 + eps) h_v + sum_{u in N(v)} h_u),   MLP = Linear-BatchNorm1d-ReLU-Linear

A row cut from its in-edges (ops.cut_rows, when the block estimates cut rows) counts its d_v
in-neighbours as copies of itself: the sum becomes d_v h_v. eps starts at 0. The sum is one CSR
product on the input width (GIN aggregates before its MLP, so it cannot project first); BatchNorm
normalises over the rows this block computes.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from grappa.data.blocks import Block
from grappa.models.ops import block_matmul, cut_rows, sum_operator, with_cut_rows
from grappa.models.sparse_input import is_sparse


class GINLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, hidden: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, h: Tensor, block: Block) -> Tensor:
        if is_sparse(h):  # GNN.prepare_input keeps GIN's input dense; accept CSR all the same
            h = h.to_dense()
        cut = cut_rows(block)
        agg = with_cut_rows(block_matmul(sum_operator(block, h.dtype), h), h, cut,
                            None if cut is None else block.deg.index_select(0, cut))
        agg = agg + (1 + self.eps) * h[:block.num_dst]
        return self.mlp(agg)
