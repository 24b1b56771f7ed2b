"""GCN layer: h_v' = W sum_{u in N(v) + v} h_u / sqrt((d_u + 1)(d_v + 1)) + b, global degrees."""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from .graph import MessageGraph


class GCNLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        # Normalisation is ours (global degrees), so PyG must neither add loops nor renormalise.
        self.conv = GCNConv(in_dim, out_dim, add_self_loops=False, normalize=False)

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.gcn_adj)
