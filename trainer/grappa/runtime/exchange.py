"""One training step's exchange: a single all-reduce among the aggregator and the P workers.

Step message (float32), one per rank, summed by the collective:

    gradient sum (n_params) | float buffers x seeds (n_buf) | weight sum, loss sum, seeds, correct, stop

A worker puts in its contribution (step.py); a worker without a batch this step, and the
aggregator, put in zeros (the aggregator's stop flag aside). Every rank then applies the same
reducer to the same sum, G = sum of gradients / sum of weights (reducer.py), and the same optimizer
step, so every replica, the aggregator's included, holds the same model without parameters ever
travelling; BatchNorm's running statistics become the seed-weighted mean of the workers' copies.

The stop flag folds SIGTERM into the step: when the aggregator has been asked to stop it sets the
flag, every rank sees it in the same sum, nobody applies that step, and all leave the epoch
together (the aggregator then writes its last completed epoch). No extra round trip per step.

Per rank and step the ring moves about 2(M-1)/M x G each way (M = P + 1, G the message bytes):
transport.ring_allreduce_bytes gives the exact figure. The star it replaced put 2 x P x G on the
aggregator's link.

With `training.shardOptimizer` the all-reduce is cut in its two halves and each rank updates only
its 1/M of the model in between (sharded.py); the bytes are the same.

Floating point: the ring adds the P contributions in another order than a stack-and-sum, so the
sum differs in the last bits (measured <= ~1.2e-6 of the largest term, float32). Training the same
seed for a few epochs gives the same parameters to a relative L2 difference below 1e-4 (the tests
state it); P = 1 is exact, the aggregator's zeros adding nothing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from grappa.models.params import flat_state, load_flat_state, num_buffer_values, num_params, set_grads
from grappa.runtime.transport import Link
from grappa.strategies.contribution import Contribution
from grappa.strategies.grappa.reducer import normalise

SCALARS = 5  # weight sum, loss sum, seeds, correct, stop
_WEIGHT, _LOSS, _SEEDS, _CORRECT, _STOP = range(-SCALARS, 0)


@dataclass
class StepOutcome:
    seeds: float = 0.0
    loss_sum: float = 0.0
    correct: float = 0.0
    stopped: bool = False
    apply_seconds: float = 0.0  # the reducer and optimizer, after the sum arrived
    prefetched: object = None  # what `meanwhile` returned


def message_size(model: torch.nn.Module) -> int:
    return num_params(model) + num_buffer_values(model) + SCALARS


def pack(c: Optional[Contribution], model: torch.nn.Module, stop: bool = False,
         buffers: Optional[Tensor] = None) -> Tensor:
    """This rank's share of the step's sum: its contribution, or zeros. `buffers`: the float
    buffers its forward pass left (default: the model's own now)."""
    n_params, n_buf = num_params(model), num_buffer_values(model)
    msg = torch.zeros(n_params + n_buf + SCALARS)
    if c is not None:
        msg[:n_params] = c.grad_sum
        if n_buf and c.seeds:
            own = buffers if buffers is not None else flat_state(model)[n_params:]
            msg[n_params:n_params + n_buf] = own * float(c.seeds)
        msg[_WEIGHT], msg[_LOSS] = c.weight_sum, c.loss_sum
        msg[_SEEDS], msg[_CORRECT] = float(c.seeds), float(c.correct)
    msg[_STOP] = float(stop)
    return msg


def apply_sum(model: torch.nn.Module, optimizer: torch.optim.Optimizer, total: Tensor) -> StepOutcome:
    """Apply the summed step message: the reducer, then the optimizer (identically on every rank)."""
    if float(total[_STOP]) > 0:
        return StepOutcome(stopped=True)
    n_params, n_buf = num_params(model), num_buffer_values(model)
    seeds, weight = float(total[_SEEDS]), float(total[_WEIGHT])
    if n_buf and seeds > 0:
        state = flat_state(model)
        state[n_params:] = total[n_params:n_params + n_buf] / seeds
        load_flat_state(model, state)
    if weight > 0:
        set_grads(model, normalise(total[:n_params], weight))
        optimizer.step()
    return StepOutcome(seeds, float(total[_LOSS]), float(total[_CORRECT]))


class StepExchange:
    """This rank's end of the per-step all-reduce."""

    def __init__(self, link: Link, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.link = link
        self.bind(model, optimizer)

    def bind(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """A new model (RETEXO's next stage) with its optimizer."""
        self.model, self.optimizer = model, optimizer

    def step(self, c: Optional[Contribution], epoch: int, stop: bool = False,
             meanwhile: Optional[Callable[[], object]] = None) -> StepOutcome:
        """`meanwhile()` runs while the sum is in flight (the next batch's sample and feature
        rows: they do not depend on the parameters); its result is `outcome.prefetched`."""
        total, ahead = self.link.all_reduce(pack(c, self.model, stop), "train",
                                            f"the step all-reduce of epoch {epoch + 1}", meanwhile)
        t0 = time.perf_counter()
        out = apply_sum(self.model, self.optimizer, total)
        out.apply_seconds = time.perf_counter() - t0
        out.prefetched = ahead
        return out
