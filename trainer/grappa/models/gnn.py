"""A stack of L message-passing layers with ReLU and dropout between them.

`forward` runs all layers; `layer` runs one, which the exact layer-wise evaluation uses to swap in
remote rows between layers.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .gat import GATLayer
from .gcn import GCNLayer
from .gin import GINLayer
from .graph import MessageGraph
from .sage import SAGELayer
from .sparse_input import compact_input


def make_layer(cfg: ModelConfig, in_dim: int, out_dim: int, last: bool) -> tuple[nn.Module, int]:
    """One message-passing layer of `cfg.arch` and its real output width (GAT rounds to heads)."""
    if cfg.arch == "gcn":
        return GCNLayer(in_dim, out_dim), out_dim
    if cfg.arch == "sage":
        return SAGELayer(in_dim, out_dim), out_dim
    if cfg.arch == "gat":
        layer = GATLayer(in_dim, out_dim, cfg.heads, last)
        return layer, layer.out_dim
    return GINLayer(in_dim, out_dim, cfg.hidden), out_dim


class GNN(nn.Module):
    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.arch = cfg.arch
        self.dropout = cfg.dropout
        self.layers = nn.ModuleList()
        dim = in_dim
        for i in range(cfg.layers):
            last = i == cfg.layers - 1
            layer, dim = make_layer(cfg, dim, num_classes if last else cfg.hidden, last)
            self.layers.append(layer)

    @property
    def needs_gcn_weights(self) -> bool:
        return self.arch == "gcn"

    def prepare_input(self, x: Tensor) -> Tensor:
        """The feature matrix in the layout the first layer computes fastest on (CSR if sparse);
        call once per graph, not per step. GIN sums raw rows before its MLP, so it stays dense."""
        return x if self.arch == "gin" else compact_input(x)

    @property
    def widths(self) -> list[int]:
        """Output width of each layer (what an exchange between layers carries per node)."""
        return [self._out_width(layer) for layer in self.layers]

    @staticmethod
    def _out_width(layer: nn.Module) -> int:
        if isinstance(layer, GATLayer):
            return layer.out_dim
        conv = layer.conv
        if isinstance(layer, GINLayer):
            return conv.nn[-1].out_features
        return conv.out_channels

    def layer(self, i: int, h: Tensor, g: MessageGraph) -> Tensor:
        if i > 0:
            # Dropout on hidden activations only: on dense bag-of-words inputs it costs most of a
            # CPU epoch (stack notes) for little regularisation gain.
            h = F.dropout(h, self.dropout, self.training)
        h = self.layers[i](h, g)
        if i < len(self.layers) - 1:
            h = F.relu(h)
        return h

    def forward(self, x: Tensor, g: MessageGraph) -> Tensor:
        h = x
        for i in range(len(self.layers)):
            h = self.layer(i, h, g)
        return h
