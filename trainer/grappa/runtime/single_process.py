"""Single-process baseline (`grappa single`): plain full-graph training in one process, no
partitions; the reference every strategy is compared with."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from grappa.config import TrainConfig, dump_config
from grappa.data.blocks import full_blocks
from grappa.models.build import build_model
from grappa.models.model_file import describe, save_model
from grappa.runtime.replica import make_optimizer
from grappa.tasks.node_classification import evaluate_full


def train_single(cfg: TrainConfig, data: Data,
                 on_epoch: Optional[Callable[[dict], None]] = None) -> tuple[dict, list[dict]]:
    if cfg.task != "node-classification":
        raise ValueError(f"the single-process baseline trains node classification only so far, "
                         f"not task {cfg.task!r}: use grappa train (--partitions 1 is one worker)")
    torch.manual_seed(cfg.training.seed)
    model = build_model(cfg.model, data.num_features, int(data.num_classes), cfg.training.mode)
    opt = make_optimizer(cfg, model)
    blocks = full_blocks(data.edge_index, data.num_nodes, model.num_layers)
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
        meta = describe(cfg, data.num_features, int(data.num_classes), model.widths,
                        code=getattr(model, "code", None))
        save_model(run_dir / "model.pt", meta, best_state)
    result = {"test_acc": best["test"], "best_val": best["val"], "best_epoch": best["epoch"],
              "mode": "single-process", "config": json.loads(dump_config(cfg))}
    return result, history
