"""Which graph a model runs on, and whether it is the one the model was trained on.

By default the model's training store, found where its model file says (relative to the file;
model_file.store_locations) and accepted only with the fingerprint the file records: a store at
that place that was prepared again, or another run's, is refused, as is one whose source files
changed since (what `grappa train` refuses too). Another graph is fine when named explicitly
(`--store`, or a dataset), and said so.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grappa.config import ConfigError
from grappa.data.errors import ChunkStoreError
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.fingerprint import changed_since_prepared
from grappa.data.store.manifest import MANIFEST, read_manifest
from grappa.models.model_file import store_fingerprint, store_locations


@dataclass
class Graph:
    store: ChunkStore
    fingerprint: str
    training: bool  # the model's own training graph


def _fingerprint(path: Path) -> Optional[str]:
    try:
        return store_fingerprint(read_manifest(path))
    except (ChunkStoreError, KeyError, TypeError):
        return None


def training_graph(model: str, meta: dict, mirror: Optional[Path] = None) -> Graph:
    """The model's training store, by its fingerprint, from where the model file says it is;
    `mirror`: where a store in a bucket is mirrored instead (a model downloaded from a bucket,
    whose recorded places are another machine's)."""
    want = (meta.get("store") or {}).get("fingerprint")
    places = store_locations(model, meta)
    if mirror is not None and (meta.get("store") or {}).get("s3"):
        places = [mirror]
    if not want or not places:
        raise ConfigError(f"model {model} was not trained on a chunk store (`grappa single` trains on "
                          "the dataset in memory): give the graph with --store DIR or --dataset/--config")
    s3 = (meta.get("store") or {}).get("s3")
    if s3:  # trained on a bucket: its local mirror, completed (every file, checked when opened)
        _refill_mirror(model, s3, places)
    found = [(p, _fingerprint(p)) for p in places if (p / MANIFEST).is_file()]
    same = next((p for p, f in found if f == want), None)
    if same is None and found:
        where, other = found[0]
        raise ChunkStoreError(
            f"model {model} was trained on the chunk store with fingerprint {want}, but {where} holds "
            f"another graph now (fingerprint {other}: prepared again since, or another run's store); "
            f"running the model on it would use a graph it was not trained on without saying so. To "
            f"use it anyway, name it: --store {where}; or give the model's graph with --dataset/--config")
    if same is None:
        raise ChunkStoreError(
            f"model {model} was trained on the chunk store with fingerprint {want}, which is gone (looked "
            f"in {', '.join(str(p) for p in places)}): give the graph with --store DIR or "
            "--dataset/--config (e.g. the training run's config)")
    _refuse_stale(model, same)
    return Graph(ChunkStore(same), want, training=True)


def _refill_mirror(model: str, s3: dict, places: list[Path]) -> None:
    """The bucket's store, whole, in the first of `places` holding its mirror (else where the
    training wrote it), so predict's workers read it as a local store."""
    from grappa.config import S3Config
    from grappa.data.s3 import Bucket
    from grappa.data.s3.mirror import complete_mirror
    folder = next((p for p in places if (p / MANIFEST).is_file()), places[-1])
    bucket = Bucket(S3Config.model_validate(s3))
    n = complete_mirror(bucket, folder)
    if n:
        print(f"grappa: model {model} was trained on {bucket.where}: downloaded {n / 2**20:,.1f} MiB of "
              f"it into its local mirror {folder}", file=sys.stderr)


def _refuse_stale(model: str, store: Path) -> None:
    folder, changed = changed_since_prepared(read_manifest(store))
    if changed:
        raise ChunkStoreError(
            f"the chunk store {store} that model {model} was trained on was prepared from files that "
            f"changed since: {'; '.join(changed)}. To predict on the files as they are now, prepare them "
            f"(e.g. --dataset arrays --set dataset.path={folder}); to label the graph as the model was "
            f"trained on it, name the store: --store {store}")


def named_graph(store: ChunkStore, meta: dict, how: str) -> Graph:
    """A graph the user named (`how`: `--store DIR`, the dataset): used as asked, and said when it
    is not the model's training graph, or was prepared from files that changed since."""
    fp = store_fingerprint(store.manifest)
    training = fp == (meta.get("store") or {}).get("fingerprint")
    if not training:
        print(f"grappa: {how}: not the graph the model was trained on (chunk store fingerprint {fp}, the "
              f"model's {(meta.get('store') or {}).get('fingerprint') or 'none: trained in memory'}); "
              "running on it as asked", file=sys.stderr)
    _, changed = changed_since_prepared(store.manifest)
    if changed:
        print(f"grappa: {how}: the store {store.path} was prepared from files that changed since "
              f"({'; '.join(changed)}); running on the store as it is, as asked", file=sys.stderr)
    return Graph(store, fp, training)
