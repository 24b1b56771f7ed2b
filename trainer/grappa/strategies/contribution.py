"""One worker's contribution to a step, as a pure function (the worker sends it; tests and the
gradient-fidelity harness call it directly): the gradient of sum_v w_v l_v and sum_v w_v, the
losses l_v from the task, the weights w_v from the reducer (strategies/grappa/reducer.py;
correction "none" gives every strategy's unit weights). For link prediction the examples are
positive edges, each with its negatives, and its loss and coverage come from
tasks/link_prediction.py (`link_contribution`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from grappa.data.blocks import Block
from grappa.models import GNN
from grappa.models.params import flat_grads
from grappa.strategies.grappa.reducer import seed_weights, weighted_loss_sum
from grappa.tasks import link_prediction as lp
from grappa.tasks.node_classification import num_correct, seed_losses


@dataclass
class Contribution:
    grad_sum: Tensor  # gradient of sum_v w_v l_v
    weight_sum: float
    loss_sum: float  # unweighted, for reporting
    correct: int
    seeds: int
    mean_weight: float


def contribution(model: GNN, x: Tensor, blocks: list[Block], cov: Tensor, y: Tensor,
                 correction: str, lam: float, wbar: float) -> Contribution:
    """For blocks whose last layer computes exactly the seeds, in order (blocks.seed_blocks)."""
    return contribution_from(model, lambda: model(x, blocks), torch.arange(y.numel()), cov, y,
                             correction, lam, wbar)


def contribution_from(model: GNN, forward: Callable[[], Tensor], seeds_local: Tensor, cov: Tensor,
                      y: Tensor, correction: str, lam: float, wbar: float) -> Contribution:
    """`forward()` gives the logits the seeds index into (the full baseline fetches rows inside
    it, so it must run, and be differentiated, even with no seeds)."""
    model.train()
    model.zero_grad(set_to_none=True)
    out = forward()[seeds_local]
    losses = seed_losses(out, y)
    weights = seed_weights(cov, correction, lam, wbar)
    loss, wsum = weighted_loss_sum(losses, weights)
    loss.backward()
    return Contribution(
        grad_sum=flat_grads(model), weight_sum=wsum, loss_sum=float(losses.detach().sum()),
        correct=num_correct(out, y), seeds=int(y.numel()),
        mean_weight=float(weights.mean()) if weights.numel() else 0.0)


def link_contribution(model: GNN, forward: Callable[[], Tensor], pos: Tensor, neg: Tensor,
                      cov_e: Tensor, correction: str, lam: float, wbar: float) -> Contribution:
    """Link prediction: `forward()` gives the embeddings that `pos` [2, E] (the positives) and
    `neg` [E, k] (their negatives' destinations) index into; the examples are the positives,
    their losses l_e and coverages c_e the task's (tasks/link_prediction.py)."""
    model.train()
    model.zero_grad(set_to_none=True)
    emb = forward()
    p, n = lp.pair_scores(model.decoder, emb, pos, neg)
    losses = lp.example_losses(p, n)
    weights = seed_weights(cov_e, correction, lam, wbar)
    loss, wsum = weighted_loss_sum(losses, weights)
    loss.backward()
    return Contribution(
        grad_sum=flat_grads(model), weight_sum=wsum, loss_sum=float(losses.detach().sum()),
        correct=lp.num_ranked_first(p.detach(), n.detach()), seeds=int(pos.shape[1]),
        mean_weight=float(weights.mean()) if weights.numel() else 0.0)
