"""A user's GraphSAGE of PyG `SAGEConv` layers that computes only the rows the next layer reads.

PyG's `BasicGNN` trims a sampled subgraph before each layer, yet each layer still computes every
row it is given: layer i outputs hops 0 .. L-i, of which layer i + 1 reads hops 0 .. L-1-i, so
the widest hop (the last) is computed and then dropped. Here layer i gets the bipartite pair
(x, x[:targets]) with targets = hops 0 .. L-1-i and only the edges into them, as the built-in
layers do (bench/models.py measures the difference; a factory any job can name:
`model.custom.factory: trimmed_sage:TrimmedSAGE` with `codePath` this file).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn import SAGEConv


class TrimmedSAGE(torch.nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.num_layers = num_layers
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x: Tensor, edge_index: Tensor, num_sampled_nodes_per_hop: Optional[list[int]] = None,
                num_sampled_edges_per_hop: Optional[list[int]] = None) -> Tensor:
        nodes, edges = num_sampled_nodes_per_hop, num_sampled_edges_per_hop
        last = self.num_layers - 1
        for i, conv in enumerate(self.convs):
            if nodes is None:  # full-graph: every row, every edge
                x = conv(x, edge_index)
            else:  # targets: hops 0 .. L-1-i; edges into them come first (grouped by target hop)
                targets, into = sum(nodes[:last + 1 - i]), sum(edges[:last + 1 - i])
                x = conv((x, x[:targets]), edge_index[:, :into])
            if i < last:
                x = self.dropout(x.relu())
        return x
