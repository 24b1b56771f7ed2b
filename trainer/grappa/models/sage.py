"""GraphSAGE layer (mean aggregation):

    h'_v = W_l mean_{u in N(v)} h_u + b + W_r h_v        (mean = 0 when v has no in-edges)

N(v) is v's in-edges in the block; a row cut from them (ops.cut_rows, when the block estimates
cut rows) takes its own h_v as the mean, its in-neighbours counted as copies of itself. `lin_l`
(with the bias) and `lin_r` (without) follow PyG's SAGEConv naming and torch.nn.Linear's
initialisation. The mean commutes with W_l, so the layer takes the cheaper order: projecting first
costs src x in x out + E x out multiply-adds, aggregating first E x in + dst x in x out. Wide
inputs (in > out, and any CSR bag-of-words, whose projection is a sparse product) project first;
otherwise it aggregates first, which on a sampled 3-layer step (64 -> 128 -> 128, dst rows far
fewer than src rows) halves the forward.
"""
from __future__ import annotations

from torch import Tensor, nn

from grappa.data.blocks import Block
from grappa.models.ops import block_matmul, cut_rows, mean_operator, rows, with_cut_rows
from grappa.models.sparse_input import is_sparse


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_l = nn.Linear(in_dim, out_dim)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, h: Tensor, block: Block) -> Tensor:
        cut = cut_rows(block)
        if is_sparse(h) or self.in_dim > self.out_dim:
            p = nn.functional.linear(h, self.lin_l.weight)
            neigh = with_cut_rows(block_matmul(mean_operator(block, p.dtype), p), p, cut) + self.lin_l.bias
        else:
            neigh = self.lin_l(with_cut_rows(block_matmul(mean_operator(block, h.dtype), h), h, cut))
        return neigh + self.lin_r(rows(h, block.num_dst))
