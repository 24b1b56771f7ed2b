"""The step's all-reduce (runtime/exchange.py): exact byte counts, the same training as the previous
star, replicas checked, and failures that end the group naming the rank."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from grappa.config import TrainConfig, dump_config
from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
from grappa.runtime.exchange import StepOutcome
from grappa.runtime.local_job import LocalJob
from grappa.runtime.simulation import Simulation
from grappa.runtime.transport import ring_allreduce_bytes

from previous_exchange import star_step
from small_jobs import csbm_job

REPO = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent / "faults"
# Stated tolerance: after 4 epochs the ring's parameters differ from the star's by at most this
# relative L2 norm (the sums differ in the last float32 bits; Adam carries them along).
REL_TOL = 1e-4


def job(tmp_path: Path, **overrides) -> TrainConfig:
    return csbm_job(tmp_path, **{"training.epochs": 4, "checkpoint.interval": 1, **overrides})


@pytest.mark.parametrize("ranks", [2, 3, 5, 9, 65])
@pytest.mark.parametrize("nbytes", [4, 20, 4 * 1003, 8_754_196, 3 * (1 << 20) + 8])
def test_ring_volume_is_gloos_segmenting(ranks, nbytes):
    per_rank = [ring_allreduce_bytes(nbytes, 4, ranks, r) for r in range(ranks)]
    # every byte one rank sends another receives; reduce-scatter + all-gather each move N (M-1)/M
    assert sum(s for s, _ in per_rank) == sum(r for _, r in per_rank) == 2 * (ranks - 1) * nbytes
    busiest = max(s + r for s, r in per_rank)
    assert busiest <= 4 * nbytes + 4 * 4 * ranks  # 4 G per link whatever P, up to segment rounding


class StarSimulation(Simulation):
    """The same run with the previous design's reduction (stack, sum, reduce at the aggregator)."""

    def reduce(self, contributions: list) -> StepOutcome:
        star_step(self.model, self.optimizer, contributions, self.n_params, self.n_buf)
        return StepOutcome(sum(float(c.seeds) for c, _ in contributions if c is not None),
                           sum(c.loss_sum for c, _ in contributions if c is not None))


def flat(state: dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1).float() for v in state.values() if v.is_floating_point()])


@pytest.mark.parametrize("partitions,arch,mode", [(2, "sage", "full-graph"), (4, "gin", "mini-batch")])
def test_ring_trains_the_parameters_of_the_previous_star(tmp_path, partitions, arch, mode):
    cfg = job(tmp_path, **{"partitions": partitions, "model.arch": arch, "training.mode": mode,
                           "training.batchSize": 60, "grappa.rounds.every": 2,
                           "grappa.correction": "node", "training.evalMode": "exact"})
    LocalJob(cfg, progress=False).run()
    ring = flat(load_checkpoint(latest_checkpoint(Path(cfg.run_dir)))["model"])
    star = StarSimulation(cfg)
    star.run()
    reference = flat(star.model.state_dict())
    rel = float((ring - reference).norm() / reference.norm())
    assert rel <= REL_TOL, f"relative L2 difference {rel:.2e} over {REL_TOL:.0e}"


def launch(cfg: TrainConfig, tmp_path: Path, env: dict) -> subprocess.Popen:
    config = tmp_path / "job.json"
    config.write_text(dump_config(cfg))
    return subprocess.Popen(
        [sys.executable, "-m", "grappa", "train", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": f"{FAULTS}:{REPO}/trainer:{REPO}/operator", **env})


def test_a_diverged_replica_fails_the_job_naming_it(tmp_path):
    cfg = job(tmp_path, **{"partitions": 3, "training.epochs": 3})
    # worker 1 (rank 2) nudges a parameter after its second step: epoch 2 in full-graph mode
    out, _ = launch(cfg, tmp_path, {"GRAPPA_TEST_DIVERGE_RANK": "2"}).communicate(timeout=300)
    agg_log = (Path(cfg.run_dir) / "logs" / "rank-0.log").read_text()
    assert "replica check after epoch 2: worker 1 (rank 2)" in agg_log, out + agg_log
    assert "worker 0 (rank 1)" not in agg_log.split("replica check after epoch 2:")[1].splitlines()[0]
    epochs = [json.loads(x)["epoch"] for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()
              if "event" not in json.loads(x)]
    assert epochs == [1]  # nothing trained on the diverged replica was recorded


def spawned(cfg: TrainConfig, monkeypatch, timeout_s: str) -> LocalJob:
    """The ranks as pods run them: no launcher watching, so the group itself must end."""
    monkeypatch.setenv("GRAPPA_COLLECTIVE_TIMEOUT_SECONDS", timeout_s)
    ranks = LocalJob(cfg, progress=False)
    ranks.spawn()
    metrics = Path(cfg.run_dir) / "metrics.jsonl"
    deadline = time.monotonic() + 180  # hang guard
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert all(p.poll() is None for p in ranks.procs), "a rank ended before training"
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.1)
    return ranks


def ended(ranks: LocalJob, which: list[int], guard_s: float) -> str:
    """Wait for these ranks' processes to end by themselves; the first one's log."""
    try:
        for r in which:
            ranks.procs[r].wait(timeout=guard_s)  # a hang guard, not a measurement
    finally:
        ranks.stop_all(grace=5)
    return (ranks.log_dir / f"rank-{which[0]}.log").read_text()


def endless(tmp_path: Path) -> TrainConfig:
    return job(tmp_path, **{"partitions": 3, "training.epochs": 10_000, "checkpoint.interval": 0,
                            "training.mode": "mini-batch", "training.batchSize": 16})


def test_a_killed_rank_ends_the_group_named_well_inside_the_timeout(tmp_path, monkeypatch):
    ranks = spawned(endless(tmp_path), monkeypatch, "600")
    ranks.procs[3].kill()  # mid-epoch: the others are in, or about to join, a step
    # every survivor ends by itself, whoever its ring neighbours were, far inside the 600 s timeout
    log = ended(ranks, [0, 1, 2], guard_s=120)
    assert ranks.procs[0].returncode not in (0, None)
    assert "worker 2 (rank 3) stopped answering" in log, log


def test_a_frozen_rank_is_named_when_the_timeout_ends_the_collective(tmp_path, monkeypatch):
    """SIGSTOP keeps the sockets open, so only the group's timeout ends the wait; the heartbeat
    names the frozen rank instead of gloo's 'timed out' on a socket."""
    ranks = spawned(endless(tmp_path), monkeypatch, "15")
    ranks.procs[1].send_signal(signal.SIGSTOP)
    try:
        log = ended(ranks, [0], guard_s=150)  # gloo's default would be 30 minutes
    finally:
        ranks.procs[1].kill()
    assert "worker 0 (rank 1) stopped answering" in log, log
