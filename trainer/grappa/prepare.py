"""`grappa prepare`: stream the dataset into the chunk store, once per (dataset, K, seed)."""
from __future__ import annotations

import json

from .chunks import is_prepared, prepare, read_manifest
from .config import TrainConfig


def store_source(cfg: TrainConfig) -> dict:
    """What identifies the store's content: the dataset settings (not where they live)."""
    d = json.loads(cfg.dataset.model_dump_json())
    d.pop("root", None)
    d.pop("download", None)
    return d


def prepare_store(cfg: TrainConfig, progress: bool = True) -> dict:
    source_id = store_source(cfg)
    store = cfg.store_path
    if is_prepared(store, source_id, cfg.num_chunks, cfg.grappa.partition_seed):
        return read_manifest(store)
    from .data.open import open_dataset
    source = open_dataset(cfg.dataset, progress=progress)
    return prepare(source, store, cfg.num_chunks, cfg.grappa.partition_seed, source_id,
                   feature_dtype=cfg.dataset.feature_dtype, block_edges=cfg.prepare.block_edges,
                   workers=cfg.prepare.workers, progress=progress)
