"""Grappa in one process: the P shards, the reducer and the optimizer of a real run, without
transport. Same code path and the same RNG streams as the multi-process run, so the numbers match
it (tests check this); used by the accuracy benchmark and the gradient-fidelity harness, where
process start-up and gloo would only add noise and minutes. Evaluation is always exact (the
whole graph in this process), whatever `training.evalMode` says.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from grappa.config import TrainConfig
from grappa.data.blocks import full_blocks
from grappa.data.datasets import load_dataset
from grappa.data.store.chunk_store import ChunkStore, open_store
from grappa.models.build import build_model
from grappa.models.params import flat_state, load_flat_state, num_buffer_values, num_params
from grappa.runtime.exchange import StepOutcome, apply_sum, message_size, pack
from grappa.runtime.job_progress import Progress
from grappa.runtime.replica import make_optimizer
from grappa.runtime.transport import ring_allreduce_bytes
from grappa.runtime.worker import steps_per_epoch
from grappa.strategies import make_strategy
from grappa.strategies.grappa.rounds import RoundDecision, ScheduleRounds, round_seed
from grappa.tasks.node_classification import evaluate_full


class Simulation:
    def __init__(self, cfg: TrainConfig, data=None, store: Optional[ChunkStore] = None):
        if cfg.strategy != "grappa":
            raise ValueError(f"the in-process simulation runs strategy grappa only, not {cfg.strategy!r}; "
                             "use `grappa train` (processes)")
        if cfg.task != "node-classification":
            raise ValueError(f"the in-process simulation runs node classification only so far, not "
                             f"task {cfg.task!r}; use `grappa train` (processes)")
        self.cfg = cfg
        self.store = store or open_store(cfg)
        man = self.store.manifest
        torch.manual_seed(cfg.training.seed)
        self.model = build_model(cfg.model, man["num_features"], man["num_classes"], cfg.training.mode)
        self.optimizer = make_optimizer(cfg, self.model)
        self.n_params, self.n_buf = num_params(self.model), num_buffer_values(self.model)
        self.shards = [make_strategy(cfg, r, self.store, self.model) for r in range(1, cfg.partitions + 1)]
        self.data = data if data is not None else load_dataset(cfg.dataset)
        self.eval_blocks = full_blocks(self.data.edge_index, self.data.num_nodes, self.model.num_layers)
        self.eval_x = self.model.prepare_input(self.data.x)
        # the aggregator's share of one step's all-reduce, sent + received (what a real run counts)
        self.step_bytes = sum(ring_allreduce_bytes(4 * message_size(self.model), 4, cfg.partitions + 1, 0))

    def setup_round(self, decision: RoundDecision) -> tuple[float, int]:
        stats = [s.setup_round(decision) for s in self.shards]
        wbar = sum(st.coverage_sum for st in stats) / max(1, sum(st.seeds for st in stats))
        steps = steps_per_epoch([st.seeds for st in stats], self.cfg.training.mode,
                                self.cfg.training.batch_size, self.cfg.training.max_steps_per_epoch)
        return wbar, steps

    def train_epoch(self, epoch: int, steps: int, wbar: float) -> dict:
        batches, rng = [], []
        for s in self.shards:
            batches.append(s.start_epoch(epoch))
            rng.append(torch.get_rng_state())  # each worker process has its own RNG stream
        state = flat_state(self.model)
        loss_sum = seeds = 0.0
        for step in range(steps):
            msgs = []
            for i, s in enumerate(self.shards):
                load_flat_state(self.model, state)  # every replica starts the step identical
                torch.set_rng_state(rng[i])
                c = s.contribute(batches[i][step], wbar) if step < len(batches[i]) else None
                msgs.append((c, flat_state(self.model)[self.n_params:]))  # buffers its forward left
                rng[i] = torch.get_rng_state()
            load_flat_state(self.model, state)
            out = self.reduce(msgs)
            state = flat_state(self.model)
            loss_sum += out.loss_sum
            seeds += out.seeds
        return {"loss": loss_sum / max(seeds, 1.0), "train_bytes": steps * self.step_bytes}

    def reduce(self, contributions: list) -> StepOutcome:
        """The step's all-reduce, in one process (the ring's order of additions aside)."""
        total = torch.stack([pack(c, self.model, buffers=b) for c, b in contributions]).sum(0)
        return apply_sum(self.model, self.optimizer, total)

    def run(self, on_epoch: Optional[Callable[[dict], None]] = None) -> tuple[dict, list[dict]]:
        cfg = self.cfg
        rounds = ScheduleRounds(cfg.grappa.rounds, cfg.grappa.partition_seed)
        decision = RoundDecision(0, round_seed(cfg.grappa.partition_seed, 0), 0)
        applied: Optional[RoundDecision] = None
        best = {"val": -1.0, "test": None, "epoch": None}
        history: list[dict] = []
        progress = Progress(epochs_total=cfg.training.epochs)
        for epoch in range(cfg.training.epochs):
            t0 = time.perf_counter()
            decision = rounds.decide(epoch, progress, decision)
            if decision != applied:
                wbar, steps = self.setup_round(decision)
                applied = decision
            rec = {"epoch": epoch + 1, "round": decision.round, "round_start": decision.effective_epoch}
            rec.update(self.train_epoch(epoch, steps, wbar))
            if (epoch + 1) % cfg.training.eval_every == 0 or epoch == cfg.training.epochs - 1:
                rec.update(evaluate_full(self.model, self.data, self.eval_blocks, self.eval_x))
                progress.val_history.append((epoch + 1, rec["val_acc"]))
                if rec["val_acc"] > best["val"]:
                    best = {"val": rec["val_acc"], "test": rec["test_acc"], "epoch": epoch + 1}
            rec.update({"epoch_seconds": time.perf_counter() - t0, "wbar": wbar,
                        "best_val": best["val"], "best_test": best["test"]})
            history.append(rec)
            if on_epoch:
                on_epoch(rec)
        return {"test_acc": best["test"], "best_val": best["val"], "best_epoch": best["epoch"]}, history
