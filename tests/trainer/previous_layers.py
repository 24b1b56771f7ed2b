"""Test-only reference: the layers as they were before the lean rewrite (939df5c), PyG convs on a
MessageGraph, kept to check that the lean layers compute the same function and gradients.

Copied from models/{gcn,sage,gin,gat,gnn}.py and models/graph.py (since removed) at 939df5c; the one change is
that GCN weights are built in a chosen dtype (they were float32), for float64 comparisons.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from grappa.config import ModelConfig
from grappa.data.blocks import Block
from grappa.models.sparse_input import is_sparse


@dataclass
class MessageGraph:
    """Edges (src -> dst) with global in-degrees and, for GCN, the normalised adjacency (CSR)."""

    edge_index: Tensor
    num_nodes: int
    deg: Tensor
    gcn_adj: Optional[Tensor] = None


def build_message_graph(edge_index: Tensor, num_nodes: int, deg: Tensor,
                        sampled_in: Optional[Tensor] = None,
                        dtype: torch.dtype = torch.float32) -> MessageGraph:
    g = MessageGraph(edge_index=edge_index, num_nodes=num_nodes, deg=deg)
    src, dst = edge_index
    dhat = deg.to(dtype) + 1.0
    w = (dhat[src] * dhat[dst]).rsqrt()
    if sampled_in is not None:
        kept = sampled_in.to(dtype).clamp(min=1.0)
        w = w * (deg.to(dtype)[dst] / kept[dst])
    loops = torch.arange(num_nodes, device=edge_index.device)
    rows = torch.cat([dst, loops])
    cols = torch.cat([src, loops])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        g.gcn_adj = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.cat([w, 1.0 / dhat]),
                                            (num_nodes, num_nodes)).coalesce().to_sparse_csr()
    return g


def message_graph(block: Block, dtype: torch.dtype = torch.float32) -> MessageGraph:
    """The block as a square graph on its num_src input rows (rows past num_dst get no in-edges;
    the caller keeps the first num_dst output rows)."""
    sampled = None
    if block.kept is not None:
        sampled = torch.ones(block.num_src, dtype=torch.int64)
        sampled[:block.num_dst] = block.kept
    return build_message_graph(block.to_edge_index(), block.num_src, block.deg, sampled, dtype)


class GCNLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = GCNConv(in_dim, out_dim, add_self_loops=False, normalize=False)

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.gcn_adj)


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = SAGEConv(in_dim, out_dim, aggr="mean")

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        if not is_sparse(h):
            return self.conv(h, g.edge_index)
        conv = self.conv
        p = F.linear(h, conv.lin_l.weight)
        return conv.propagate(g.edge_index, x=(p, p)) + conv.lin_l.bias + conv.lin_r(h)


class GINLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, hidden: int):
        super().__init__()
        mlp = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
        self.conv = GINConv(mlp, train_eps=True)

    def forward(self, h: Tensor, g: MessageGraph) -> Tensor:
        return self.conv(h, g.edge_index)


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


def make_layer(cfg: ModelConfig, in_dim: int, out_dim: int, last: bool) -> tuple[nn.Module, int]:
    if cfg.arch == "gcn":
        return GCNLayer(in_dim, out_dim), out_dim
    if cfg.arch == "sage":
        return SAGELayer(in_dim, out_dim), out_dim
    if cfg.arch == "gat":
        layer = GATLayer(in_dim, out_dim, cfg.heads, last)
        return layer, layer.out_dim
    return GINLayer(in_dim, out_dim, cfg.hidden), out_dim


class PrevGNN(nn.Module):
    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.dropout = cfg.dropout
        self.layers = nn.ModuleList()
        dim = in_dim
        for i in range(cfg.layers):
            last = i == cfg.layers - 1
            layer, dim = make_layer(cfg, dim, num_classes if last else cfg.hidden, last)
            self.layers.append(layer)

    def forward(self, x: Tensor, g: MessageGraph) -> Tensor:
        h = x
        for i, layer in enumerate(self.layers):
            if i > 0:
                h = F.dropout(h, self.dropout, self.training)
            h = layer(h, g)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h


def layer_on_block(layer: nn.Module, h: Tensor, block: Block, dtype: torch.dtype) -> Tensor:
    """A previous layer's output rows for `block`."""
    nd = block.num_dst
    if isinstance(layer, GINLayer):
        # Bipartite call, so BatchNorm sees only the num_dst output rows, as the lean layer does.
        return layer.conv((h, h[:nd]), block.to_edge_index(), size=(block.num_src, nd))
    return layer(h, message_graph(block, dtype))[:nd]


def param_pairs(lean: nn.Module, prev: nn.Module) -> list[tuple[Tensor, Tensor]]:
    """(lean parameter, previous parameter) pairs of one layer: the same value up to shape."""
    c = prev.conv
    if isinstance(prev, GCNLayer):
        return [(lean.weight, c.lin.weight), (lean.bias, c.bias)]
    if isinstance(prev, SAGELayer):
        return [(lean.lin_l.weight, c.lin_l.weight), (lean.lin_l.bias, c.lin_l.bias),
                (lean.lin_r.weight, c.lin_r.weight)]
    if isinstance(prev, GINLayer):
        return [(lean.eps, c.eps), *zip(lean.mlp.parameters(), c.nn.parameters(), strict=True)]
    return [(lean.weight, c.lin.weight), (lean.bias, c.bias), (lean.att_src, c.att_src),
            (lean.att_dst, c.att_dst)]


@torch.no_grad()
def copy_layer(lean: nn.Module, prev: nn.Module) -> None:
    """Give `prev` the parameters (and GIN's BatchNorm buffers) of lean layer `lean`."""
    for a, b in param_pairs(lean, prev):
        b.copy_(a.view_as(b))
    if isinstance(prev, GINLayer):
        prev.conv.nn.load_state_dict(lean.mlp.state_dict())
