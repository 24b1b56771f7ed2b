"""Node classification: each labelled node's class from its L-hop neighbourhood.

Per seed v with logits z_v and label y_v the loss is the cross-entropy
l_v = -log softmax(z_v)[y_v]; a step's contribution weighs these per strategy (the reducer), and
an evaluation reports, per split, the mean loss and the accuracy mean_v [argmax z_v = y_v].
Evaluation sums travel as one message: (loss sum, correct, count) per split, train/val/test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from grappa.data.blocks import Block, full_blocks
from grappa.models.params import flat_grads

if TYPE_CHECKING:  # PyG costs every rank seconds at start-up (torch._dynamo with it); only named here
    from torch_geometric.data import Data

SPLITS = ("train", "val", "test")


def seed_losses(logits: Tensor, y: Tensor) -> Tensor:
    """l_v per seed (reduction none), in the seeds' order."""
    return F.cross_entropy(logits, y, reduction="none")


def num_correct(logits: Tensor, y: Tensor) -> int:
    return int((logits.argmax(dim=1) == y).sum())


def split_stats(logits: Tensor, y: Tensor, masks: tuple[Tensor, ...]) -> Tensor:
    """Evaluation stats message (runtime/protocol.py): loss sum, correct, count per split, over
    the rows of `logits` (the first len(logits) nodes of the masks)."""
    n, stats = logits.shape[0], []
    for mask in masks:
        m = mask[:n]
        if m.any():
            stats += [float(F.cross_entropy(logits[m], y[:n][m], reduction="sum")),
                      float((logits[m].argmax(1) == y[:n][m]).sum()), float(m.sum())]
        else:
            stats += [0.0, 0.0, 0.0]
    return torch.tensor(stats, dtype=torch.float64)


def full_graph_gradient(model, data: Data, blocks: Optional[list[Block]] = None) -> Tensor:
    """Exact gradient of the mean training loss over all training nodes (single process): the
    reference for exactness and gradient-fidelity checks. `blocks`: the whole graph per layer
    (data.blocks.full_blocks), made here when not given."""
    blocks = blocks or full_blocks(data.edge_index, data.num_nodes, model.num_layers)
    model.zero_grad(set_to_none=True)
    out = model(data.x, blocks)
    F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    return flat_grads(model)


@torch.no_grad()
def evaluate_full(model, data: Data, blocks: list[Block], x: Optional[Tensor] = None) -> dict:
    """Loss and accuracy per split over the whole graph in one process. `x`: `data.x` already
    passed through `model.prepare_input`, to pay the conversion once."""
    model.eval()
    out = model(data.x if x is None else x, blocks)
    res = {}
    for split in SPLITS:
        m = getattr(data, f"{split}_mask")
        res[f"{split}_loss"] = float(F.cross_entropy(out[m], data.y[m]))
        res[f"{split}_acc"] = float((out[m].argmax(1) == data.y[m]).float().mean())
    return res
