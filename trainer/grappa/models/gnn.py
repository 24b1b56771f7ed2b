"""A stack of L message-passing layers with ReLU and dropout between them, one block per layer.

`forward` runs all layers; `layer` runs one, which the exact layer-wise evaluation uses to swap in
remote rows between layers.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from grappa.config import ModelConfig
from grappa.data.blocks import Block
from grappa.models.dropout import dropout
from grappa.models.gat import GATLayer
from grappa.models.gcn import GCNLayer
from grappa.models.gin import GINLayer
from grappa.models.sage import SAGELayer
from grappa.models.sparse_input import compact_input


def make_layer(cfg: ModelConfig, in_dim: int, out_dim: int, last: bool) -> tuple[nn.Module, int]:
    """One message-passing layer of `cfg.arch` and its real output width (GAT rounds to heads)."""
    if cfg.arch == "gcn":
        layer = GCNLayer(in_dim, out_dim)
    elif cfg.arch == "sage":
        layer = SAGELayer(in_dim, out_dim)
    elif cfg.arch == "gat":
        layer = GATLayer(in_dim, out_dim, cfg.heads, last)
    else:
        layer = GINLayer(in_dim, out_dim, cfg.hidden)
    return layer, layer.out_dim


class GNN(nn.Module):
    layerwise = True  # exact inference runs one layer at a time (models/layerwise.py)

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.arch = cfg.arch
        self.dropout = cfg.dropout
        self.num_layers = cfg.layers
        self.layers = nn.ModuleList()
        dim = in_dim
        for i in range(cfg.layers):
            last = i == cfg.layers - 1
            layer, dim = make_layer(cfg, dim, num_classes if last else cfg.hidden, last)
            self.layers.append(layer)

    @property
    def rows_independent(self) -> bool:
        """A row's output depends on its neighbourhood only, not on which other rows a layer
        computes: false for GIN, whose BatchNorm normalises over them."""
        return self.arch != "gin"

    @property
    def messages_per_edge(self) -> bool:
        """Whether a forward holds a row per edge in the input width: no, every built-in layer
        projects (or, GIN, sums through a sparse product) before any per-edge work."""
        return False

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
        return [layer.out_dim for layer in self.layers]

    @property
    def passes(self) -> int:
        """Stages of exact inference: one per layer."""
        return self.num_layers

    def layer(self, i: int, h: Tensor, block: Block) -> Tensor:
        if i > 0:
            # Dropout on hidden activations only: on dense bag-of-words inputs it costs most of a
            # CPU epoch (stack notes) for little regularisation gain.
            h = dropout(h, self.dropout, self.training)
        h = self.layers[i](h, block)
        if i < len(self.layers) - 1:
            h = F.relu(h)
        return h

    def forward(self, x: Tensor, blocks: list[Block]) -> Tensor:
        """x: [blocks[0].num_src, F] -> [blocks[-1].num_dst, classes]."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"{len(self.layers)} layers need as many blocks, got {len(blocks)}")
        h = x
        for i, block in enumerate(blocks):
            if h.shape[0] != block.num_src:
                raise ValueError(f"layer {i}: {h.shape[0]} input rows, block expects {block.num_src}")
            h = self.layer(i, h, block)
        return h
