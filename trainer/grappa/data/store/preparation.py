"""`grappa prepare`: stream the dataset into the chunk store, once per (dataset, K, seed) and per
version of a user's files (fingerprint.py): files changed since are refused, or, when asked,
prepared again into a new store that replaces the old one only once it is complete."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from grappa.config import TrainConfig
from grappa.data.errors import ChunkStoreError
from grappa.data.sources.base import GraphSource
from grappa.data.store import is_prepared, prepare, read_manifest
from grappa.data.store.manifest import MANIFEST, check_identity
from grappa.data.store.fingerprint import changes, fingerprint, input_files
from grappa.util.files import ensure_writable, removed_if_left_empty

REPREPARE_FLAG = "--reprepare"


def store_source(cfg: TrainConfig) -> dict:
    """What identifies the store's content: the dataset settings (not where they live)."""
    d = json.loads(cfg.dataset.model_dump_json())
    d.pop("root", None)
    d.pop("download", None)
    if d.get("name") != "tables":  # stores of other datasets keep the identity they had
        d.pop("tables", None)
    if cfg.task == "link-prediction":  # the split decides which edges the store holds
        lk = cfg.link
        d["link_split"] = {"val_fraction": lk.val_fraction, "test_fraction": lk.test_fraction,
                           "split_seed": lk.split_seed, "eval_negatives": lk.eval_negatives,
                           "shared_negatives": lk.shared_negatives}
    return d


@dataclass(frozen=True)
class Purpose:
    """What the store is prepared for. Training needs labels and the three splits; inference
    needs edges and features only (`need_labels=False`: a graph without labels.npy or split files
    is prepared with every node unlabelled). `check_source` sees the opened source (its headers,
    nothing read yet) before anything is written, e.g. that its feature width fits a model."""

    need_labels: bool = True
    check_source: Optional[Callable[[GraphSource], None]] = None


TRAINING = Purpose()


def prepare_store(cfg: TrainConfig, progress: bool = True, reprepare: bool = False,
                  purpose: Purpose = TRAINING) -> dict:
    if cfg.storage.bucket_store is not None:  # the store in a bucket, staged in storeDir
        return prepare_in_bucket(cfg, progress, reprepare, purpose)
    return prepare_local(cfg, progress, reprepare, purpose)


def prepare_local(cfg: TrainConfig, progress: bool = True, reprepare: bool = False,
                  purpose: Purpose = TRAINING) -> dict:
    source_id = store_source(cfg)
    store = cfg.store_path
    folder, files = input_files(cfg.dataset)
    prints = fingerprint(folder, files)
    if not is_prepared(store, source_id, cfg.num_chunks, cfg.grappa.partition_seed):
        return _prepare(cfg, store, source_id, _recorded(folder, prints), progress, purpose)
    manifest = read_manifest(store)
    changed = changes(manifest.get("source_files"), prints, folder)
    if changed and not reprepare:
        raise ChunkStoreError(
            f"the chunk store {store} was prepared from other data: " + "; ".join(changed)
            + f". Run again with {REPREPARE_FLAG} to prepare it anew (the old store stays until "
            f"the new one is complete), or delete {store}")
    if changed:
        manifest = _replace(cfg, store, source_id, _recorded(folder, prints), progress, purpose)
    check_labelled(cfg, manifest, purpose, str(store), "give another storeDir, or delete it")
    return manifest


def check_labelled(cfg: TrainConfig, manifest: dict, purpose: Purpose, where: str, fix: str) -> None:
    if purpose.need_labels and cfg.task != "link-prediction" and int(manifest["num_classes"]) < 1:
        raise ChunkStoreError(
            f"the chunk store {where} holds a graph without labels (prepared for predict): training "
            f"needs labels.npy and train/val/test; {fix}")


def _recorded(folder: Path, prints: dict) -> Optional[dict]:
    """What the manifest keeps of a user's files: their fingerprints, and the folder they are in,
    for commands that read the store without the dataset's settings (predict on a model's store)."""
    return {"source_files": prints, "source_folder": str(folder.resolve())} if prints else None


def _prepare(cfg: TrainConfig, store: Path, source_id: dict, extra: Optional[dict], progress: bool,
             purpose: Purpose) -> dict:
    with removed_if_left_empty(store):  # a refused dataset leaves no empty store folder
        ensure_writable(store, "storeDir", "--store-dir")
        from grappa.data.open import open_dataset
        # link prediction trains on edges: node labels and splits are optional, as for inference
        link = cfg.task == "link-prediction" and purpose.need_labels
        source = open_dataset(cfg.dataset, progress=progress, need_labels=purpose.need_labels and not link)
        if purpose.check_source is not None:
            purpose.check_source(source)
        if link:
            # val/test edges leave message passing before the store sees the graph; the split is
            # the dataset's own (arrays' edge files, OGB's link split) or the seeded one, made
            # when the store's prepare stages the source (after a graph from tables has mapped
            # its ids to dense ones), its files written into the store's staging folder
            from grappa.data.link_split import link_source
            given = source.link_split() if hasattr(source, "link_split") else None
            source = link_source(source, cfg.link, given, progress)
        return prepare(source, store, cfg.num_chunks, cfg.grappa.partition_seed, source_id,
                       feature_dtype=cfg.dataset.feature_dtype, block_edges=cfg.prepare.block_edges,
                       workers=cfg.prepare.workers, progress=progress, extra=extra)


def _replace(cfg: TrainConfig, store: Path, source_id: dict, extra: Optional[dict], progress: bool,
             purpose: Purpose) -> dict:
    """Prepare next to the old store, then swap: a failed prepare leaves the old one as it was."""
    tag = f"{os.getpid()}"
    fresh, old = store.with_name(f".{store.name}.new-{tag}"), store.with_name(f".{store.name}.old-{tag}")
    try:
        manifest = _prepare(cfg, fresh, source_id, extra, progress, purpose)
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


# `grappa prepare` with storage.s3: the store is prepared in storeDir (the staging folder, then the
# bucket's local mirror) and uploaded, or found in the bucket already and not prepared again. The
# bucket is checked first (one HEAD: endpoint, bucket, credentials), so a wrong setting fails
# within seconds with nothing written anywhere. A store in the bucket is checked like a local one
# (the job's dataset, chunks and seed; the user's files unchanged since) and never replaced.
def prepare_in_bucket(cfg: TrainConfig, progress: bool, reprepare: bool, purpose: Purpose) -> dict:
    from grappa.data.s3.bucket import Bucket
    from grappa.data.s3.mirror import open_mirror
    from grappa.data.s3.upload import upload_store
    bucket = Bucket(cfg.storage.bucket_store)
    bucket.check()
    fix = (f"give storage.s3.prefix another value, or delete the objects under {bucket.where} "
           "(a store in a bucket is never replaced)")
    if bucket.exists(MANIFEST):
        manifest = json.loads(bucket.get(MANIFEST))
        check_identity(manifest, store_source(cfg), cfg.num_chunks, cfg.grappa.partition_seed,
                       f"the chunk store {bucket.where}", fix[0].upper() + fix[1:])
        folder, files = input_files(cfg.dataset)
        changed = changes(manifest.get("source_files"), fingerprint(folder, files), folder)
        if changed:
            raise ChunkStoreError(f"the chunk store {bucket.where} was prepared from other data: "
                                  + "; ".join(changed) + f"; {fix}")
        check_labelled(cfg, manifest, purpose, bucket.where, fix)
        return open_mirror(bucket, cfg.store_path)
    manifest = prepare_local(cfg, progress, reprepare, purpose)
    upload_store(cfg.store_path, bucket, progress)
    return manifest
