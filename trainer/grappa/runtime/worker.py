"""A partition worker (rank r >= 1): trains its local subgraph in isolation.

Per step it joins one all-reduce with its contribution (gradient sum, weight sum, a few scalars)
and applies the summed update to its own replica (exchange.py); with strategy grappa nothing
else crosses the network during training. Evaluation is exact: layer by layer over its base
chunks with all in-edges, boundary rows read from the other workers' row files
(runtime/exact_eval.py).
"""
from __future__ import annotations

import logging
import math
import shutil
import time
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from grappa.config import TrainConfig
from grappa.data.idhash import hash64, hash_key
from grappa.data.sampling.bounded import bounded_samples, input_bytes
from grappa.data.sampling.store_sampler import StoreSampler
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.chunk_store import ChunkStore, open_store
from grappa.models.params import load_flat_state, num_buffer_values, num_params
from grappa.runtime import protocol as proto
from grappa.runtime.exchange import StepExchange
from grappa.runtime.replica import checksum, load_optimizer_bytes, make_optimizer
from grappa.runtime.sharded import ShardedStepExchange, load_state_bytes, shard_on, state_bytes
from grappa.runtime.stop import Stopped
from grappa.runtime.transport import Link
from grappa.strategies import make_strategy, strategy_class
from grappa.strategies.base import epoch_seed
from grappa.strategies.full.halo_exchange import LinkPeers
from grappa.strategies.grappa.rounds import RoundDecision
from grappa.tasks import build_task_model
from grappa.tasks.node_classification import split_stats
from grappa.util.process_memory import PeakMemory

log = logging.getLogger("grappa.worker")

# Reading PSS walks every mapping (14-21 ms of CPU with torch and the store mapped), so a worker
# reads it in the background every few seconds and at each epoch's report, never per step.
PSS_SAMPLE_S = 5.0


