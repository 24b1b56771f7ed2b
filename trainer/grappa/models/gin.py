"""GIN layer (sum aggregation, trainable eps):

    h'_v = MLP((1 + eps) h_v + sum_{u in N(v)} h_u),   MLP = Linear-BatchNorm1d-ReLU-Linear

eps starts at 0. The sum is one CSR product on the input width (GIN aggregates before its MLP, so
it cannot project first); BatchNorm normalises over the rows this block computes.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from grappa.data.blocks import Block
from grappa.models.ops import block_matmul, sum_operator
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
        agg = block_matmul(sum_operator(block, h.dtype), h) + (1 + self.eps) * h[:block.num_dst]
        return self.mlp(agg)
