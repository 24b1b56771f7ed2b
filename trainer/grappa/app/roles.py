"""Process entry points shared by pods and the local launcher.

On SIGTERM (stop.py) the aggregator writes its last completed epoch and exits EXIT_STOPPED; a
worker exits EXIT_STOPPED at once. If the aggregator fails otherwise (a worker died), it still
writes the last completed epoch before the error ends it, so a restart loses no finished epoch.
"""
from __future__ import annotations

import json
import logging
import os
import sys

from grappa.app.metrics import TrainerMetrics, metrics_port_for
from grappa.config import RoundsConfig, TrainConfig
from grappa.runtime import startup
from grappa.runtime.stop import EXIT_STOPPED, SigtermWatch, Stopped

log = logging.getLogger("grappa.entry")


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
    from grappa.app.report import write_report
    from grappa.runtime.aggregator import Aggregator
    from grappa.runtime.transport import Link
    from grappa.strategies.grappa.rounds import ScheduleRounds
    _setup("aggregator")
    if os.environ.get("GRAPPA_JOB_NAME"):
        from grappa.runtime.kube_status import JobStatus
        status = JobStatus.from_env()
        rounds, sink = status, status
    else:
        rounds, sink = ScheduleRounds(cfg.grappa.rounds, cfg.grappa.partition_seed), None
    from grappa.strategies import strategy_class
    if not strategy_class(cfg.strategy).repartitions:
        # Rounds are Grappa's; other strategies keep the partitions fixed whatever is scheduled.
        rounds = ScheduleRounds(RoundsConfig(every=0), cfg.grappa.partition_seed)
    agg = None
    # Installed before the rendezvous, which can itself wait long: a stop then has nothing to save.
    watch = SigtermWatch(lambda: agg is not None and agg.save_last_epoch("SIGTERM")).install()
    link = Link.from_env()
    startup.say(startup.JOINED, ranks=link.world_size)
    try:
        from grappa.runtime.stages import StagedAggregator
        cls = StagedAggregator if strategy_class(cfg.strategy).trains_in_stages else Aggregator
        agg = cls(cfg, link, rounds, sink, metrics=_metrics(cfg, 0))
        agg.stop = watch
        try:
            result = train_or_save(agg, watch)
        except Exception as err:
            tell_group_cannot_run(link, err)
            raise
        write_report(cfg.run_dir, json.loads(cfg.model_dump_json(by_alias=True)), agg.history, result,
                     extra={"parameters": agg.n_params, "workers": cfg.partitions, "command": "train"},
                     cgroup=agg.memory.cgroup.describe())
        agg.upload_results()
        return result
    finally:
        if not watch.requested.is_set():  # a gloo teardown with dying peers takes seconds: skip it
            link.close()


def train_or_save(agg, watch: SigtermWatch) -> dict:
    """agg.run(), or on SIGTERM, or on a failure of the group, the last epoch written first."""
    try:
        return agg.run()
    except BaseException as err:
        stopping = watch.requested.is_set()  # a link error after SIGTERM is the stop, too
        try:
            agg.save_last_epoch("SIGTERM" if stopping else f"stopping on {type(err).__name__}")
        except Exception:
            log.exception("could not save the last epoch; the previous checkpoint is intact")
            raise err
        if stopping:
            raise Stopped() from err
        raise


def _worker_stop() -> None:
    log.warning("SIGTERM: worker exiting (its state is the aggregator's, which checkpoints it)")
    sys.stderr.flush()
    os._exit(EXIT_STOPPED)


def run_worker(cfg: TrainConfig) -> None:
    from grappa.runtime.transport import Link
    from grappa.runtime.worker import Worker

    # A worker keeps nothing worth saving and writes files only by rename: leave at once.
    SigtermWatch(_worker_stop, grace_s=0.0).install()
    link = Link.from_env()
    _setup(f"worker-{link.rank - 1}")
    try:
        from grappa.runtime.stages import StagedWorker
        from grappa.strategies import strategy_class
        cls = StagedWorker if strategy_class(cfg.strategy).trains_in_stages else Worker
        w = cls(cfg, link)
        w.metrics = _metrics(cfg, link.rank)
        w.run()
    except Exception as err:
        tell_group_cannot_run(link, err)
        raise
    finally:
        link.close()


def tell_group_cannot_run(link, err: BaseException) -> None:
    """A permanent error (bad model code, a config that cannot run) ends this rank: say so in the
    group's store first, so the other ranks end with the same code and line (group.PeerCannotRun)
    instead of a group failure that looks worth a restart."""
    from grappa.runtime.exit_codes import permanent_code
    code = permanent_code(err)
    if code is not None and getattr(err, "exit_code", None) is None and link.group is not None:
        link.group.cannot_run(code, str(err).splitlines()[0] if str(err) else type(err).__name__)
