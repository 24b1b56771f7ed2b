"""The one interface every training strategy implements, on the worker's side.

Per round a strategy builds the worker's local graph (its base chunks, plus a variable chunk for
strategies that repartition) and derives what its steps need; per step it computes one
`Contribution`: the gradient of its weighted loss sum and the weight sum. What crosses the
network per step is the strategy's business (nothing for Grappa; halo rows for full and VARCO).
The aggregator side is the same reducer for all (sum of gradients over sum of weights,
strategies/grappa/reducer.py); a strategy that trains stage by stage (RETEXO) says so and the
runtime drives it with its stage loops (runtime/stages.py). A fifth strategy is one new module
registered in strategies/__init__.py.
"""
from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from grappa.config import TrainConfig
from grappa.data.halo_rows import rows_as_read
from grappa.data.local_copy import LocalCopy
from grappa.data.local_graph import LocalGraph, build_local_graph
from grappa.data.prefetch import RoundFetcher
from grappa.data.store.assign import base_chunks
from grappa.data.store.chunk_store import ChunkStore
from grappa.models import GNN
from grappa.strategies.contribution import Contribution
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.util.process_memory import release_free_memory

log = logging.getLogger("grappa.runtime.worker")


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


class Strategy(ABC):
    name: ClassVar[str]
    repartitions: ClassVar[bool] = False  # rounds move a variable chunk (Grappa only)
    needs_peers: ClassVar[bool] = False   # exchanges rows with other workers every step
    trains_in_stages: ClassVar[bool] = False  # layer by layer (RETEXO): runtime/stages.py's loops

    def __init__(self, cfg: TrainConfig, rank: int, store: ChunkStore, model: GNN, peers=None) -> None:
        if self.needs_peers and peers is None:
            raise ValueError(f"strategy {cfg.strategy!r} needs worker-to-worker peers")
        self.cfg, self.rank, self.index = cfg, rank, rank - 1  # rank 1..P, worker index 0..P-1
        self.store, self.model, self.peers = store, model, peers
        self.base = base_chunks(self.index, cfg.partitions, cfg.num_chunks)
        self.graph: Optional[LocalGraph] = None
        self.step = 0
        # storage.fetch: the round's data read from a worker-local copy (data/prefetch.py); a
        # mini-batch round's steps read few of its halo's rows: wide ones come as read (data/halo_rows.py)
        h = cfg.storage.halo_rows
        rows = "as-read" if cfg.training.mode == "mini-batch" and (
            h in ("as-read", "reachable") or (h == "auto" and rows_as_read(store.manifest))) else "all"
        # the rows a round's seeds can reach, fetched with it, ahead with prefetch (data/sampling/reach.py)
        self._warm_ahead = rows == "as-read" and h == "reachable" and cfg.storage.fetch != "direct"
        self.fetcher = None if cfg.storage.fetch == "direct" else RoundFetcher(
            LocalCopy(store.path, cfg.local_path(rank), remote=getattr(store, "remote", None), rows=rows,
                      stable=self.base))
        # the next round's owned set and first epoch, and this round's first epoch
        self._ahead: Optional[tuple[list[int], int, int]] = None
        self._epoch_started: Optional[float] = None
        self._epoch_seconds: list[float] = []  # this worker's epochs so far, the last few

    def variable_chunk(self, decision: RoundDecision) -> Optional[int]:
        """The chunk this worker holds beside its base chunks in `decision`'s round."""
        return None

    def setup_round(self, decision: RoundDecision) -> RoundStats:
        t0 = time.perf_counter()
        var = self.variable_chunk(decision)
        self.end_round()  # the old round's graph goes before the new one is built
        owned = self.base + ([var] if var is not None else [])
        reach = (lambda view: self.reach(view, owned)) if self._warm_ahead else None
        source = self.store if self.fetcher is None else self.fetcher.take(owned, reach)
        built = self.fetcher.hand_over() if self.fetcher is not None else None
        self.graph = g = built if built is not None else self.round_graph(source, var)
        coverage_sum = self.prepare_round(g)
        release_free_memory()
        if self.fetcher is not None:
            g.fetch_counts = self.fetcher.counts
            nxt = self.next_round(decision) if self.cfg.storage.fetch == "prefetch" else None
            if nxt is not None:  # after the round's own work, so it overlaps training only
                var_next = self.variable_chunk(nxt)
                # started by start_epoch, after this round's first epoch
                self._ahead = (self.base + ([var_next] if var_next is not None else []), nxt.effective_epoch,
                               decision.effective_epoch)
        seeds = self.examples()
        log.info("round %d: variable chunk %s, %d nodes (%d halo), %d edges, mean coverage %.3f",
                 decision.round, var, g.num_nodes, g.num_halo, g.num_edges,
                 coverage_sum / seeds.numel() if seeds.numel() else float("nan"))
        return RoundStats(coverage_sum, int(seeds.numel()), g.num_nodes, g.num_halo, g.num_edges,
                          time.perf_counter() - t0)

    def _pace_ahead(self, epoch: int) -> None:
        """Start, or budget anew, the fetch of the next round's data as `epoch` begins: from
        the round's second epoch on (its first reads a new halo's rows and has the round's
        set-up), unless it has one epoch only; spread over the epochs before the next round's
        but one, at the median of this worker's last three epochs (the shorter of two: better
        early than late; data/prefetch.py)."""
        if self._ahead is None:
            return
        owned, start, first = self._ahead
        left = start - epoch  # epochs before the next round's first, this one included
        recent = sorted(self._epoch_seconds[-3:])
        if (epoch <= first and start - first > 1) or (not recent and left > 1):
            return
        reach = (lambda view: self.reach(view, owned)) if self._warm_ahead else None
        var = next((k for k in owned if k not in self.base), None)
        self.fetcher.ahead(owned, (left - 1) * recent[(len(recent) - 1) // 2] if left > 1 else None, reach,
                           lambda view: self.round_graph(view, var))

    def next_round(self, decision: RoundDecision) -> Optional[RoundDecision]:
        """The round after `decision`'s, as the aggregator (or the operator) will decide it, or
        None when no round follows: rounds every R epochs that end with the run, or none at all."""
        r = self.cfg.grappa.rounds
        if not self.repartitions or (r.every == 0 and r.plateau is None):
            return None
        start = decision.effective_epoch + max(r.every, 1)
        if r.plateau is None and start >= self.cfg.training.epochs:
            return None
        t = decision.round + 1
        return RoundDecision(t, round_seed(self.cfg.grappa.partition_seed, t), start)

    def round_graph(self, source, var: Optional[int]) -> LocalGraph:
        """The round's local graph from `source` (the store, or the round's fetched view), and
        what a strategy derives from it alone (`LocalGraph.ahead`). With a fetch ahead it runs in
        the background thread, so it touches no state of the current round."""
        return build_local_graph(source, self.base, var)

    def reach(self, view, owned: Sequence[int]) -> Optional[np.ndarray]:
        """Global ids of the nodes whose feature rows the steps of the round of `owned` (read
        through `view`) may read, or None: not known (storage.haloRows reachable; runs in the
        background fetch, so it touches no state of the current round)."""
        return None

    def end_round(self) -> None:
        """Drop what the finished round's steps used (a strategy that repartitions extends it)."""
        self.graph = None
        self._ahead = None

    def close(self, done: bool) -> None:
        """The worker leaves: wait for a background fetch; `done` (the job finished): remove the
        fetched data, which a resumed worker would otherwise reuse."""
        if self.fetcher is not None:
            self.fetcher.close(remove=done)

    @abstractmethod
    def prepare_round(self, g: LocalGraph) -> float:
        """Derive what this round's steps need from the local graph; returns the coverage sum
        over the seeds (the number of seeds when every seed is fully covered)."""

    def examples(self) -> Tensor:
        """What this round's steps train on, as the ids a batch holds: the seed nodes (local
        ids); a task whose examples are not nodes (link prediction's positive edges) says so."""
        return self.graph.seeds

    def start_epoch(self, epoch: int) -> list[Tensor]:
        """Seeds the RNGs for this epoch (dropout, sampling) and returns its batches of seeds."""
        self.step = epoch  # the global step in full-graph mode
        now = time.perf_counter()
        if self._epoch_started is not None:
            self._epoch_seconds = (self._epoch_seconds + [now - self._epoch_started])[-3:]
        self._epoch_started = now
        self._pace_ahead(epoch)
        s = epoch_seed(self.cfg.training.seed, self.rank, epoch)
        self.gen = torch.Generator().manual_seed(s)
        torch.manual_seed(s)  # dropout masks
        seeds = self.examples()
        if self.cfg.training.mode == "full-graph":
            return [seeds] if seeds.numel() or self.needs_peers else []
        if not seeds.numel():
            return []
        order = seeds[torch.randperm(seeds.numel(), generator=self.gen)]
        return list(order.split(self.cfg.training.batch_size))

    def prepare(self, batch: Tensor) -> Optional[object]:
        """What a step needs that does not depend on the parameters (a sample and its feature
        rows), so the worker can build it while the previous step's all-reduce runs; None when
        the strategy has nothing to prefetch. Its own random stream, so the order is free."""
        return None

    @abstractmethod
    def contribute(self, batch: Tensor, wbar: float, prepared: Optional[object] = None) -> Contribution:
        """This worker's part of one step for the seeds in `batch` (local ids); `prepared` is
        prepare(batch)'s result when the worker prefetched it."""
