"""Repartition rounds: who decides when the variable chunk moves, and where it moves to.

The aggregator asks a round source (runtime/job_progress.RoundSource) at every epoch boundary which
round applies and broadcasts the answer, so all workers switch together. Locally the schedule
comes from the config (`ScheduleRounds`); in Kubernetes the operator decides (with this module's
`round_seed` and `plateaued`) and records it in the job's status (runtime/kube_status.py).
Torch-free: the operator imports it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional, Protocol

from grappa.config import RoundsConfig


@dataclass(frozen=True)
class RoundDecision:
    round: int
    pairing_seed: int
    effective_epoch: int


class History(Protocol):
    """What a schedule reads of the job's progress (runtime/job_progress.Progress has it)."""

    val_history: list  # (epoch, val_acc) pairs of the evaluations so far


def round_seed(partition_seed: int, round_index: int) -> int:
    # Deterministic per round, so an operator and a local run agree on the pairing.
    return (partition_seed * 1_000_003 + round_index * 7919) % (2**31 - 1)


def plateaued(val_history: list, since_epoch: int, patience: int, min_delta: float) -> bool:
    """True when the last `patience` evaluations since `since_epoch` did not beat the best before them."""
    vals = [v for e, v in val_history if e >= since_epoch and v is not None]
    if len(vals) <= patience:
        return False
    best_before = max(vals[:-patience])
    return max(vals[-patience:]) < best_before + min_delta


class ScheduleRounds:
    """Rounds from the config: every R epochs, optionally also on a validation plateau."""

    def __init__(self, cfg: RoundsConfig, partition_seed: int):
        self.cfg = cfg
        self.partition_seed = partition_seed

    def decide(self, next_epoch: int, progress: History, current: RoundDecision) -> RoundDecision:
        due = self.cfg.every > 0 and next_epoch - current.effective_epoch >= self.cfg.every
        p = self.cfg.plateau
        if not due and p is not None:
            due = plateaued(progress.val_history, current.effective_epoch, p.patience, p.min_delta)
        if not due:
            return current
        t = current.round + 1
        return RoundDecision(t, round_seed(self.partition_seed, t), next_epoch)


def variable_chunk(rank: int, num_workers: int, num_chunks: int, decision: RoundDecision,
                   pairing: str) -> Optional[int]:
    """The variable chunk of worker `rank` (0-based) in a round, or None when there is none.

    Worker r's base chunks are {k : k mod P == r}. Sweep: the non-base chunks in order
    (r+1, r+2, ...) mod K, one step per round, as the reference does. Random: a seeded draw
    per round of one offset shared by all workers, so (with K = P) no two workers hold the same
    variable chunk.
    """
    candidates = [(rank + k) % num_chunks for k in range(1, num_chunks)]
    candidates = [c for c in candidates if c % num_workers != rank]
    if not candidates:
        return None
    if pairing == "sweep":
        return candidates[decision.round % len(candidates)]
    offset = random.Random(decision.pairing_seed).randrange(num_chunks - 1)
    return candidates[offset % len(candidates)]
