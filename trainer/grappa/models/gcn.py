"""GCN layer with global-degree normalisation, self-loops implicit:

    h'_v = sum_{u in N(v)} s_v h_u W / sqrt((d_u + 1)(d_v + 1)) + h_v W / (d_v + 1) + b

d = `block.deg` (global in-degree: a halo row's true degree, not its local 0); s_v = d_v / kept_v
when the block sampled v's in-neighbours (the sum over the sample then estimates the full sum),
else 1. Projects first (X W), then one CSR product with the per-edge weights, which are cached in
`block.cache`; the self term is added densely, so no loop is stored.

A row cut from its in-edges (ops.cut_rows: a halo node, with `block.cut_estimate` m set) counts
its d_v in-neighbours as copies of itself, each u's (d_u + 1)^(-1/2) taken as m, the mean over
in-edge sources: its self weight becomes

    1 / (d_v + 1) + d_v m / sqrt(d_v + 1)

(cut, it is 1 / (d_v + 1): the row is shrunk by the missing neighbour mass, about 1 / (d_v + 1)).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from grappa.data.blocks import Block
from grappa.models.ops import Operator, block_matmul, cached, cut_rows, dst_of_edges, glorot_, operator


def gcn_operator(block: Block, dtype: torch.dtype) -> tuple[Operator, Tensor]:
    """The neighbour weights as an operator and the self weights 1 / (d_v + 1), once per block."""
    def values() -> Tensor:
        deg = block.deg.to(torch.float64)
        dst = dst_of_edges(block)
        dhat = deg + 1.0
        w = (dhat[block.indices.long()] * dhat[dst]).rsqrt()
        if block.kept is not None:
            w = w * (deg[dst] / block.kept.to(torch.float64).clamp(min=1.0)[dst])
        return w
    def self_values() -> Tensor:
        dhat = block.deg[:block.num_dst].to(torch.float64) + 1.0
        w = 1.0 / dhat
        cut = cut_rows(block)
        if cut is not None:
            w[cut] += (dhat[cut] - 1.0) * block.cut_estimate / dhat[cut].sqrt()
        return w.to(dtype)
    op = operator(block, "gcn", dtype, values)
    return op, cached(block, ("gcn_self", dtype, block.cut_estimate), self_values)


class GCNLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.weight = nn.Parameter(glorot_(torch.empty(out_dim, in_dim)))
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, h: Tensor, block: Block) -> Tensor:
        p = nn.functional.linear(h, self.weight)  # h may be CSR (bag-of-words): O(nnz) product
        op, self_w = gcn_operator(block, p.dtype)
        return block_matmul(op, p) + p[:block.num_dst] * self_w[:, None] + self.bias
