"""Manifest of a chunk store (format 2): layout, dtypes, checksums and the idempotency check.

Layout of a store folder:

    manifest.json            written last: a store without it is incomplete and never read
    chunk_of.npy             [n] chunk id per node (int16, or int32 beyond 32768 chunks)
    chunk-<k>/nodes.npy      [n_k] global ids, ascending (int32 below 2^31 nodes, else int64)
    chunk-<k>/indptr.npy     [n_k + 1] int64: CSR by destination over nodes.npy's order
    chunk-<k>/indices.npy    [E_k] global source ids of every in-edge of the chunk's nodes,
                             sorted by (destination, source); no duplicates, no self-loops
    chunk-<k>/x.npy          [n_k, f] float32 or float16, or with dataset.featureDtype binary or
                             sparse (or auto choosing them) uint8 rows encoding them
                             (feature_codec.py; the manifest then has "feature_encoding", and for
                             sparse "sparse_width")
    chunk-<k>/y.npy          [n_k] int32 label, -1 = unlabelled
    chunk-<k>/split.npy      [n_k] uint8: 0 none, 1 train, 2 val, 3 test
    link/*.npy               task link-prediction only: the supervision edges and the
                             evaluation's negatives (data/link_split.py); the chunks then hold
                             the message-passing edges only

A node's in-degree is indptr[i + 1] - indptr[i]. Each file's entry records dtype, shape, the
number of data bytes and the sha256 of the data (the bytes after the .npy header).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from grappa.data.errors import ChunkStoreError
from grappa.data.store.feature_codec import AUTO, LOSSLESS, codec_of

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
CHUNK_OF = "chunk_of.npy"
LINK_DIR = "link"
CHUNK_FILES = ("nodes.npy", "indptr.npy", "indices.npy", "x.npy", "y.npy", "split.npy")


def chunk_dir(k: int) -> str:
    return f"chunk-{k}"


def id_dtype(num_nodes: int) -> np.dtype:
    """Node ids fit int32 below 2^31 nodes: half the bytes of every edge on disk and in RAM."""
    return np.dtype(np.int32 if num_nodes <= np.iinfo(np.int32).max else np.int64)


def _normal(value: Any) -> Any:
    """JSON round trip, so tuples vs lists or int keys never make equal sources differ."""
    return json.loads(json.dumps(value, sort_keys=True))


def identity(source: dict, num_chunks: int, seed: int) -> dict[str, Any]:
    """The fields that decide whether an existing store is the one asked for."""
    return {"format": FORMAT_VERSION, "source": _normal(source), "num_chunks": num_chunks, "seed": seed}


def _reprepare(store: Path) -> str:
    return f"delete {store} and run `grappa prepare` again (nothing is regenerated silently)"


def read_manifest(store: Path) -> dict[str, Any]:
    path = store / MANIFEST
    if not path.is_file():
        raise ChunkStoreError(f"{path} is missing: the chunk store is not prepared (run `grappa prepare`)")
    try:
        manifest = json.loads(path.read_text())
        version = manifest["format"]
    except (ValueError, KeyError, TypeError) as err:
        raise ChunkStoreError(f"{path} is corrupt ({err!r}); {_reprepare(store)}") from None
    if version != FORMAT_VERSION:
        older = isinstance(version, int) and version < FORMAT_VERSION
        raise ChunkStoreError(
            f"{path} is a chunk store of format {version}, "
            f"{'written by an older Grappa' if older else 'not one'} this Grappa reads (format "
            f"{FORMAT_VERSION}); {_reprepare(store)}")
    try:
        for key in ("num_nodes", "num_chunks", "chunks", "chunk_of", "id_dtype", "feature_dtype"):
            manifest[key]
    except KeyError as err:
        raise ChunkStoreError(f"{path} is corrupt (missing {err}); {_reprepare(store)}") from None
    return manifest


def is_prepared(out_dir: str | Path, source: dict, num_chunks: int, seed: int) -> bool:
    """True when out_dir holds a complete store for exactly this source, K and seed; False when
    there is no manifest. A manifest for something else raises, naming the differing field."""
    out_dir = Path(out_dir)
    if not (out_dir / MANIFEST).is_file():
        return False
    check_identity(read_manifest(out_dir), source, num_chunks, seed, str(out_dir / MANIFEST),
                   f"Use another storeDir, or delete {out_dir} to re-prepare it")
    return True


def _as_stored(source: dict, manifest: dict) -> dict:
    """`source` with its featureDtype read as the store's where both mean the same store: auto
    takes any lossless encoding (a store from before auto was the default holds float32), and a
    store auto wrote is the encoding it chose."""
    have = (manifest.get("source") or {}).get("feature_dtype")
    want = source.get("feature_dtype")
    if have == want or have is None or want is None or "num_features" not in manifest:
        return source
    stored = codec_of(manifest).encoding
    if (want == AUTO and stored in LOSSLESS) or (have == AUTO and want == stored):
        return {**source, "feature_dtype": have}
    return source


def check_identity(manifest: dict, source: dict, num_chunks: int, seed: int, where: str, fix: str) -> None:
    """Raise naming the first field where `manifest` is not the store asked for, and `fix`."""
    want = identity(_as_stored(source, manifest), num_chunks, seed)
    for field, value in want.items():
        have = manifest.get(field)
        if have != value:
            if field == "source" and isinstance(have, dict):  # name the exact sub-field
                keys = sorted(set(have) | set(value), key=str)
                sub = next((k for k in keys if have.get(k) != value.get(k)), None)
                field, have, value = f"source.{sub}", have.get(sub), value.get(sub)
            raise ChunkStoreError(
                f"{where} was prepared for a different job: {field} is {have!r} there "
                f"but {value!r} now. {fix}")
