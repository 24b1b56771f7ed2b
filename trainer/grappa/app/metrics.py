"""Prometheus metrics of the trainer (`grappa_trainer_*`), one registry per process.

Every series carries `rank` (0 = aggregator) and `job` (the GrappaJob name, or "local").
"""
from __future__ import annotations

import os
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# How the accuracy gauges were measured: either way, as training.evalMode decides (report.json's
# `evaluation` says which a run used).
MEASURED = "exact (every neighbour) or sampled (a share of nodes, sampled neighbourhoods): training.evalMode."


class TrainerMetrics:
    def __init__(self, rank: int, job: str = "local"):
        self.registry = CollectorRegistry()
        labels = {"rank": str(rank), "job": job}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"grappa_trainer_{name}", doc, list(labels), registry=self.registry).labels(**labels)

        self.loss = gauge("loss", "Mean training loss over the last epoch's seeds.")
        self.train_acc = gauge("train_accuracy", f"Training accuracy at the last evaluation, {MEASURED}")
        self.val_acc = gauge("val_accuracy", f"Validation accuracy at the last evaluation, {MEASURED}")
        self.test_acc = gauge("test_accuracy", f"Test accuracy at the last evaluation, {MEASURED}")
        self.best_val = gauge("best_val_accuracy", "Best validation accuracy so far (link prediction: "
                              "best validation MRR).")
        # link prediction (tasks/link_prediction.py: OGB's evaluators), at the last evaluation
        self.val_mrr = gauge("val_mrr", "Validation MRR (each positive against its own negatives).")
        self.test_mrr = gauge("test_mrr", "Test MRR (each positive against its own negatives).")
        self.test_hits50 = gauge("test_hits_at_50", "Test Hits@50 (against the shared negatives).")
        self.test_auc = gauge("test_auc", "Test AUC (positives against the shared negatives).")
        self.epoch = gauge("epoch", "Epochs completed.")
        self.epochs_total = gauge("epochs_total", "Epochs the job will run.")
        self.round = gauge("round", "Current repartition round.")
        self.epoch_seconds = gauge("epoch_seconds", "Wall time of the last epoch.")
        self.coverage_mean = gauge("coverage_mean", "Mean seed coverage in the current round.")
        self.weight_mean = gauge("weight_mean", "Mean reducer weight of the last step's seeds.")
        self.peak_rss = gauge("peak_rss_bytes", "Peak resident memory of this rank (VmHWM).")
        self.peak_pss = gauge("peak_pss_bytes", "Peak proportional memory of this rank: shared pages "
                              "(memory-mapped store, libraries) divided among the processes mapping them.")
        self._cgroup = Gauge(
            "grappa_trainer_cgroup_memory_bytes", "This rank's memory cgroup, page cache included (in a pod the "
            "container's, what its memory limit is enforced on; outside a container the session's), by kind: "
            "peak (usage), working_set_peak (usage less inactive file pages, kubelet's figure), cache_peak.",
            list(labels) + ["kind"], registry=self.registry)
        self.step_seconds = Histogram(
            "grappa_trainer_step_seconds", "Wall time of one training step.", list(labels),
            buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self._bytes = {
            d: Counter(f"grappa_trainer_bytes_{d}", f"Payload bytes {d} by this rank, by traffic kind.",
                       list(labels) + ["kind"], registry=self.registry)
            for d in ("sent", "received")
        }
        self._published: dict[tuple[str, str], int] = {}
        self._labels = labels
        # Chunk-store reads (workers): every byte read, across rounds, and this round's so far.
        self._store_total = Counter(
            "grappa_trainer_store_read_bytes", "Bytes this worker read from the chunk store, every read "
            "counted, by kind: verify (whole files checked against their sha256, once per process), "
            "structure (its local graph's build), own_features, halo_features.",
            list(labels) + ["kind"], registry=self.registry)
        self._store_round = Gauge(
            "grappa_trainer_store_round_read_bytes", "Bytes this worker read from the chunk store in "
            "the current round so far, every read counted, by kind.",
            list(labels) + ["kind"], registry=self.registry)
        self._store_round_distinct = Gauge(
            "grappa_trainer_store_round_distinct_bytes", "Bytes of the distinct store rows and arrays "
            "this worker read in the current round so far (what a fetch of them would move), by kind.",
            list(labels) + ["kind"], registry=self.registry)
        # storage.fetch: what the rounds' data cost from the store, and what the local copy holds
        self._fetched = Counter(
            "grappa_trainer_store_fetched_bytes", "Bytes this worker fetched from the chunk store into "
            "worker-local storage for its rounds (storage.fetch), counted at each epoch report (a mini-batch "
            "round's halo rows are fetched as its steps first read them).",
            list(labels), registry=self.registry).labels(**labels)
        self._fetch_held = Gauge(
            "grappa_trainer_fetch_held_bytes", "What the fetched round data holds, by kind: local_disk "
            "(the worker-local folder), prefetch_disk (of it, the next round's), prefetch_memory (the "
            "background fetch's peak buffers in this round, or the next round's local graph it built); the prefetch kinds at least what a fetch ahead "
            "held when it completed since the last epoch report.", list(labels) + ["kind"], registry=self.registry)
        self._store_seen: tuple[int, dict[str, int]] = (0, {})

    def observe_bytes(self, counter) -> None:
        # The transport owns the totals; publish only what grew since the last call.
        for direction, totals in (("sent", counter.sent), ("received", counter.received)):
            for kind, total in totals.items():
                delta = total - self._published.get((direction, kind), 0)
                if delta > 0:
                    self._bytes[direction].labels(**self._labels, kind=kind).inc(delta)
                    self._published[(direction, kind)] = total

    def observe_memory(self, memory) -> None:
        """A PeakMemory's figures (util/process_memory.py): peak RSS, PSS and the cgroup's peaks."""
        self.peak_rss.set(memory.peak_rss)
        self.peak_pss.set(memory.peak_pss)
        c = memory.cgroup
        for kind, value in (("peak", c.usage), ("working_set_peak", c.working_set), ("cache_peak", c.cache)):
            self._cgroup.labels(**self._labels, kind=kind).set(value)

    def observe_store_reads(self, round_serial: int, reads: dict[str, int]) -> None:
        """`reads`: LocalGraph.store_reads() of the round `round_serial` (FeatureRows.serial);
        counts start from zero in every round, the counter keeps growing across rounds."""
        serial, before = self._store_seen
        if serial != round_serial:
            before = {}
        for kind in ("verify", "structure", "own_features", "halo_features"):
            grown = reads[kind] - before.get(kind, 0)
            if grown > 0:
                self._store_total.labels(**self._labels, kind=kind).inc(grown)
            self._store_round.labels(**self._labels, kind=kind).set(reads[kind])
            self._store_round_distinct.labels(**self._labels, kind=kind).set(reads[f"{kind}_distinct"])
        grown = reads.get("fetched", 0) - before.get("fetched", 0)
        if grown > 0:
            self._fetched.inc(grown)
        for kind in ("local_disk", "prefetch_disk", "prefetch_memory"):
            self._fetch_held.labels(**self._labels, kind=kind).set(reads.get(kind, 0))
        self._store_seen = (round_serial, dict(reads))

    def serve(self, port: int, addr: Optional[str] = None) -> None:
        # All interfaces by default, not $POD_IP: `kubectl port-forward` reaches the pod on 127.0.0.1.
        addr = addr or os.environ.get("GRAPPA_BIND_ADDRESS", "").strip() or "0.0.0.0"
        start_http_server(port, addr=addr, registry=self.registry)


def metrics_port_for(base_port: int, rank: int) -> int:
    """Pods have their own IP and share one port; local processes share a host and offset by rank."""
    if base_port == 0:
        return 0
    return base_port if os.environ.get("POD_IP") else base_port + rank
