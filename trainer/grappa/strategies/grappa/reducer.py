"""The coverage-corrected gradient reducer (method doc §4).

Each worker p contributes the gradient of sum_{v in B_p} w~_v l_v and the weight sum sum_v w~_v;
the step's all-reduce (runtime/exchange.py) sums both over the workers and every rank applies
G = sum_p grad_p / sum_p weight_p, self-normalised by the weights, not by P.

- none:  w~_v = 1 (the unweighted, seed-count-weighted mean, "UW")
- node:  w~_v = lambda c_v + (1 - lambda) wbar
- batch: one scalar per worker batch, w~_p = lambda mean_{v in B_p} c_v + (1 - lambda) wbar

wbar is the mean coverage over all seeds of the round, across workers. Coverage is fixed within a
round, so wbar is computed once per round rather than once per step; in full-graph mode the step's
contributions are all seeds, so it is exactly the mean over the step.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def seed_weights(cov: Tensor, correction: str, lam: float, wbar: float) -> Tensor:
    """Per-seed weights w~_v for one worker batch."""
    if correction == "none" or cov.numel() == 0:
        return torch.ones_like(cov)
    if correction == "node":
        return lam * cov + (1.0 - lam) * wbar
    if correction == "batch":
        return torch.full_like(cov, lam * float(cov.mean()) + (1.0 - lam) * wbar)
    raise ValueError(f"grappa.correction must be none, batch or node, not {correction!r}")


def weighted_loss_sum(per_seed_loss: Tensor, weights: Tensor) -> tuple[Tensor, float]:
    """The worker's contribution: (sum_v w_v l_v, sum_v w_v)."""
    w = weights.to(per_seed_loss.dtype)
    return (w * per_seed_loss).sum(), float(weights.sum())


def normalise(grad_total: Tensor, weight_total: float) -> Tensor:
    """G from the sums over workers; zero when no worker had a seed this step."""
    return grad_total / weight_total if weight_total > 0 else torch.zeros_like(grad_total)


def combine(grad_sums: Sequence[Tensor], weight_sums: Sequence[float]) -> Tensor:
    """G = sum_p grad_p / sum_p weight_p from the per-worker terms (in-process callers)."""
    return normalise(torch.stack(list(grad_sums)).sum(dim=0), float(sum(weight_sums)))
