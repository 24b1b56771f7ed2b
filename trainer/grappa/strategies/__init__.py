"""Strategies: how each worker makes its part of a step's gradient, one per module, behind one
interface (`base.Strategy`: per round a local graph, per step a `Contribution`).

| strategy | where | per step on the wire |
|---|---|---|
| grappa | `grappa/`: `strategy.py`, and the method's pieces `reducer.py` (the coverage-corrected reducer), `coverage.py`, `rounds.py` (repartition rounds), `fidelity.py` (gradient error vs the exact one) | the gradient's all-reduce, nothing else |
| full | `full/`: `strategy.py`, and its engine `halo_exchange.py` (rows fetched from their owners, gradients sent back) | + halo features and every hidden activation, their gradients back |
| varco | `varco.py` (full's engine, activations compressed) | as full, compressed |
| retexo | `retexo.py` (trained stage by stage: the runtime's `stages.py` drives it) | the gradient's all-reduce; halo rows once per stage |

`contribution.py` is what every strategy returns per step: the gradient of sum_v w_v l_v (losses
from the task, weights from the reducer) and sum_v w_v.

May import: `grappa.config`, `grappa.util`, `grappa.data`, `grappa.models`, `grappa.tasks`.
Importing this package is torch-free, because the operator imports `grappa.strategies.grappa.rounds`:
the registry imports a strategy's module only when asked. A new strategy is one module (or
package) here and one line in `_REGISTRY`.
"""
from __future__ import annotations

import importlib

# name -> (module under this package, worker-side class)
_REGISTRY = {
    "grappa": ("grappa.strategy", "GrappaStrategy"),
    "full": ("full.strategy", "FullStrategy"),
    "varco": ("varco", "VarcoStrategy"),
    "retexo": ("retexo", "RetexoStrategy"),
}


def strategy_class(name: str):
    """The worker-side class of strategy `name` (a `base.Strategy`)."""
    module, cls = _REGISTRY[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def make_strategy(cfg, rank: int, store, model, peers=None):
    """The worker-side strategy object of `cfg.strategy` for worker `rank` (1..P)."""
    return strategy_class(cfg.strategy)(cfg, rank, store, model, peers)
