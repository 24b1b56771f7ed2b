"""The job's model: the built-in GNN of `model.arch`, or the user's model of `model.custom`
behind the same interface (custom.py). Seeded by the caller, so every rank builds the same one."""
from __future__ import annotations

from typing import Optional

from grappa.config import ModelConfig
from grappa.models.gnn import GNN


def build_model(cfg: ModelConfig, num_features: int, num_classes: int, mode: str = "full-graph",
                code_path: Optional[str] = None):
    """GNN or CustomModel; both run `forward(x, blocks)`, `layer(i, h, block)` when layer-wise,
    and say `num_layers`, `passes` and `widths`."""
    if cfg.user_model is None:
        return GNN(cfg, num_features, num_classes)
    from grappa.models.custom import build_custom
    return build_custom(cfg, num_features, num_classes, mode, code_path)
