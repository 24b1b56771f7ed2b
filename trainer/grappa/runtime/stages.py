"""The process loops of a strategy that trains stage by stage (`Strategy.trains_in_stages`:
RETEXO, strategies/retexo.py) instead of in rounds: per stage the aggregator sends CMD_STAGE,
every worker makes its one exchange of the stage's input rows and builds the stage's model, then
epochs run as usual; CMD_STAGE_END hands the stage's best parameters to every worker, which
computes the next stage's inputs (or, after the last, its predictions)."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from grappa.config import TrainConfig
from grappa.models.params import num_buffer_values, num_params
from grappa.models.sparse_input import compact_input
from grappa.runtime import protocol as proto
from grappa.runtime import startup
from grappa.runtime.aggregator import Aggregator
from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
from grappa.runtime.replica import make_optimizer
from grappa.runtime.worker import Worker
from grappa.strategies.full.halo_exchange import fetch_rows
from grappa.strategies.grappa.rounds import RoundDecision
from grappa.strategies.retexo import build_stage_model, stage_epochs
from grappa.tasks.node_classification import split_stats

log = logging.getLogger("grappa.retexo")


class StagedWorker(Worker):
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

    def serve(self) -> None:
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


class StagedAggregator(Aggregator):
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

    def train(self) -> dict:
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
            startup.say(startup.STAGE_STARTED, stage=stage, epoch=epoch)
            for epoch in range(epoch, bounds[stage + 1]):
                self.safe_point()
                t0 = time.perf_counter()
                before = self.link.bytes.snapshot()
                do_eval = True  # the stage's best epoch needs every validation score
                rec = {"epoch": epoch + 1, "round": 0, "round_start": 0, "stage": stage, "steps": 1}
                rec.update(self.train_epoch(epoch, rinfo, do_eval))
                train_bytes = self._delta(before, "train")
                eval_before = self.link.bytes.snapshot()
                self.start_eval(epoch)
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
            if cfg.checkpoint.interval or stage == cfg.model.layers - 1:
                # Kept for a stop only when written on schedule, as before: the workers may still
                # be writing the next stage's input rows, which resuming a finished stage needs.
                # The last stage's end is always written: a rerun knows the run finished.
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
