"""The built-in models through the factory interface: `model.custom.factory: grappa.models.builtin:sage`.

Each factory returns a `BuiltinGNN`, the built-in `GNN` (the same parameters, state dict and
memory-lean kernels) whose forward also speaks PyG, so it runs in a user's own PyG code too:

    forward(x, edge_index, num_sampled_nodes_per_hop=None, num_sampled_edges_per_hop=None,
            global_degree=None)

With the hop counts, layer i runs on rows `N - sum(nodes[L-i+1:])` .. and the first
`E - sum(edges[L-i:])` edges (PyG's trimming; edges grouped by the target's hop), else on every
row and edge; `global_degree` feeds GCN's normalisation (default: in-degrees in `edge_index`).
Under Grappa the adapter (custom.py) sees a GNN and hands it our blocks as they are.
"""
from __future__ import annotations

from typing import Optional

from torch import Tensor

from grappa.config import ModelConfig
from grappa.data.blocks import Block
from grappa.models.gnn import GNN


class BuiltinGNN(GNN):
    def forward(self, x: Tensor, edge_index, num_sampled_nodes_per_hop: Optional[list[int]] = None,
                num_sampled_edges_per_hop: Optional[list[int]] = None,
                global_degree: Optional[Tensor] = None) -> Tensor:
        if isinstance(edge_index, list):  # blocks: the runtime's own call
            return super().forward(x, edge_index)
        return super().forward(x, blocks_of(edge_index, x.shape[0], self.num_layers,
                                            num_sampled_nodes_per_hop, num_sampled_edges_per_hop,
                                            global_degree))


def blocks_of(edge_index: Tensor, num_nodes: int, layers: int, nodes: Optional[list[int]],
              edges: Optional[list[int]], deg: Optional[Tensor]) -> list[Block]:
    """Blocks, input layer first, from a PyG edge_index (and its hop counts when trimmed)."""
    ei = edge_index.long()
    if deg is None:
        deg = ei.new_zeros(num_nodes).index_add_(0, ei[1], ei.new_ones(ei.shape[1]))
    if nodes is None or edges is None:
        block = Block.from_edge_index(ei, num_nodes, num_nodes, deg)
        return [block] * layers
    out = []
    for i in range(layers):
        num_src = num_nodes - sum(nodes[len(nodes) - i:])
        num_dst = num_src - nodes[len(nodes) - 1 - i]
        e = ei.shape[1] - sum(edges[len(edges) - i:])
        out.append(Block.from_edge_index(ei[:, :e], num_src, num_dst, deg[:num_src]))
    return out


def _make(arch: str, in_channels: int, out_channels: int, num_layers: int, hidden_channels: int,
          dropout: float, heads: int) -> BuiltinGNN:
    cfg = ModelConfig(arch=arch, layers=num_layers, hidden=hidden_channels, dropout=dropout, heads=heads)
    return BuiltinGNN(cfg, in_channels, out_channels)


def gcn(in_channels: int, out_channels: int, num_layers: int = 2, hidden_channels: int = 128,
        dropout: float = 0.5) -> BuiltinGNN:
    """GCN with global-degree normalisation (models/gcn.py)."""
    return _make("gcn", in_channels, out_channels, num_layers, hidden_channels, dropout, 1)


def sage(in_channels: int, out_channels: int, num_layers: int = 2, hidden_channels: int = 128,
         dropout: float = 0.5) -> BuiltinGNN:
    """GraphSAGE, mean aggregation (models/sage.py)."""
    return _make("sage", in_channels, out_channels, num_layers, hidden_channels, dropout, 1)


def gat(in_channels: int, out_channels: int, num_layers: int = 2, hidden_channels: int = 128,
        dropout: float = 0.5, heads: int = 4) -> BuiltinGNN:
    """GAT, PyG GATConv semantics (models/gat.py)."""
    return _make("gat", in_channels, out_channels, num_layers, hidden_channels, dropout, heads)


def gin(in_channels: int, out_channels: int, num_layers: int = 2, hidden_channels: int = 128,
        dropout: float = 0.5) -> BuiltinGNN:
    """GIN with a trainable eps (models/gin.py)."""
    return _make("gin", in_channels, out_channels, num_layers, hidden_channels, dropout, 1)
