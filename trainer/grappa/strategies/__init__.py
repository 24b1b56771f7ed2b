"""Training strategies, one module each behind one interface (base.py):

| strategy | module | per step on the wire |
|---|---|---|
| grappa | grappa.py | the gradient up, parameters down |
| full | full.py | + halo features and activations, their gradients back |
| varco | varco.py | as full, activations compressed |
| retexo | retexo.py | the gradient up, parameters down (halo rows once per stage) |
"""
from __future__ import annotations

import importlib

from grappa.strategies.base import RoundStats, Strategy, epoch_seed

# name -> (module, worker-side class); the module may also define the process loops it needs
_REGISTRY = {
    "grappa": ("grappa", "GrappaStrategy"),
    "full": ("full", "FullStrategy"),
    "varco": ("varco", "VarcoStrategy"),
    "retexo": ("retexo", "RetexoStrategy"),
}


def strategy_module(name: str):
    return importlib.import_module(f"{__name__}.{_REGISTRY[name][0]}")


def strategy_class(name: str) -> type[Strategy]:
    return getattr(strategy_module(name), _REGISTRY[name][1])


def make_strategy(cfg, rank: int, store, model, peers=None) -> Strategy:
    """The worker-side strategy object of `cfg.strategy` for worker `rank` (1..P)."""
    return strategy_class(cfg.strategy)(cfg, rank, store, model, peers)


__all__ = ["Strategy", "RoundStats", "epoch_seed", "make_strategy", "strategy_class", "strategy_module"]
