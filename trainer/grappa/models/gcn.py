"""GCN layer with global-degree normalisation, self-loops implicit:

    h'_v = sum_{u in N(v)} s_v h_u W / sqrt((d_u + 1)(d_v + 1)) + h_v W / (d_v + 1) + b

d = `block.deg` (global in-degree: a halo row's true degree, not its local 0); s_v = d_v / kept_v
when the block sampled v's in-neighbours (the sum over the sample then estimates the full sum),
else 1. Projects first (X W), then one CSR product with the per-edge weights, which are cached in
`block.cache`; the self term is added densely, so no loop is stored.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from grappa.data.blocks import Block
from grappa.models.ops import Operator, block_matmul, cached, dst_of_edges, glorot_, operator


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
    op = operator(block, "gcn", dtype, values)
    self_w = cached(block, ("gcn_self", dtype),
                    lambda: (1.0 / (block.deg[:block.num_dst].to(torch.float64) + 1.0)).to(dtype))
    return op, self_w


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
