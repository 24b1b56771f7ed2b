"""Fault injection for tests/trainer/test_exchange.py, loaded by every trainer process started with
this folder first on PYTHONPATH (Python imports `sitecustomize` at start-up). It changes nothing
unless GRAPPA_TEST_DIVERGE_RANK names this process's RANK: that rank then nudges one parameter
after its GRAPPA_TEST_DIVERGE_STEP-th step (default 2: epoch 2 in full-graph mode), as a corrupted
replica would."""
import os

_rank = os.environ.get("GRAPPA_TEST_DIVERGE_RANK")
if _rank is not None and _rank == os.environ.get("RANK"):
    import torch

    from grappa.runtime import exchange

    _apply, _steps = exchange.apply_sum, {"n": 0}

    def _diverging_apply(model, optimizer, total):
        out = _apply(model, optimizer, total)
        _steps["n"] += 1
        if _steps["n"] == int(os.environ.get("GRAPPA_TEST_DIVERGE_STEP", "2")):
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-3
        return out

    exchange.apply_sum = _diverging_apply

    # With a sharded optimizer (runtime/sharded.py) the nudge lands on the first parameter of the
    # slice this rank owns: the one whose update only it computes.
    from grappa.models.params import flat_state, load_flat_state
    from grappa.runtime import sharded

    _apply_slice = sharded.ShardedStepExchange.apply

    def _diverging_slice(self, own, epoch):
        out = _apply_slice(self, own, epoch)
        _steps["n"] += 1
        if _steps["n"] == int(os.environ.get("GRAPPA_TEST_DIVERGE_STEP", "2")):
            flat = flat_state(self.model)
            flat[self.param_bounds[self.link.rank][0]] += 1e-3
            load_flat_state(self.model, flat)
        return out

    sharded.ShardedStepExchange.apply = _diverging_slice