class Worker:
    def __init__(self, cfg: TrainConfig, link: Link, store: Optional[ChunkStore] = None):
        self.cfg = cfg
        self.link = link
        self.store = store or open_store(cfg)
        man = self.store.manifest
        torch.manual_seed(cfg.training.seed)
        self.model = build_task_model(cfg, man["num_features"], man["num_classes"])
        self.n_params = num_params(self.model)
        self.n_buf = num_buffer_values(self.model)
        self.sharded = shard_on(cfg, self.n_params, link.world_size)  # sharded.py
        if self.sharded:
            self.optimizer = None
            self.exchange = ShardedStepExchange(link, self.model, cfg)
        else:
            self.optimizer = make_optimizer(cfg, self.model)
            self.exchange = StepExchange(link, self.model, self.optimizer)
        peers = LinkPeers(link) if strategy_class(cfg.strategy).needs_peers else None
        self.shard = make_strategy(cfg, link.rank, self.store, self.model, peers)
        self.metrics = None  # set by the entry point when a metrics port is configured
        self.memory = PeakMemory(interval=PSS_SAMPLE_S)  # PSS has no kernel peak: sampled
        self._epoch = 0  # the epoch being run, for the sampled evaluation's seed

    # -- set-up ------------------------------------------------------------------------------
    def send_eval_layout(self) -> None:
        """Exact evaluation: set up the layer-wise pass over this worker's base chunks (nothing
        to send: rows go through files on the shared volume, or the run's home in the bucket).
        Sampled evaluation: pick the nodes this worker scores."""
        if self.cfg.sampled_eval:
            self.eval_nodes = sampled_eval_nodes(self.store, self.shard.base, self.cfg)
            self.eval_sampler = StoreSampler(self.store, self.cfg.fanouts)
            return
        from grappa.runtime.exact_eval import LayerwiseEvaluation
        home = None
        if self.cfg.storage.run_home is not None:  # rows pass through the bucket, not a shared folder
            from grappa.data.s3.run_home import RunHome
            home = RunHome(self.cfg.storage.run_home)
        self.exact_eval = LayerwiseEvaluation(self.store, self.shard.base,
                                              self.cfg.eval_rows_dir(self.link.rank), home=home)
        if self.cfg.task == "link-prediction":
            from grappa.runtime.link_eval import LinkEvaluation
            self.link_eval = LinkEvaluation(self.store, self.shard.link, self.shard.index,
                                            self.cfg.partitions, self.exact_eval.rows)

    def receive_params(self) -> None:
        buf = torch.empty(self.n_params + self.n_buf, dtype=torch.float32)
        load_flat_state(self.model, self.link.recv(buf, 0, "control"))

    def receive_replica(self) -> None:
        """The aggregator's parameters, buffers and optimizer state (replica.py), once."""
        self.receive_params()
        if self.sharded:  # this rank's slice of the optimizer state only
            self.exchange.load_slice(load_state_bytes(self.link.recv_var(0, "control")))
            return
        self.optimizer = make_optimizer(self.cfg, self.model)
        load_optimizer_bytes(self.optimizer, self.link.recv_var(0, "control"))
        self.exchange.bind(self.model, self.optimizer)

    def setup_round(self, decision: RoundDecision) -> None:
        st = self.shard.setup_round(decision)
        stats = torch.tensor([st.coverage_sum, st.seeds, st.nodes, st.halo, st.edges, st.seconds],
                             dtype=torch.float64)
        self.link.send(stats, 0, "control")
        if self.metrics is not None:
            self.metrics.round.set(decision.round)
            if st.seeds:
                self.metrics.coverage_mean.set(st.coverage_sum / st.seeds)

    # -- training ----------------------------------------------------------------------------
    def run_epoch(self, epoch: int, steps: int, wbar: float) -> None:
        batches = self.shard.start_epoch(epoch)
        ahead = self.shard.prepare(batches[0]) if batches else None
        for step in range(steps):
            t0 = time.perf_counter()
            c = self.shard.contribute(batches[step], wbar, ahead) if step < len(batches) else None
            if c is not None and self.metrics is not None:
                self.metrics.weight_mean.set(c.mean_weight)
            # the next batch is sampled and its rows read while this step's sum is in flight
            nxt = batches[step + 1] if step + 1 < min(steps, len(batches)) else None
            out = self.exchange.step(c, epoch, meanwhile=None if nxt is None else lambda: self.shard.prepare(nxt))
            if out.stopped:
                raise Stopped()  # the aggregator is stopping (SIGTERM): it saves, we leave
            ahead = out.prefetched
            if self.metrics is not None:
                self.metrics.step_seconds.observe(time.perf_counter() - t0)

    # -- evaluation --------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> None:
        if self.cfg.sampled_eval:
            return self.evaluate_sampled()
        if self.cfg.task == "link-prediction":
            from grappa.runtime.link_eval import worker_evaluate
            return worker_evaluate(self.model, self.exact_eval, self.link_eval, self.link)
        model, ev = self.model, self.exact_eval
        model.eval()
        for layer in range(model.passes - 1):
            ev.write_layer(model, layer)
            # barrier: every worker's rows of this layer are in place before any reads its halo
            self.link.send(torch.zeros(1), 0, "eval")
            self.link.recv(torch.empty(1), 0, "eval")
        self.link.send(ev.last_layer_stats(model), 0, "eval")

    @torch.no_grad()
    def evaluate_sampled(self) -> None:
        """Score this worker's evaluation nodes on neighbourhoods sampled from the whole store;
        its own generator per epoch, so training's random streams are untouched. Batches are
        split until their input fits a memory budget (data/sampling/bounded.py)."""
        self.model.eval()
        ids, y, split = self.eval_nodes
        seed = epoch_seed(self.cfg.training.seed, self.link.rank, self._epoch) + 1
        gen = torch.Generator().manual_seed(seed)
        stats = torch.zeros(proto.EVAL_STATS_LEN, dtype=torch.float64)
        codes = (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST)
        width = int(self.store.manifest["num_features"])
        per_edge = getattr(self.model, "messages_per_edge", True)
        for part, sub in bounded_samples(ids, self.cfg.training.batch_size,
                                         lambda s: self.eval_sampler.sample(s, gen),
                                         lambda sub: input_bytes(sub, width, per_edge)):
            x, deg = self.store.load_node_rows(sub.n_id)
            logits = self.model(x, sub.blocks(deg))
            stats += split_stats(logits, y[part], tuple(split[part] == c for c in codes))
        self.link.send(stats, 0, "eval")

    def epoch_command(self, epoch: int, steps: int, wbar: float, do_eval: bool) -> None:
        """One epoch as the aggregator ordered it: train, report, optionally evaluate."""
        self._epoch = epoch
        self.run_epoch(epoch, steps, wbar)
        self.send_epoch_report()
        if do_eval:
            self.await_eval(epoch)
            self.evaluate()
        if self.metrics is not None:
            self.metrics.epoch.set(epoch + 1)
            self.metrics.observe_bytes(self.link.bytes)

    def await_eval(self, epoch: int) -> None:
        """The aggregator's word that every report of the epoch is in (its end recorded)."""
        cmd, at = self.recv_control()[:2]
        if cmd != proto.CMD_EVAL or int(at) != epoch:
            raise RuntimeError(f"rank {self.link.rank}: expected the aggregator's evaluate command for epoch "
                               f"{epoch + 1}, got command {int(cmd)} for epoch {int(at) + 1}")

    def send_epoch_report(self) -> None:
        """Per-worker bytes since the previous report (so set-up exchanges between epochs count
        too) and peak memory: what the aggregator cannot see (worker-to-worker fetches); and the
        chunk store's bytes read in the round so far (the round's build included)."""
        before = getattr(self, "_reported", {"sent": {}, "received": {}})
        now = self._reported = self.link.bytes.snapshot()
        delta = [now[d].get(k, 0) - before[d].get(k, 0)
                 for k in ("train", "fetch") for d in ("sent", "received")]
        if not self.memory.peak_pss:  # the background thread reads it after that (PSS_SAMPLE_S)
            self.memory.sample()
        g = self.shard.graph
        local = [g.num_nodes, g.num_edges] if g is not None else [0, 0]
        reads = g.store_reads() if g is not None else dict.fromkeys(proto.STORE_READS, 0)
        report = delta + [self.memory.peak_rss, self.memory.peak_pss] + local + [checksum(self.model)] + \
            [reads[k] for k in proto.STORE_READS] + self.memory.cgroup.values()
        self.link.send(torch.tensor(report, dtype=torch.float64), 0, "control")
        if self.sharded:  # the aggregator keeps the whole optimizer state for its checkpoint
            self.link.send_var(state_bytes(self.exchange.optimizer.state_dict()), 0, "control")
        if self.metrics is not None:
            self.metrics.observe_memory(self.memory)
            if g is not None:
                self.metrics.observe_store_reads(g.features.serial, reads)

    # -- main loop ---------------------------------------------------------------------------
    def recv_control(self) -> tuple[float, ...]:
        """The aggregator's next control message: (command, epoch, round or stage, pairing seed,
        steps, evaluate?, mean weight)."""
        ctrl = self.link.recv(torch.empty(proto.CONTROL_LEN, dtype=torch.float64), 0, "control")
        return tuple(ctrl[i].item() for i in range(7))

    def run(self) -> None:
        done = False
        try:
            self.serve()
            done = True
        finally:
            self.memory.stop()
            self.shard.close(done)
            ev = getattr(self, "exact_eval", None)
            if ev is not None and ev.home is not None:  # this worker's own copies of the rows
                shutil.rmtree(ev.scratch, ignore_errors=True)
                log.info(
                    "evaluation's layer rows through %s: %.1f MiB uploaded, %.1f MiB downloaded",
                    ev.home.where, ev.home.bytes_sent / 2**20, ev.home.bucket.bytes_received / 2**20)

    def serve(self) -> None:
        self.send_eval_layout()
        self.receive_replica()
        while True:
            cmd, epoch, rnd, seed, steps, do_eval, wbar = self.recv_control()
            if cmd == proto.CMD_STOP:
                return
            if cmd == proto.CMD_ROUND:
                self.setup_round(RoundDecision(int(rnd), int(seed), int(epoch)))
            elif cmd == proto.CMD_EPOCH:
                self.epoch_command(int(epoch), int(steps), float(wbar), bool(do_eval))


