"""Grappa: gradient-only communication for distributed GNN training.

The rooms, each a package whose docstring says what it holds and what it may import; imports run
one way, down this list (tests/trainer/test_layout.py checks it):

| floor | room | holds |
|---|---|---|
| 7 | `app` | the command line, each process role's wiring, reruns, reports, metrics |
| 6 | `inference` | `grappa predict` / `evaluate` as jobs |
| 5 | `runtime` | ranks, the step's all-reduce, checkpoints, stops, local processes, evaluation during training |
| 4 | `strategies` | how a worker makes its part of a step: Grappa (reducer, coverage, rounds), full, VARCO, RETEXO |
| 3 | `tasks` | a step's loss and an evaluation's metrics: node classification |
| 2 | `models` | the GNNs, their layer-wise pass, the model file |
| 1 | `data` | sources -> chunk store -> local graph -> blocks and sampler -> feature rows |
| 0 | `config`, `util` | the one schema (`TrainConfig`, shared with the operator), plain helpers |

Importing the package is cheap and torch-free (the operator imports `grappa.config`); the Python
API (`grappa.train`, `grappa.predict`, `grappa.evaluate`: app/api.py, docs/api.md) loads on first use.
"""
from grappa.util.version import __version__

__all__ = ["__version__", "train", "predict", "evaluate", "TrainResult", "PredictResult"]
_API = ("train", "predict", "evaluate", "TrainResult", "PredictResult", "make_config")


def __getattr__(name: str):
    if name in _API:
        from grappa.app import api
        return getattr(api, name)
    raise AttributeError(f"module 'grappa' has no attribute {name!r}")
