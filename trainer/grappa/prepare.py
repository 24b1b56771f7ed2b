"""`grappa prepare`: load the dataset and write the chunk store, once per (dataset, K, seed)."""
from __future__ import annotations

import json

from .chunks import is_prepared, prepare
from .config import TrainConfig


def store_source(cfg: TrainConfig) -> dict:
    """What identifies the store's content: the dataset settings (not where they live)."""
    d = json.loads(cfg.dataset.model_dump_json())
    d.pop("root", None)
    d.pop("download", None)
    return d


def prepare_store(cfg: TrainConfig, progress: bool = True) -> dict:
    source = store_source(cfg)
    store = cfg.store_path
    if is_prepared(store, source, cfg.num_chunks, cfg.grappa.partition_seed):
        return json.loads((store / "manifest.json").read_text())
    from .data import load_dataset
    data = load_dataset(cfg.dataset)
    return prepare(data, store, cfg.num_chunks, cfg.grappa.partition_seed, source, progress=progress)
