"""GIN layer: h_v' = MLP((1 + eps) h_v + sum_{u in N(v)} h_u), MLP = Linear-BatchNorm-ReLU-Linear."""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import GINConv

from .graph import MessageGraph


class GINLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, hidden: int):
        super().__init__()
        mlp = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
        self.conv = GINConv(mlp, train_eps=True)

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.edge_index)
