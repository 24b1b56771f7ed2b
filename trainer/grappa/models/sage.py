"""GraphSAGE layer (mean aggregation):

    h'_v = W_l mean_{u in N(v)} h_u + b + W_r h_v        (mean = 0 when v has no in-edges)

N(v) is v's in-edges in the block. `lin_l` (with the bias) and `lin_r` (without) follow PyG's
SAGEConv naming and torch.nn.Linear's initialisation. Projects before aggregating (the mean
commutes with W_l), so the product runs on `out` columns and a CSR bag-of-words `h` works.
"""
from __future__ import annotations

from torch import Tensor, nn

from .block import Block
from .ops import block_matmul, mean_operator, rows


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_l = nn.Linear(in_dim, out_dim)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, h: Tensor, block: Block) -> Tensor:
        p = nn.functional.linear(h, self.lin_l.weight)
        mean = block_matmul(mean_operator(block, p.dtype), p)
        return mean + self.lin_l.bias + self.lin_r(rows(h, block.num_dst))
