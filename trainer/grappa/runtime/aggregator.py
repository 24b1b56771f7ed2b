"""The aggregator (rank 0): drives epochs and rounds, and keeps the model of record.

It joins every step's all-reduce with zeros and applies the same update as the workers
(exchange.py), so it holds the exact model and optimizer state without receiving P gradients.
It sends its replica once after a start or resume, checks the workers' replicas every epoch
(replica.py), drives exact evaluation, keeps the best-validation parameters and checkpoints.
On SIGTERM it sets the stop flag of the next step, then writes the last completed epoch
(`save_last_epoch`, stop.py); resume is per epoch.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Optional

import torch

from grappa.config import TrainConfig, dump_config
from grappa.data.store.chunk_store import open_store
from grappa.models.model_file import describe as describe_model
from grappa.models.model_file import located, save_model
from grappa.models.params import flat_state, num_buffer_values, num_params
from grappa.runtime import protocol as proto
from grappa.runtime import startup
from grappa.runtime.checkpoint import LastEpoch, checkpoint_dir, latest_checkpoint, load_checkpoint
from grappa.runtime.exchange import StepExchange
from grappa.runtime.job_progress import NullSink, Progress, ProgressSink, RoundSource
from grappa.runtime.replica import check_replicas, checksum, make_optimizer, optimizer_bytes
from grappa.runtime.sharded import ShardedStepExchange, load_state_bytes, shard_on, state_bytes
from grappa.runtime.stop import SigtermWatch, StopRequested
from grappa.runtime.transport import Link
from grappa.runtime.worker import steps_per_epoch
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.tasks import build_task_model
from grappa.util.process_memory import PeakMemory

log = logging.getLogger("grappa.aggregator")
METRICS = "metrics.jsonl"


class Aggregator:
    def __init__(self, cfg: TrainConfig, link: Link, rounds: RoundSource,
                 sink: Optional[ProgressSink] = None, metrics=None):
        self.cfg = cfg
        self.link = link
        self.rounds = rounds
        self.sink = sink or NullSink()
        self.metrics = metrics
        self.workers = list(range(1, link.world_size))
        self.manifest = open_store(cfg).manifest
        torch.manual_seed(cfg.training.seed)
        self.model = build_task_model(cfg, self.manifest["num_features"], self.manifest["num_classes"])
        self.n_params = num_params(self.model)
        # sharded (sharded.py): no whole optimizer here; its state is gathered at each epoch's end
        # into `optimizer_state`, the checkpoint's, and sliced out again to the ranks on resume
        self.sharded = shard_on(cfg, self.n_params, link.world_size)
        self.optimizer_state: Optional[dict] = None
        if self.sharded:
            self.optimizer = None
            self.exchange = ShardedStepExchange(link, self.model, cfg)
            log.info("sharded optimizer: %d ranks, %d parameters each at most", link.world_size,
                     max(hi - lo for lo, hi in self.exchange.param_bounds))
        else:
            self.optimizer = make_optimizer(cfg, self.model)
            self.exchange = StepExchange(link, self.model, self.optimizer)
        self.n_buf = num_buffer_values(self.model)
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.history: list[dict] = []
        self.best = {"val": -1.0, "test": None, "epoch": None, "state": None}
        # what selects the best epoch (validation) and what the result reports of it (test)
        self.select = ("val_mrr", "test_mrr") if cfg.task == "link-prediction" else ("val_acc", "test_acc")
        self.progress = Progress(epochs_total=cfg.training.epochs)
        self.memory = PeakMemory(interval=0.5)
        self.home = None  # storage.s3.runPrefix: the run's home in the bucket (data/s3/run_home.py)
        if cfg.storage.run_home is not None:
            from grappa.data.s3.run_home import RunHome
            self.home = RunHome(cfg.storage.run_home)
        self.last_epoch = LastEpoch(self.run_dir, home=self.home)
        self.stop: Optional[SigtermWatch] = None  # set by the entry point
        self.steps_into_epoch = 0  # optimizer steps of the epoch under way (lost on a stop)
        self._stop_saved = False

    # -- messages ----------------------------------------------------------------------------
    def send_params(self) -> None:
        """Parameters and float buffers to every worker (RETEXO's best state at a stage's end)."""
        state = flat_state(self.model)
        self.link.send_many([(state, r) for r in self.workers], "control")

    def send_replica(self) -> None:
        """The whole replica, once after a start or resume: parameters, buffers, optimizer state."""
        if self.sharded:  # each rank its own slice of the resumed state (or a fresh one)
            self.send_params()
            ex = self.exchange
            for r in self.workers:
                self.link.send_var(state_bytes(ex.slice_for(self.optimizer_state, r)), r, "control")
            ex.load_slice(ex.slice_for(self.optimizer_state, 0))
            self.optimizer_state = None  # the slices hold it now
            return
        self.exchange.bind(self.model, self.optimizer)
        self.send_params()
        opt = optimizer_bytes(self.optimizer)
        for r in self.workers:
            self.link.send_var(opt, r, "control")

    def command(self, ctrl: torch.Tensor) -> None:
        self.link.send_many([(ctrl, r) for r in self.workers], "control")

    def receive_layouts(self) -> None:
        """Nothing to receive: exact evaluation routes no rows through the aggregator (the
        workers read each other's rows from the shared volume, inference/exact_eval.py)."""

    def setup_round(self, decision: RoundDecision, epoch: int) -> dict:
        self.command(proto.control(proto.CMD_ROUND, epoch, decision.round, decision.pairing_seed))
        stats = self.link.recv_many(
            [(torch.empty(proto.ROUND_STATS_LEN, dtype=torch.float64), r) for r in self.workers], "control")
        cov_sum = sum(float(s[0]) for s in stats)
        seeds = [int(s[1]) for s in stats]
        info = {
            "round": decision.round, "pairing_seed": decision.pairing_seed, "epoch": epoch,
            "wbar": cov_sum / max(1, sum(seeds)),
            "steps": steps_per_epoch(seeds, self.cfg.training.mode, self.cfg.training.batch_size,
                                     self.cfg.training.max_steps_per_epoch),
            "halo_nodes": [int(s[3]) for s in stats], "local_nodes": [int(s[2]) for s in stats],
            "build_seconds": max(float(s[5]) for s in stats),
        }
        log.info("round %d from epoch %d: mean coverage %.3f, %d steps/epoch",
                 decision.round, epoch, info["wbar"], info["steps"])
        if self.metrics is not None:
            self.metrics.round.set(decision.round)
            self.metrics.coverage_mean.set(info["wbar"])
        return info

    # -- one epoch ---------------------------------------------------------------------------
    def train_epoch(self, epoch: int, rinfo: dict, do_eval: bool) -> dict:
        self.command(proto.control(proto.CMD_EPOCH, epoch, rinfo["round"], rinfo["pairing_seed"],
                                   rinfo["steps"], do_eval, rinfo["wbar"]))
        started, started_at = time.perf_counter(), time.time()
        loss_sum = seeds = correct = 0.0
        reduce_s = step_s = 0.0
        self.steps_into_epoch = 0
        for _ in range(rinfo["steps"]):
            t0 = time.perf_counter()
            stopping = self.stop is not None and self.stop.requested.is_set()
            out = self.exchange.step(None, epoch, stop=stopping)
            if out.stopped:  # every rank saw the flag in this sum: nobody applied the step
                raise StopRequested()
            self.steps_into_epoch += 1
            reduce_s += out.apply_seconds
            step_s += time.perf_counter() - t0
            loss_sum += out.loss_sum
            seeds += out.seeds
            correct += out.correct
            if self.metrics is not None:
                self.metrics.step_seconds.observe(time.perf_counter() - t0)
        self.memory.sample()
        reports = self.link.recv_many(
            [(torch.empty(proto.EPOCH_REPORT_LEN, dtype=torch.float64), r) for r in self.workers], "control")
        check_replicas(checksum(self.model), {r: int(rep[8]) for r, rep in zip(self.workers, reports)},
                       epoch + 1)
        if self.sharded:  # every slice, for the checkpoint; merge checks their step counts agree
            slices = [self.exchange.optimizer.state_dict()]
            slices += [load_state_bytes(self.link.recv_var(r, "control")) for r in self.workers]
            self.optimizer_state = self.exchange.merge(slices)
        return {"loss": loss_sum / max(seeds, 1.0), "batch_train_acc": correct / max(seeds, 1.0),
                "reducer_seconds": reduce_s, "step_seconds": step_s,
                "train_seconds": time.perf_counter() - started,
                # wall-clock bounds, so outside observers (bench/probe.py) can attribute their own
                # per-machine counters to this epoch
                "started_at": started_at, "ended_at": time.time(),
                # per worker: training traffic (the step all-reduce) and fetched rows, both ways
                "worker_train_bytes": [int(r[0] + r[1]) for r in reports],
                "worker_fetch_bytes": [int(r[2] + r[3]) for r in reports],
                "worker_peak_rss_bytes": [int(r[4]) for r in reports],
                "worker_peak_pss_bytes": [int(r[5]) for r in reports],
                "worker_local_nodes": [int(r[6]) for r in reports],
                "worker_local_edges": [int(r[7]) for r in reports],
                # per worker, bytes read from the chunk store in this round so far (round's build
                # included): structure, owned and halo feature rows, every read and distinct
                "worker_store_read_bytes": {k: [int(r[9 + i]) for r in reports]
                                            for i, k in enumerate(proto.STORE_READS)},
                # per worker, its memory cgroup's peaks (a pod's: what its limit is enforced on)
                **{f"worker_{k}_bytes": [int(r[proto.CGROUP_AT + i]) for r in reports]
                   for i, k in enumerate(proto.CGROUP_PEAKS)},
                "aggregator_peak_rss_bytes": self.memory.peak_rss,
                "aggregator_peak_pss_bytes": self.memory.peak_pss,
                **{f"aggregator_{k}_bytes": v for k, v in zip(proto.CGROUP_PEAKS, self.memory.cgroup.values())}}

    def start_eval(self, epoch: int) -> None:
        """The workers evaluate on this word, sent once the epoch has ended (every report in)."""
        quiet = proto.eval_quiet_seconds()
        if quiet:
            time.sleep(quiet)
        self.command(proto.control(proto.CMD_EVAL, epoch))

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Exact layer-wise inference: after each hidden layer, a barrier (every worker has
        written its rows; one element each way). Sampled evaluation: the workers' stats only."""
        if self.cfg.task == "link-prediction":
            from grappa.runtime.link_eval import aggregator_evaluate
            return aggregator_evaluate(self.model.passes, self.workers, self.link)
        if not self.cfg.sampled_eval:
            for _ in range(self.model.passes - 1):
                self.link.recv_many([(torch.empty(1), r) for r in self.workers], "eval")
                self.link.send_many([(torch.zeros(1), r) for r in self.workers], "eval")
        return self.receive_eval_stats()

    def receive_eval_stats(self) -> dict:
        stats = self.link.recv_many(
            [(torch.empty(proto.EVAL_STATS_LEN, dtype=torch.float64), r) for r in self.workers], "eval")
        total = torch.stack(stats).sum(0)
        out = {}
        for i, split in enumerate(proto.SPLITS):
            count = float(total[3 * i + 2])
            out[f"{split}_loss"] = float(total[3 * i]) / count if count else None
            out[f"{split}_acc"] = float(total[3 * i + 1]) / count if count else None
        return out

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoint_state(self, epoch: int, decision: RoundDecision) -> dict:
        return {
            "epoch": epoch, "model": self.model.state_dict(),
            "optimizer": self.optimizer_state if self.sharded else self.optimizer.state_dict(),
            "best": self.best, "decision": decision.__dict__, "history": self.history,
            "config": dump_config(self.cfg),
            "describe": located(self.describe(), checkpoint_dir(self.run_dir)),  # where the file lives
        }

    def describe(self) -> dict:
        """What rebuilds the model without the run's config (model_file.py)."""
        man = self.manifest
        return describe_model(self.cfg, man["num_features"], man["num_classes"],
                              getattr(self.model, "widths", []), man, code=getattr(self.model, "code", None))

    def resume(self) -> tuple[int, RoundDecision]:
        fresh = RoundDecision(0, round_seed(self.cfg.grappa.partition_seed, 0), 0)
        path = latest_checkpoint(self.run_dir)
        if path is None and self.home is not None:  # a new pod's empty runDir: the bucket's
            if not (self.run_dir / METRICS).exists():  # its epochs so far, extended from here
                self.home.fetch(METRICS, self.run_dir / METRICS)
            path = self.home.latest_checkpoint(checkpoint_dir(self.run_dir))
        if path is None:
            return 0, fresh
        ck = load_checkpoint(path)
        recorded = (ck.get("describe") or {}).get("code")
        if recorded and getattr(self.model, "code", None):
            from grappa.models.user_code import check_identity
            check_identity(recorded, self.model.code, f"checkpoint {path}",
                           "to resume it, or start over (grappa train --start-over; on Kubernetes "
                           "a new GrappaJob)")
        self.model.load_state_dict(ck["model"])
        if self.sharded:  # sliced out to the ranks by send_replica
            self.optimizer_state = ck["optimizer"]
        else:
            self.optimizer.load_state_dict(ck["optimizer"])
        self.best, self.history = ck["best"], ck["history"]
        for rec in self.history:
            self.progress.val_history.append((rec["epoch"], rec.get(self.select[0])))
        log.info("resuming from %s (epoch %d)", path, ck["epoch"])
        self._jsonl({"event": "resume", "epoch": ck["epoch"], "checkpoint": str(path)})
        self.last_epoch.on_disk(ck["epoch"], self.steps_done(), path)
        return ck["epoch"], RoundDecision(**ck["decision"])

    def steps_done(self) -> int:
        return sum(rec.get("steps", 0) for rec in self.history)

    def end_epoch(self, rec: dict, epoch: int, decision: RoundDecision) -> None:
        """Epoch `epoch` (1-based) is complete: record it, and keep its state for a stop. The last
        epoch is always written, whatever checkpoint.interval says: a rerun then knows the run
        finished, and one with more epochs extends it from there instead of redoing (and
        recording twice) the epochs after the last periodic checkpoint."""
        periodic = bool(self.cfg.checkpoint.interval) and epoch % self.cfg.checkpoint.interval == 0
        self.end_epoch_as(rec, epoch, decision, periodic or epoch == self.cfg.training.epochs)

    def end_epoch_as(self, rec: dict, epoch: int, decision: RoundDecision, write: bool) -> None:
        self.steps_into_epoch = 0
        with self.last_epoch.lock:  # a stop sees both the record and the state, or neither
            self.history.append(rec)
            self._jsonl(rec)
            self.last_epoch.record(epoch, self.steps_done(), self.checkpoint_state(epoch, decision), write)
        self.optimizer_state = None  # sharded: kept in the recorded checkpoint; gathered anew next epoch

    def safe_point(self) -> None:
        """Between steps and epochs: no update half-applied, no message half-exchanged."""
        if self.stop is not None:
            self.stop.check()

    def save_last_epoch(self, why: str) -> None:
        """Write the last completed epoch (if not on disk already) and say so, once."""
        with self.last_epoch.lock:  # the main thread and the SIGTERM watcher may both get here
            if self._stop_saved:
                return
            self._stop_saved = True
            self._save_last_epoch(why)

    def _save_last_epoch(self, why: str) -> None:
        t0 = time.perf_counter()
        unsaved = self.last_epoch.latest is not None and self.last_epoch.latest.path is None
        s = self.last_epoch.save()
        seconds = time.perf_counter() - t0
        lost = self.steps_into_epoch
        if s is None:
            log.warning("%s: no epoch completed yet, nothing to save (%d steps of epoch 1 not kept)",
                        why, lost)
            return
        done = f"saved to {s.path} in {seconds:.2f} s" if unsaved else f"already saved at {s.path}"
        log.warning("%s: checkpoint of epoch %d step %d %s (%d steps into epoch %d not kept: "
                    "resume is per epoch)", why, s.epoch, s.step, done, lost, s.epoch + 1)
        self._jsonl({"event": "stop", "why": why, "epoch": s.epoch, "step": s.step,
                     "checkpoint": str(s.path), "save_seconds": seconds, "steps_not_kept": lost})

    def _jsonl(self, record: dict) -> None:
        with open(self.run_dir / METRICS, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.home is not None:  # the whole file each time: an object is replaced, never appended to
            self.home.put(self.run_dir / METRICS, METRICS)

    def upload_results(self) -> None:
        """The finished run's files into its home in the bucket, report.json last: a report there
        says every other file is."""
        if self.home is None:
            return
        for name in ("model.pt", "training.png", METRICS, "report.json"):
            if (self.run_dir / name).is_file():
                self.home.put(self.run_dir / name, name)

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        try:
            return self.train()
        finally:
            self.memory.stop()

    def train(self) -> dict:
        cfg = self.cfg
        epochs = cfg.training.epochs
        self.receive_layouts()
        start, decision = self.resume()
        self.send_replica()
        applied: Optional[RoundDecision] = None
        rinfo: dict = {}
        started = time.perf_counter()
        for epoch in range(start, epochs):
            self.safe_point()
            t0 = time.perf_counter()
            before = self.link.bytes.snapshot()
            decision = self.rounds.decide(epoch, self.progress, decision)
            build_seconds = 0.0  # the slowest worker's local-graph build, in epochs that start a round
            if decision != applied:
                rinfo = self.setup_round(decision, epoch)
                if applied is None:  # the first round of this start: training begins
                    startup.say(startup.ROUND_BUILT, round=decision.round, epoch=epoch,
                                build_seconds=rinfo["build_seconds"])
                applied = decision
                build_seconds = rinfo["build_seconds"]
            do_eval = (epoch + 1) % cfg.training.eval_every == 0 or epoch == epochs - 1
            rec = {"epoch": epoch + 1, "round": decision.round, "round_start": decision.effective_epoch,
                   "steps": rinfo["steps"], "round_build_seconds": build_seconds}
            rec.update(self.train_epoch(epoch, rinfo, do_eval))
            train_bytes = self._delta(before, "train")
            eval_before = self.link.bytes.snapshot()
            eval_started = time.perf_counter()
            if do_eval:
                self.start_eval(epoch)
                rec.update(self.evaluate())
                self._track_best(rec, epoch + 1)
            rec["eval_seconds"] = time.perf_counter() - eval_started
            rec.update({
                "epoch_seconds": time.perf_counter() - t0, "wbar": rinfo["wbar"],
                "train_bytes": train_bytes, "eval_bytes": self._delta(eval_before, "eval"),
                "control_bytes": self._delta(before, "control"),
                "best_val": self.best["val"], "best_test": self.best["test"],
            })
            self.end_epoch(rec, epoch + 1, decision)
            self._publish(rec, started, epoch + 1 - start)
        self.command(proto.control(proto.CMD_STOP))
        return self.finish()

    def _delta(self, before: dict, kind: str) -> int:
        now = self.link.bytes.snapshot()
        return sum(now[d].get(kind, 0) - before[d].get(kind, 0) for d in ("sent", "received"))

    def _track_best(self, rec: dict, epoch: int) -> None:
        val = rec.get(self.select[0])
        if val is not None and val > self.best["val"]:
            self.best = {"val": val, "test": rec.get(self.select[1]), "epoch": epoch,
                         "state": {k: v.clone() for k, v in self.model.state_dict().items()}}
            if self.cfg.task == "link-prediction":  # every test metric of the selected epoch
                self.best["test_metrics"] = {k: v for k, v in rec.items() if k.startswith("test_")}

    def _publish(self, rec: dict, started: float, done_here: int) -> None:
        p = self.progress
        p.epoch, p.round, p.loss = rec["epoch"], rec["round"], rec["loss"]
        if "val_acc" in rec:
            p.train_acc, p.val_acc, p.test_acc = rec["train_acc"], rec["val_acc"], rec["test_acc"]
        if "val_mrr" in rec:
            p.val_mrr, p.test_mrr = rec["val_mrr"], rec["test_mrr"]
            p.test_hits50, p.test_auc = rec.get("test_hits@50"), rec.get("test_auc")
        if rec.get(self.select[0]) is not None:
            p.val_history.append((rec["epoch"], rec[self.select[0]]))
        p.best_val, p.best_epoch = self.best["val"], self.best["epoch"]
        p.epoch_seconds = rec["epoch_seconds"]
        p.train_bytes_per_epoch, p.eval_bytes_per_epoch = rec["train_bytes"], rec["eval_bytes"]
        p.eta_seconds = (time.perf_counter() - started) / done_here * (p.epochs_total - p.epoch)
        self.sink.report(p, final=False)
        m = self.metrics
        if m is not None:
            m.loss.set(rec["loss"])
            m.epoch.set(rec["epoch"])
            m.epoch_seconds.set(rec["epoch_seconds"])
            for name in ("train", "val", "test"):
                if rec.get(f"{name}_acc") is not None:
                    getattr(m, f"{name}_acc").set(rec[f"{name}_acc"])
            for key, gauge in (("val_mrr", m.val_mrr), ("test_mrr", m.test_mrr),
                               ("test_hits@50", m.test_hits50), ("test_auc", m.test_auc)):
                if rec.get(key) is not None:
                    gauge.set(rec[key])
            m.best_val.set(max(self.best["val"], 0.0))
            m.observe_bytes(self.link.bytes)
            m.observe_memory(self.memory)

    def finish(self) -> dict:
        if self.best["state"] is not None:
            save_model(self.run_dir / "model.pt", self.describe(), self.best["state"])
        # exact evaluation's row files (the workers have stopped): (L - 1) x n x hidden floats
        shutil.rmtree(self.run_dir / "eval-layers", ignore_errors=True)
        if self.home is not None:
            self.home.drop_rows()
        result = {self.select[1]: self.best["test"], "best_val": self.best["val"],
                  "best_epoch": self.best["epoch"]}
        if self.cfg.task == "link-prediction":
            result.update(self.best.get("test_metrics") or {})
            result["selected_by"] = self.select[0]
            self.progress.final_metrics = dict(self.best.get("test_metrics") or {})
            self.progress.test_mrr = self.best["test"]  # the status's testMrr: of the best epoch
        if self.cfg.task == "node-classification":  # the status's testAcc is an accuracy
            self.progress.test_acc = self.best["test"]
        self.sink.report(self.progress, final=True)
        return result
