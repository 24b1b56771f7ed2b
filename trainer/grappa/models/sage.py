"""GraphSAGE layer (mean): h_v' = W_1 h_v + W_2 mean_{u in N(v)} h_u."""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from .graph import MessageGraph


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = SAGEConv(in_dim, out_dim, aggr="mean")

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.edge_index)
