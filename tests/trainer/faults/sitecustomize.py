"""Fault injection for tests/trainer/test_exchange.py, loaded by every trainer process started with
this folder first on PYTHONPATH (Python imports `sitecustomize` at start-up). It changes nothing
unless GRAPPA_TEST_DIVERGE_RANK names this process's RANK: that rank then nudges one parameter
after its first step of epoch 2, as a corrupted replica would."""
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
