"""Manifest of a chunk store: format, file names, checksums and the idempotency check."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grappa.chunks.errors import ChunkStoreError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CHUNK_OF = "chunk_of.npy"
CHUNK_FILES = ("nodes.npy", "intra.npy", "bridge.npy", "x.npy", "y.npy", "masks.npy", "in_degree.npy")


def chunk_dir(k: int) -> str:
    return f"chunk-{k}"


def file_digest(path: Path, block: int = 1 << 22) -> dict[str, Any]:
    """{bytes, sha256} of a file, streamed so memory stays at one block."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while buf := fh.read(block):
            h.update(buf)
            size += len(buf)
    return {"bytes": size, "sha256": h.hexdigest()}


def _normal(value: Any) -> Any:
    """JSON round trip, so tuples vs lists or int keys never make equal sources differ."""
    return json.loads(json.dumps(value, sort_keys=True))


def identity(source: dict, num_chunks: int, seed: int) -> dict[str, Any]:
    """The fields that decide whether an existing store is the one asked for."""
    return {"format": FORMAT_VERSION, "source": _normal(source), "num_chunks": num_chunks, "seed": seed}


def read_manifest(store: Path) -> dict[str, Any]:
    path = store / MANIFEST
    if not path.is_file():
        raise ChunkStoreError(f"{path} is missing: the chunk store is not prepared (run `grappa prepare`)")
    try:
        manifest = json.loads(path.read_text())
        for key in ("format", "num_nodes", "num_chunks", "chunks", "chunk_of"):
            manifest[key]
    except (ValueError, KeyError, TypeError) as err:
        raise ChunkStoreError(
            f"{path} is corrupt ({err!r}); delete {store} and re-prepare the store") from None
    if manifest["format"] != FORMAT_VERSION:
        raise ChunkStoreError(
            f"{path} has format {manifest['format']}, this Grappa reads format {FORMAT_VERSION}; "
            f"delete {store} and re-prepare the store")
    return manifest


def is_prepared(out_dir: str | Path, source: dict, num_chunks: int, seed: int) -> bool:
    """True when out_dir holds a complete store for exactly this source, K and seed; False when
    there is no manifest. A manifest for something else raises, naming the differing field."""
    out_dir = Path(out_dir)
    if not (out_dir / MANIFEST).is_file():
        return False
    manifest = read_manifest(out_dir)
    want = identity(source, num_chunks, seed)
    for field, value in want.items():
        have = manifest.get(field)
        if have != value:
            if field == "source" and isinstance(have, dict):  # name the exact sub-field
                keys = sorted(set(have) | set(value), key=str)
                sub = next((k for k in keys if have.get(k) != value.get(k)), None)
                field, have, value = f"source.{sub}", have.get(sub), value.get(sub)
            raise ChunkStoreError(
                f"{out_dir / MANIFEST} was prepared for a different job: {field} is {have!r} there "
                f"but {value!r} now. Use another storeDir, or delete {out_dir} to re-prepare it")
    return True
