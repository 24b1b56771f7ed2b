"""RETEXO (`strategy: retexo`): lazy message passing, one boundary exchange per layer per run.

Training goes stage by stage (Kolluri et al.). Stage l: each worker fetches the halo rows of the
current embeddings h_l once (stage 0: the input features), then trains one GNN layer plus a small
head (LayerNorm, ReLU, Linear to classes; the last stage's layer outputs the classes itself) on
its fixed partition with those inputs frozen, for the stage's epochs of full-batch steps whose
gradients the aggregator averages by training-node counts. The best-validation parameters of the
stage are kept and every worker computes h_{l+1} = ReLU(layer(h_l)) for its own nodes.

The epochs of `training.epochs` are split over the L stages. Checkpoints carry the stage, so a
restarted job continues the same stage; workers keep each stage's input rows under
`<runDir>/retexo/` for that. Bytes: 4 H sum_l d_l for the exchanges plus, per step, the usual
gradient message up and parameters down (of the stage's model only).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grappa.runtime import protocol as proto
from grappa.runtime.aggregator import Aggregator
from grappa.models.dropout import dropout
from grappa.runtime.replica import make_optimizer
from grappa.blocks import owned_block
from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
from grappa.config import ModelConfig, TrainConfig
from grappa.fullcomm import build_plan, fetch_rows
from grappa.local_graph import LocalGraph
from grappa.models.gnn import make_layer
from grappa.models.sparse_input import compact_input
from grappa.params import num_buffer_values, num_params
from grappa.rounds import RoundDecision
from grappa.step import Contribution, contribution_from
from grappa.runtime.worker import Worker, split_stats
from grappa.strategies.base import Strategy
from grappa.strategies.full import halo_owner

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


# ---- worker ----------------------------------------------------------------------------------
class RetexoStrategy(Strategy):
    """A worker's fixed partition and the stage it trains: one full-batch step per epoch on
    frozen inputs (the stage's fetched rows)."""

    name = "retexo"
    needs_peers = True

    def prepare_round(self, g: LocalGraph) -> float:
        self.plan = build_plan(g, halo_owner(g, self.cfg.partitions), self.index,
                               self.cfg.partitions, self.peers)
        self.block = owned_block(g.indptr, g.indices, g.deg, g.num_owned)
        return float(g.seeds.numel())

    def contribute(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        return contribution_from(self.model, lambda: self.model(self.inputs, self.block), batch,
                                 torch.ones(batch.numel()), self.graph.y[batch], "none", 0.0, 1.0)


class RetexoWorker(Worker):
    def __init__(self, cfg: TrainConfig, link, store=None):
        super().__init__(cfg, link, store)
        self.shard.setup_round(RoundDecision(0, 0, 0))  # fixed partitions: one "round" for the run
        self.graph = self.shard.graph
        self.stage_dir = Path(cfg.run_dir) / "retexo"
        self.own_h: Optional[Tensor] = None

    def _rows_file(self, stage: int) -> Path:
        return self.stage_dir / f"stage-{stage}-worker-{self.link.rank - 1}.pt"

    def setup_stage(self, stage: int) -> None:
        man, g, shard = self.store.manifest, self.graph, self.shard
        if stage == 0:
            own = g.features.gather(torch.arange(g.num_owned))
        elif self.own_h is not None:
            own = self.own_h
        else:  # resumed mid-run: the rows this worker computed at the end of the previous stage
            path = self._rows_file(stage)
            if not path.exists():
                raise RuntimeError(f"cannot resume stage {stage}: {path} is missing (the run directory "
                                   "must be the one the job started with)")
            own = torch.load(path)
        shard.inputs = compact_input(fetch_rows(own, shard.plan, shard.peers))  # the stage's one exchange
        self.model = shard.model = build_stage_model(self.cfg, stage, man["num_features"], man["num_classes"])
        self.n_params, self.n_buf = num_params(self.model), num_buffer_values(self.model)
        self.receive_replica()

    @torch.no_grad()
    def evaluate(self) -> None:
        self.model.eval()
        g = self.graph
        logits = self.model(self.shard.inputs, self.shard.block)
        self.link.send(split_stats(logits, g.y, (g.train_mask, g.val_mask, g.test_mask)), 0, "eval")

    @torch.no_grad()
    def finish_stage(self, stage: int) -> None:
        """Load the stage's best parameters; compute the next stage's inputs (or predictions)."""
        self.receive_params()
        self.model.eval()
        g, shard = self.graph, self.shard
        if stage == self.cfg.model.layers - 1:
            pred = self.model(shard.inputs, shard.block).argmax(1)
            self.stage_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"global_ids": g.global_ids[:g.num_owned], "pred": pred},
                       self.stage_dir / f"predictions-worker-{self.link.rank - 1}.pt")
            return
        self.own_h = F.relu(self.model.embed(shard.inputs, shard.block)).contiguous()
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._rows_file(stage + 1).with_suffix(".tmp")
        torch.save(self.own_h, tmp)
        tmp.replace(self._rows_file(stage + 1))

    def run(self) -> None:
        while True:
            cmd, epoch, stage, _, steps, do_eval, wbar = self.recv_control()
            if cmd == proto.CMD_STOP:
                return
            if cmd == proto.CMD_STAGE:
                self.setup_stage(int(stage))
            elif cmd == proto.CMD_STAGE_END:
                self.finish_stage(int(stage))
            elif cmd == proto.CMD_EPOCH:
                self.epoch_command(int(epoch), int(steps), float(wbar), bool(do_eval))