_EVAL_SUBSET_STREAM = 0x4556  # hash stream of the evaluation subset, apart from the chunk hash's


def sampled_eval_nodes(store: ChunkStore, base: list[int], cfg: TrainConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(global ids, labels, split codes) of the base chunks' nodes in a split: all of them, or a
    fixed seeded share `training.evalFraction` (the same subset at every evaluation)."""
    ids, y, split = [], [], []
    for k in base:
        m = store.chunk_maps(k)
        keep = np.asarray(m["split"]) > 0
        if cfg.training.eval_fraction < 1.0:
            # a hash of the id, not a random draw: the same nodes at every evaluation and restart
            h = hash64(np.asarray(m["nodes"]), hash_key(cfg.training.seed, _EVAL_SUBSET_STREAM))
            keep &= (h >> np.uint64(11)).astype(np.float64) < cfg.training.eval_fraction * float(1 << 53)
        ids.append(np.asarray(m["nodes"])[keep].astype(np.int64))
        y.append(np.asarray(m["y"])[keep].astype(np.int64))
        split.append(np.asarray(m["split"])[keep])
    return (torch.from_numpy(np.concatenate(ids)), torch.from_numpy(np.concatenate(y)),
            torch.from_numpy(np.concatenate(split)))


def steps_per_epoch(num_seeds: list[int], mode: str, batch_size: int, cap: Optional[int] = None) -> int:
    """Every worker runs the same number of steps: the largest ceil(n_train_p / batch), at most
    `cap` (training.maxStepsPerEpoch)."""
    if mode == "full-graph":
        return 1
    steps = max([math.ceil(n / batch_size) for n in num_seeds] + [1])
    return min(steps, cap) if cap else steps
