"""GraphSAGE layer (mean): h_v' = W_1 h_v + W_2 mean_{u in N(v)} h_u."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from .graph import MessageGraph
from .sparse_input import is_sparse


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = SAGEConv(in_dim, out_dim, aggr="mean")

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        if not is_sparse(h):
            return self.conv(h, g.edge_index)
        # CSR rows cannot be gathered per edge; project first, since W_2 commutes with the mean.
        conv = self.conv
        p = F.linear(h, conv.lin_l.weight)
        return conv.propagate(g.edge_index, x=(p, p)) + conv.lin_l.bias + conv.lin_r(h)
