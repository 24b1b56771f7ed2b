"""A job's progress as the aggregator publishes it, and the two interfaces it talks through:
where rounds come from (`RoundSource`: the config's schedule locally, the operator's decisions in
Kubernetes) and where progress goes (`ProgressSink`: the job's status, or nowhere). Torch-free:
the operator's tests check the status contract against `Progress`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from grappa.strategies.grappa.rounds import RoundDecision


@dataclass
class Progress:
    """What the aggregator knows at an epoch boundary (feeds plateau triggers and status)."""

    epoch: int = 0  # epochs completed
    epochs_total: int = 0
    round: int = 0
    loss: Optional[float] = None
    train_acc: Optional[float] = None
    val_acc: Optional[float] = None
    test_acc: Optional[float] = None
    # link prediction (tasks/link_prediction.py): ranking metrics at the last evaluation
    val_mrr: Optional[float] = None
    test_mrr: Optional[float] = None
    test_hits50: Optional[float] = None
    test_auc: Optional[float] = None
    best_val: Optional[float] = None  # validation accuracy, or validation MRR for link prediction
    best_epoch: Optional[int] = None
    epoch_seconds: Optional[float] = None
    train_bytes_per_epoch: Optional[int] = None
    eval_bytes_per_epoch: Optional[int] = None
    eta_seconds: Optional[float] = None
    val_history: list = field(default_factory=list)  # (epoch, val_acc or val_mrr)
    final_metrics: dict = field(default_factory=dict)  # link prediction: the best epoch's test_* figures


class RoundSource(Protocol):
    def decide(self, next_epoch: int, progress: Progress, current: RoundDecision) -> RoundDecision:
        """The round that applies to `next_epoch` (returns `current` to stay)."""


class ProgressSink(Protocol):
    def report(self, progress: Progress, final: bool = False) -> None:
        """Publish progress (a Kubernetes status, a log line, nothing)."""


class NullSink:
    def report(self, progress: Progress, final: bool = False) -> None:
        pass
