"""`open_dataset`: any dataset setting as a GraphSource, the one thing `grappa prepare` reads.

The streaming sources (rmat, OGB, arrays) come from grappa.data.sources; the small in-memory datasets
(built-ins, csbm, file) are loaded whole here and wrapped. Imports run one way: data -> sources.
"""
from __future__ import annotations

from grappa.config import BUILTIN_DATASETS, DatasetConfig
from grappa.data.sources import GraphSource, open_source


def open_dataset(cfg: DatasetConfig, progress: bool = True, need_labels: bool = True) -> GraphSource:
    """`need_labels=False` (inference): a user's graph may come without labels or splits."""
    if cfg.name in BUILTIN_DATASETS + ("csbm", "file"):
        from grappa.data.datasets.loader import load_dataset
        from grappa.data.sources.in_memory import from_data
        return from_data(cfg.name, load_dataset(cfg))
    return open_source(cfg, progress=progress, need_labels=need_labels)
