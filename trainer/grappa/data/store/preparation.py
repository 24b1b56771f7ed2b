"""`grappa prepare`: stream the dataset into the chunk store, once per (dataset, K, seed) and per
version of a user's files (fingerprint.py): files changed since are refused, or, when asked,
prepared again into a new store that replaces the old one only once it is complete."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from grappa.config import TrainConfig
from grappa.data.errors import ChunkStoreError
from grappa.data.store import is_prepared, prepare, read_manifest
from grappa.data.store.fingerprint import changes, fingerprint, input_files
from grappa.util.files import ensure_writable, removed_if_left_empty

REPREPARE_FLAG = "--reprepare"


def store_source(cfg: TrainConfig) -> dict:
    """What identifies the store's content: the dataset settings (not where they live)."""
    d = json.loads(cfg.dataset.model_dump_json())
    d.pop("root", None)
    d.pop("download", None)
    return d


def prepare_store(cfg: TrainConfig, progress: bool = True, reprepare: bool = False) -> dict:
    source_id = store_source(cfg)
    store = cfg.store_path
    folder, files = input_files(cfg.dataset)
    prints = fingerprint(folder, files)
    if is_prepared(store, source_id, cfg.num_chunks, cfg.grappa.partition_seed):
        manifest = read_manifest(store)
        changed = changes(manifest.get("source_files"), prints, folder)
        if not changed:
            return manifest
        if not reprepare:
            raise ChunkStoreError(
                f"the chunk store {store} was prepared from other data: " + "; ".join(changed)
                + f". Run again with {REPREPARE_FLAG} to prepare it anew (the old store stays until "
                f"the new one is complete), or delete {store}")
        return _replace(cfg, store, source_id, prints, progress)
    return _prepare(cfg, store, source_id, prints, progress)


def _prepare(cfg: TrainConfig, store: Path, source_id: dict, prints: dict, progress: bool) -> dict:
    with removed_if_left_empty(store):  # a refused dataset leaves no empty store folder
        ensure_writable(store, "storeDir", "--store-dir")
        from grappa.data.open import open_dataset
        source = open_dataset(cfg.dataset, progress=progress)
        return prepare(source, store, cfg.num_chunks, cfg.grappa.partition_seed, source_id,
                       feature_dtype=cfg.dataset.feature_dtype, block_edges=cfg.prepare.block_edges,
                       workers=cfg.prepare.workers, progress=progress,
                       extra={"source_files": prints} if prints else None)


def _replace(cfg: TrainConfig, store: Path, source_id: dict, prints: dict, progress: bool) -> dict:
    """Prepare next to the old store, then swap: a failed prepare leaves the old one as it was."""
    tag = f"{os.getpid()}"
    fresh, old = store.with_name(f".{store.name}.new-{tag}"), store.with_name(f".{store.name}.old-{tag}")
    try:
        manifest = _prepare(cfg, fresh, source_id, prints, progress)
        os.replace(store, old)
        try:
            os.replace(fresh, store)
        except OSError:
            os.replace(old, store)
            raise
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return manifest
