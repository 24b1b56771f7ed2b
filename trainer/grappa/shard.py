"""What one worker holds and computes, without any transport: its round's local subgraph,
seed coverage, batches and per-batch contributions. The process worker wraps it with a link;
the in-process simulation runs P of them."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .chunks.store import ChunkStore
from .config import TrainConfig
from .coverage import coverage
from .local_graph import LocalGraph, build_local_graph
from .models import GNN, build_message_graph
from .rounds import RoundDecision, base_chunks, variable_chunk
from .sampling import make_sampler
from . import varco
from .fullcomm import HaloPlan, Peers, build_plan, forward_full
from .step import Contribution, contribution, contribution_from

log = logging.getLogger("grappa.worker")


@dataclass
class RoundStats:
    coverage_sum: float
    seeds: int
    nodes: int
    halo: int
    edges: int
    seconds: float


def epoch_seed(seed: int, rank: int, epoch: int) -> int:
    """Seeded per (seed, rank, epoch) so a run resumed from a checkpoint replays exactly."""
    return seed * 100_003 + rank * 7_919 + epoch


class Shard:
    def __init__(self, cfg: TrainConfig, rank: int, store: ChunkStore, model: GNN,
                 peers: Optional[Peers] = None):
        self.cfg = cfg
        self.full = cfg.fetches
        if self.full and peers is None:
            raise ValueError(f"strategy {cfg.strategy!r} needs worker-to-worker peers")
        self.fetch_log: dict = {}  # bytes sent per (layer, direction), for byte accounting
        self.step = 0
        self.peers = peers
        self.plan: Optional[HaloPlan] = None
        self.rank = rank  # 1..P; worker index rank - 1
        self.index = rank - 1
        self.store = store
        self.model = model
        self.base = base_chunks(self.index, cfg.partitions, cfg.num_chunks)
        self.graph: Optional[LocalGraph] = None

    def setup_round(self, decision: RoundDecision) -> RoundStats:
        t0 = time.perf_counter()
        var = None if self.full else variable_chunk(
            self.index, self.cfg.partitions, self.cfg.num_chunks, decision, self.cfg.grappa.rounds.pairing)
        g = build_local_graph(self.store, self.base, var)
        self.graph = g
        self.mg = build_message_graph(g.edge_index, g.num_nodes, g.deg,
                                      need_gcn=self.model.needs_gcn_weights)
        if self.full:
            # Every neighbour is fetched, so every seed is fully covered.
            self.cov = torch.ones(g.num_nodes)
            owner = self.store.chunk_of() % self.cfg.partitions
            self.plan = build_plan(g, owner, self.index, self.cfg.partitions, self.peers)
            self.x = g.x[:g.num_owned]  # the halo's rows are fetched every step, not read here
        else:
            self.cov = coverage(g.edge_index, g.complete, self.cfg.model.layers).to(torch.float32)
            # Mini-batches gather rows, which CSR cannot do; full-graph feeds the whole matrix.
            whole = self.cfg.training.mode == "full-graph"
            self.x = self.model.prepare_input(g.x) if whole else g.x
        self.seeds = g.seeds
        if self.cfg.training.mode == "mini-batch":
            self.sampler = make_sampler(g.edge_index, g.num_nodes, self.cfg.fanouts)
        cov_seeds = self.cov[self.seeds]
        log.info("round %d: variable chunk %s, %d nodes (%d halo), %d edges, mean coverage %.3f",
                 decision.round, var, g.num_nodes, g.num_halo, g.edge_index.shape[1],
                 float(cov_seeds.mean()) if self.seeds.numel() else float("nan"))
        return RoundStats(float(cov_seeds.sum()), int(self.seeds.numel()), g.num_nodes, g.num_halo,
                          int(g.edge_index.shape[1]), time.perf_counter() - t0)

    def codec_for(self):
        """VARCO's codec per (layer, width) at this step; None for plain full communication."""
        if self.cfg.strategy != "varco":
            return None
        v, step = self.cfg.varco, self.step
        total = v.total_steps or self.cfg.training.epochs
        r = v.fixed_ratio if v.schedule == "fixed" else varco.rate(step, v.r_max, v.r_min, v.slope, total)
        seed = self.cfg.training.seed

        def codec(layer: int, width: int):
            if layer < 0 and not v.compress_input:
                return None
            return varco.make_codec(v.compressor, width, r, seed, step, layer)
        return codec

    def start_epoch(self, epoch: int) -> list[Tensor]:
        """Seeds the RNGs for this epoch and returns its batches of seeds."""
        self.step = epoch  # global step; full-graph runs one step per epoch
        s = epoch_seed(self.cfg.training.seed, self.rank, epoch)
        self.gen = torch.Generator().manual_seed(s)
        torch.manual_seed(s)  # dropout masks
        if self.full:
            return [self.seeds]  # even empty: the fetches pair up with the other workers'
        if not self.seeds.numel():
            return []
        if self.cfg.training.mode == "full-graph":
            return [self.seeds]
        order = self.seeds[torch.randperm(self.seeds.numel(), generator=self.gen)]
        return list(order.split(self.cfg.training.batch_size))

    def contribute(self, batch: Tensor, wbar: float) -> Contribution:
        g, gc = self.graph, self.cfg.grappa
        if self.full:
            return contribution_from(
                self.model, lambda: forward_full(self.model, self.x, self.mg, self.plan, self.peers,
                                                 self.codec_for(), self.fetch_log),
                batch, self.cov[batch], g.y[batch], "none", 0.0, 1.0)
        if self.cfg.training.mode == "full-graph":
            return contribution(self.model, self.x, self.mg, batch, self.cov[batch], g.y[batch],
                                gc.correction, gc.shrinkage, wbar)
        sub = self.sampler.sample(batch, self.gen)
        n_id = sub.n_id
        mg = build_message_graph(sub.edge_index, n_id.numel(), g.deg[n_id],
                                 sampled_in=sub.num_sampled_nbrs,
                                 need_gcn=self.model.needs_gcn_weights)
        return contribution(self.model, g.x[n_id], mg, torch.arange(sub.batch_size),
                            self.cov[batch], g.y[batch], gc.correction, gc.shrinkage, wbar)
