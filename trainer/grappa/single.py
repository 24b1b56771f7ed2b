"""Single-process baseline: plain full-graph training on one process, no partitions.

Also the reference for exactness and gradient-fidelity checks (`full_graph_gradient`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from grappa.runtime.replica import make_optimizer
from grappa.config import TrainConfig, dump_config
from grappa.model_file import describe, save_model
from grappa.models import GNN, full_block
from grappa.models.block import Block
from grappa.params import flat_grads


def full_blocks(data: Data, model: GNN) -> list[Block]:
    """The whole graph as every layer's block (every node computed at every layer)."""
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    return [full_block(data.edge_index, data.num_nodes, deg)] * len(model.layers)


def full_graph_gradient(model: GNN, data: Data, blocks: Optional[list[Block]] = None) -> Tensor:
    """Exact gradient of the mean training loss over all training nodes."""
    blocks = blocks or full_blocks(data, model)
    model.zero_grad(set_to_none=True)
    out = model(data.x, blocks)
    F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    return flat_grads(model)


@torch.no_grad()
def evaluate_full(model: GNN, data: Data, blocks: list[Block], x: Optional[Tensor] = None) -> dict:
    """`x`: `data.x` already passed through `model.prepare_input`, to pay the conversion once."""
    model.eval()
    out = model(data.x if x is None else x, blocks)
    res = {}
    for split in ("train", "val", "test"):
        m = getattr(data, f"{split}_mask")
        res[f"{split}_loss"] = float(F.cross_entropy(out[m], data.y[m]))
        res[f"{split}_acc"] = float((out[m].argmax(1) == data.y[m]).float().mean())
    return res


def train_single(cfg: TrainConfig, data: Data,
                 on_epoch: Optional[Callable[[dict], None]] = None) -> tuple[dict, list[dict]]:
    torch.manual_seed(cfg.training.seed)
    model = GNN(cfg.model, data.num_features, int(data.num_classes))
    opt = make_optimizer(cfg, model)
    blocks = full_blocks(data, model)
    x = model.prepare_input(data.x)
    best = {"val": -1.0, "test": None, "epoch": None}
    best_state = None
    history = []
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for epoch in range(cfg.training.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(x, blocks)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        rec = {"epoch": epoch + 1, "round": 0, "loss": float(loss.detach())}
        if (epoch + 1) % cfg.training.eval_every == 0 or epoch == cfg.training.epochs - 1:
            rec.update(evaluate_full(model, data, blocks, x))
            if rec["val_acc"] > best["val"]:
                best = {"val": rec["val_acc"], "test": rec["test_acc"], "epoch": epoch + 1}
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
        rec["epoch_seconds"] = time.perf_counter() - t0
        rec["best_val"], rec["best_test"] = best["val"], best["test"]
        history.append(rec)
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        if on_epoch:
            on_epoch(rec)
    if best_state is not None:
        meta = describe(cfg, data.num_features, int(data.num_classes), model.widths)
        save_model(run_dir / "model.pt", meta, best_state)
    result = {"test_acc": best["test"], "best_val": best["val"], "best_epoch": best["epoch"],
              "mode": "single-process", "config": json.loads(dump_config(cfg))}
    return result, history