# ---- aggregator ------------------------------------------------------------------------------
class RetexoAggregator(Aggregator):
    def _stage_model(self, stage: int) -> None:
        man = self.manifest
        self.model = build_stage_model(self.cfg, stage, man["num_features"], man["num_classes"])
        self.optimizer = make_optimizer(self.cfg, self.model)
        self.n_params, self.n_buf = num_params(self.model), num_buffer_values(self.model)
        self.best = {"val": -1.0, "test": None, "epoch": None, "state": None}

    def evaluate(self) -> dict:
        return self.receive_eval_stats()

    def checkpoint_state(self, epoch: int, decision: RoundDecision) -> dict:
        return {**super().checkpoint_state(epoch, decision), "stage": self.stage,
                "stage_done": self.stage_done, "stage_results": self.stage_results}

    def resume_stage(self) -> tuple[int, int, bool]:
        """(global epoch, stage, whether that stage's training is complete) from the checkpoint."""
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return 0, 0, False
        ck = load_checkpoint(path)
        self._stage_model(ck["stage"])
        self.model.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.best, self.history, self.stage_results = ck["best"], ck["history"], ck["stage_results"]
        log.info("resuming from %s (epoch %d, stage %d)", path, ck["epoch"], ck["stage"])
        self._jsonl({"event": "resume", "epoch": ck["epoch"], "stage": ck["stage"], "checkpoint": str(path)})
        self.last_epoch.on_disk(ck["epoch"], self.steps_done(), path)
        return ck["epoch"], ck["stage"], ck["stage_done"]

    def run(self) -> dict:
        cfg = self.cfg
        lengths = stage_epochs(cfg.training.epochs, cfg.model.layers)
        bounds = [sum(lengths[:s]) for s in range(len(lengths) + 1)]
        self.stage_results: list[dict] = []
        epoch, stage, done = self.resume_stage()
        if done:  # the checkpoint was taken after the stage's end: start the next one
            stage += 1
        decision = RoundDecision(0, 0, 0)
        rinfo = {"round": 0, "pairing_seed": 0, "steps": 1, "wbar": 1.0}
        started = time.perf_counter()
        while stage < cfg.model.layers:
            self.stage, self.stage_done = stage, False
            if epoch <= bounds[stage]:  # a fresh stage, not one resumed mid-way
                self._stage_model(stage)
            self.command(proto.control(proto.CMD_STAGE, epoch, stage))
            self.send_replica()
            log.info("stage %d: epochs %d..%d", stage, epoch + 1, bounds[stage + 1])
            for epoch in range(epoch, bounds[stage + 1]):
                self.safe_point()
                t0 = time.perf_counter()
                before = self.link.bytes.snapshot()
                do_eval = True  # the stage's best epoch needs every validation score
                rec = {"epoch": epoch + 1, "round": 0, "round_start": 0, "stage": stage, "steps": 1}
                rec.update(self.train_epoch(epoch, rinfo, do_eval))
                train_bytes = self._delta(before, "train")
                eval_before = self.link.bytes.snapshot()
                rec.update(self.evaluate())
                self._track_best(rec, epoch + 1)
                rec.update({"epoch_seconds": time.perf_counter() - t0, "wbar": 1.0,
                            "train_bytes": train_bytes, "eval_bytes": self._delta(eval_before, "eval"),
                            "control_bytes": self._delta(before, "control"),
                            "best_val": self.best["val"], "best_test": self.best["test"]})
                last_of_stage = epoch + 1 == bounds[stage + 1]
                periodic = bool(cfg.checkpoint.interval) and (epoch + 1) % cfg.checkpoint.interval == 0
                # The stage's last epoch is kept for a stop (resuming it redoes end_stage) but
                # written on schedule only after end_stage.
                self.end_epoch_as(rec, epoch + 1, decision, periodic and not last_of_stage)
                self._publish(rec, started, max(1, epoch + 1))
            epoch = bounds[stage + 1]
            self.end_stage(stage)
            if cfg.checkpoint.interval:
                # Kept for a stop only when written on schedule, as before: the workers may still
                # be writing the next stage's input rows, which resuming a finished stage needs.
                self.last_epoch.record(epoch, self.steps_done(), self.checkpoint_state(epoch, decision), True)
            stage += 1
        self.command(proto.control(proto.CMD_STOP))
        final = self.stage_results[-1]
        self.best = {**self.best, "val": final["best_val"], "test": final["test_acc"],
                     "epoch": final["best_epoch"]}
        return self.finish()

    def end_stage(self, stage: int) -> None:
        if self.best["state"] is not None:
            self.model.load_state_dict(self.best["state"])
        self.stage_results.append({"stage": stage, "best_val": self.best["val"],
                                   "test_acc": self.best["test"], "best_epoch": self.best["epoch"]})
        self._jsonl({"event": "stage", **self.stage_results[-1]})
        self.command(proto.control(proto.CMD_STAGE_END, 0, stage))
        self.send_params()
        self.stage_done = True
        torch.save(self.model.state_dict(), self.run_dir / f"stage-{stage}.pt")



# The process loops of this strategy (entry.py): stage by stage instead of rounds.
WORKER, AGGREGATOR = RetexoWorker, RetexoAggregator
