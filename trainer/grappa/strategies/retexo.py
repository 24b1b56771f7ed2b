"""RETEXO (`strategy: retexo`): lazy message passing, one boundary exchange per layer per run.

Training goes stage by stage (Kolluri et al.). Stage l: each worker fetches the halo rows of the
current embeddings h_l once (stage 0: the input features), then trains one GNN layer plus a small
head (LayerNorm, ReLU, Linear to classes; the last stage's layer outputs the classes itself) on
its fixed partition with those inputs frozen, for the stage's epochs of full-batch steps whose
gradients the aggregator averages by training-node counts. The best-validation parameters of the
stage are kept and every worker computes h_{l+1} = ReLU(layer(h_l)) for its own nodes.

The epochs of `training.epochs` are split over the L stages; the process loops that drive them
are the runtime's (runtime/stages.py). Checkpoints carry the stage, so a
restarted job continues the same stage; workers keep each stage's input rows under
`<runDir>/retexo/` for that. Bytes: 4 H sum_l d_l for the exchanges plus, per step, the usual
gradient message up and parameters down (of the stage's model only).
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from grappa.config import ModelConfig, TrainConfig
from grappa.data.blocks import owned_block
from grappa.data.local_graph import LocalGraph
from grappa.models.dropout import dropout
from grappa.models.gnn import make_layer
from grappa.strategies.base import Strategy
from grappa.strategies.contribution import Contribution, contribution_from
from grappa.strategies.full.halo_exchange import build_plan
from grappa.strategies.full.strategy import halo_owner

log = logging.getLogger("grappa.retexo")


def stage_epochs(epochs: int, layers: int) -> list[int]:
    """`epochs` split over the stages as evenly as possible, earlier stages first."""
    return [epochs // layers + (1 if s < epochs % layers else 0) for s in range(layers)]


class StageModel(nn.Module):
    """Layer l of the GNN, plus a classification head unless l is the last layer."""

    def __init__(self, cfg: ModelConfig, stage: int, in_dim: int, num_classes: int):
        super().__init__()
        self.stage, self.dropout = stage, cfg.dropout
        last = stage == cfg.layers - 1
        self.layer, width = make_layer(cfg, in_dim, num_classes if last else cfg.hidden, last)
        self.width = width
        self.head = None if last else nn.Sequential(nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, num_classes))

    def embed(self, h: Tensor, g) -> Tensor:
        # Fresh dropout on the frozen inputs every step (no cached aggregate, no frozen mask).
        if self.stage > 0:
            h = dropout(h, self.dropout, self.training)
        return self.layer(h, g)

    def forward(self, h: Tensor, g) -> Tensor:
        z = self.embed(h, g)
        return z if self.head is None else self.head(z)


def build_stage_model(cfg: TrainConfig, stage: int, num_features: int, num_classes: int) -> StageModel:
    torch.manual_seed(cfg.training.seed * 1_009 + stage)  # same initial parameters on every rank
    in_dim = num_features if stage == 0 else cfg.model.hidden
    if stage > 0 and cfg.model.arch == "gat":
        in_dim = max(1, cfg.model.hidden // cfg.model.heads) * cfg.model.heads
    return StageModel(cfg.model, stage, in_dim, num_classes)


class RetexoStrategy(Strategy):
    """A worker's fixed partition and the stage it trains: one full-batch step per epoch on
    frozen inputs (the stage's fetched rows)."""

    name = "retexo"
    needs_peers = True
    trains_in_stages = True  # runtime/stages.py runs it: stage by stage instead of rounds

    def prepare_round(self, g: LocalGraph) -> float:
        self.plan = build_plan(g, halo_owner(g, self.cfg.partitions), self.index,
                               self.cfg.partitions, self.peers)
        self.block = owned_block(g.indptr, g.indices, g.deg, g.num_owned)
        return float(g.seeds.numel())

    def contribute(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        return contribution_from(self.model, lambda: self.model(self.inputs, self.block), batch,
                                 torch.ones(batch.numel()), self.graph.y[batch], "none", 0.0, 1.0)
