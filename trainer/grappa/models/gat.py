"""GAT layer: h_v' = || over heads of sum_{u in N(v) + v} softmax_u(a^T [W h_v || W h_u]) W h_u.

Hidden layers concatenate `heads` heads of width out/heads; the output layer averages heads.
"""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import GATConv

from .graph import MessageGraph


class GATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, last: bool):
        super().__init__()
        if last:
            self.conv = GATConv(in_dim, out_dim, heads=heads, concat=False)
        else:
            per_head = max(1, out_dim // heads)
            self.conv = GATConv(in_dim, per_head, heads=heads, concat=True)
        self.out_dim = out_dim if last else per_head * heads

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.edge_index)
