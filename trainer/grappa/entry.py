"""Process entry points shared by pods and the local launcher."""
from __future__ import annotations

import json
import logging
import os

from .config import RoundsConfig, TrainConfig
from .metrics import TrainerMetrics, metrics_port_for


def _metrics(cfg: TrainConfig, rank: int):
    port = metrics_port_for(cfg.metrics_port, rank)
    if not port:
        return None
    m = TrainerMetrics(rank, os.environ.get("GRAPPA_JOB_NAME", "local"))
    m.serve(port)
    m.epochs_total.set(cfg.training.epochs)
    return m


def _setup(role: str) -> None:
    logging.basicConfig(level=os.environ.get("GRAPPA_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s {role} %(levelname)s %(message)s")
    threads = os.environ.get("GRAPPA_THREADS")
    if threads:
        import torch
        torch.set_num_threads(int(threads))


def run_aggregator(cfg: TrainConfig) -> dict:
    from .aggregator import Aggregator
    from .report import write_report
    from .rounds import ScheduleRounds
    from .transport import Link
    _setup("aggregator")
    if os.environ.get("GRAPPA_JOB_NAME"):
        from .kube import JobStatus
        status = JobStatus.from_env()
        rounds, sink = status, status
    else:
        rounds, sink = ScheduleRounds(cfg.grappa.rounds, cfg.grappa.partition_seed), None
    from .strategies import strategy_class
    if not strategy_class(cfg.strategy).repartitions:
        # Rounds are Grappa's; other strategies keep the partitions fixed whatever is scheduled.
        rounds = ScheduleRounds(RoundsConfig(every=0), cfg.grappa.partition_seed)
    link = Link.from_env()
    try:
        from .strategies import strategy_module
        cls = getattr(strategy_module(cfg.strategy), "AGGREGATOR", Aggregator)
        agg = cls(cfg, link, rounds, sink, metrics=_metrics(cfg, 0))
        result = agg.run()
        write_report(cfg.run_dir, json.loads(cfg.model_dump_json(by_alias=True)), agg.history, result,
                     extra={"parameters": agg.n_params, "workers": cfg.partitions})
        return result
    finally:
        link.close()


def run_worker(cfg: TrainConfig) -> None:
    from .transport import Link
    from .worker import Worker
    link = Link.from_env()
    _setup(f"worker-{link.rank - 1}")
    try:
        from .strategies import strategy_module
        cls = getattr(strategy_module(cfg.strategy), "WORKER", Worker)
        w = cls(cfg, link)
        w.metrics = _metrics(cfg, link.rank)
        w.run()
    finally:
        link.close()
