"""Operator metrics (`grappa_operator_*`), served by prometheus-client on their own port.

Per-job gauges are computed at scrape time from a small cache of the last status seen, so a
deleted job's series disappear with it. Every metric is documented in docs/metrics.md.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from .api import PHASES

disable_created_metrics()  # no *_created series: half the scrape for nothing
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

JOBS_CREATED = Counter("grappa_operator_jobs_created", "GrappaJobs accepted (first reconcile).",
                       registry=REGISTRY)
JOBS_SUCCEEDED = Counter("grappa_operator_jobs_succeeded", "GrappaJobs that reached Succeeded.",
                         registry=REGISTRY)
JOBS_FAILED = Counter("grappa_operator_jobs_failed", "GrappaJobs that reached Failed, by reason.",
                      ["reason"], registry=REGISTRY)
JOB_RESTARTS = Counter("grappa_operator_job_restarts", "Whole-group restarts, by reason.",
                       ["reason"], registry=REGISTRY)
DISRUPTIONS = Counter("grappa_operator_disruptions", "Jobs stopped by no fault of their own and resumed "
                      "from their checkpoint: Kueue evictions and Kubernetes pod disruptions, by source "
                      "(Kueue, Kubernetes) and reason.", ["source", "reason"], registry=REGISTRY)
ROUNDS = Counter("grappa_operator_rounds", "Repartition rounds decided, by trigger (every, plateau).",
                 ["reason"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram(
    "grappa_operator_reconcile_duration_seconds", "Duration of one reconcile, by trigger.",
    ["handler"], registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
RECONCILE_ERRORS = Counter("grappa_operator_reconcile_errors", "Reconciles that raised, by trigger.",
                           ["handler"], registry=REGISTRY)
LEADER = Gauge("grappa_operator_leader", "1 on the replica that holds the leader lease (or runs "
               "without election), 0 on a follower.", registry=REGISTRY)
TIME_TO_RUNNING = Histogram(
    "grappa_operator_time_to_running_seconds", "From GrappaJob creation to all pods Running.",
    registry=REGISTRY, buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600))

HANDLERS = ("job", "pod", "resync")
for _h in HANDLERS:  # series exist from the start, so rate() and dashboards have data
    RECONCILE_ERRORS.labels(_h)
for _r in ("every", "plateau"):
    ROUNDS.labels(_r)
DISRUPTIONS.labels("Kueue", "Preempted")
JOB_RESTARTS.labels("PodFailed")
JOB_RESTARTS.labels("PodDeleted")
for _r in ("BackoffLimitExceeded", "InvalidConfig", "CannotRun", "DeadlineExceeded", "PodPendingTimeout",
           "InvalidSpec", "TooManyPartitions"):
    JOBS_FAILED.labels(_r)

# status.progress fields (written by the aggregator) exported per job, so the training dashboard
# works from the API server alone: metric suffix -> progress key
PROGRESS_GAUGES = {
    "loss": ("loss", "Training loss of the last epoch (status.progress.loss)."),
    "val_accuracy": ("valAcc", "Validation accuracy (status.progress.valAcc)."),
    "test_accuracy": ("testAcc", "Test accuracy (status.progress.testAcc)."),
    "val_mrr": ("valMrr", "Task link-prediction: validation MRR (status.progress.valMrr)."),
    "test_mrr": ("testMrr", "Task link-prediction: test MRR (status.progress.testMrr)."),
    "epoch_seconds": ("epochSeconds", "Wall time of the last epoch (status.progress.epochSeconds)."),
    "applied_round": ("round", "Repartition round the aggregator applies (status.progress.round)."),
}


@dataclass(frozen=True)
class JobSnapshot:
    phase: str
    reason: str
    restarts: int
    round: Optional[int]
    epoch: Optional[int]
    progress: dict[str, Any]


class JobCache:
    """Last status seen per job; feeds the scrape-time gauges."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], JobSnapshot] = {}
        self._lock = threading.Lock()

    def update(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        rounds = status.get("rounds") or {}
        progress = status.get("progress") or {}
        snap = JobSnapshot(str(status.get("phase") or "Pending"), str(status.get("reason") or ""),
                           int(status.get("restarts") or 0), rounds.get("current"), progress.get("epoch"),
                           dict(progress))
        with self._lock:
            self._jobs[(namespace, name)] = snap

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._jobs)

    def items(self) -> list[tuple[tuple[str, str], JobSnapshot]]:
        with self._lock:
            return list(self._jobs.items())


class JobCollector:
    def __init__(self, cache: JobCache):
        self.cache = cache

    def collect(self) -> Iterable[Metric]:
        items = self.cache.items()
        by_phase = GaugeMetricFamily("grappa_operator_jobs", "GrappaJobs by phase.", labels=["phase"])
        counts = {p: 0 for p in PHASES}
        info = GaugeMetricFamily("grappa_operator_job_phase",
                                 "1 for the current phase of each job, with the reason.",
                                 labels=["namespace", "job", "phase", "reason"])
        restarts = GaugeMetricFamily("grappa_operator_job_restarts_current",
                                     "Group restarts of each job so far.", labels=["namespace", "job"])
        rnd = GaugeMetricFamily("grappa_operator_job_round",
                                "Latest repartition round decided for each job.", labels=["namespace", "job"])
        epoch = GaugeMetricFamily("grappa_operator_job_epoch",
                                  "Epochs completed as reported by the job's aggregator.",
                                  labels=["namespace", "job"])
        prog = {suffix: GaugeMetricFamily(f"grappa_operator_job_{suffix}", doc, labels=["namespace", "job"])
                for suffix, (_, doc) in PROGRESS_GAUGES.items()}
        traffic = GaugeMetricFamily("grappa_operator_job_bytes_per_epoch",
                                    "Payload bytes per epoch by kind (status.progress.*BytesPerEpoch).",
                                    labels=["namespace", "job", "kind"])
        for (ns, name), snap in items:
            for suffix, (key, _) in PROGRESS_GAUGES.items():
                value = snap.progress.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    prog[suffix].add_metric([ns, name], value)
            for kind in ("train", "eval"):
                value = snap.progress.get(f"{kind}BytesPerEpoch")
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    traffic.add_metric([ns, name, kind], value)
            counts[snap.phase] = counts.get(snap.phase, 0) + 1
            info.add_metric([ns, name, snap.phase, snap.reason], 1)
            restarts.add_metric([ns, name], snap.restarts)
            if snap.round is not None:
                rnd.add_metric([ns, name], snap.round)
            if snap.epoch is not None:
                epoch.add_metric([ns, name], snap.epoch)
        for phase, n in counts.items():
            by_phase.add_metric([phase], n)
        return [by_phase, info, restarts, rnd, epoch, traffic, *prog.values()]


CACHE = JobCache()
REGISTRY.register(JobCollector(CACHE))


def serve(address: str, port: int) -> None:
    if port:
        start_http_server(port, addr=address, registry=REGISTRY)
