"""A prepared local store into its bucket: every file, the chunks' structure files packed beside
them (packed.py) and their index, then the manifest, so a reader never sees a store whose files
are not all there (a cut upload leaves no manifest: not a store)."""
from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grappa.data.s3 import packed
from grappa.data.s3.bucket import Bucket, S3Error
from grappa.data.store.manifest import MANIFEST

_PARALLEL = 4  # files at once; s3transfer splits a large one into parts of its own


def upload_store(store: Path, bucket: Bucket, progress: bool = False) -> int:
    """Upload `store` (complete: its manifest written) unless the bucket holds the same store;
    returns the bytes uploaded. A different store under the prefix is refused, never replaced."""
    manifest = (store / MANIFEST).read_bytes()
    if bucket.exists(MANIFEST):
        if bucket.get(MANIFEST) == manifest:
            return 0
        raise S3Error(f"storage.s3.prefix: {bucket.where} holds another chunk store (its {MANIFEST} "
                      f"differs from {store}'s); give this job another prefix, or delete that store's "
                      "objects first (nothing there is replaced)")
    files = sorted(p for p in store.rglob("*") if p.is_file() and p.name != MANIFEST
                   and not p.name.startswith("."))
    total = sum(p.stat().st_size for p in files)
    if progress:
        print(f"uploading the chunk store to {bucket.where}: {len(files)} files, {total / 2**20:,.1f} MiB, "
              "then the chunks' structure files packed", flush=True)
    with ThreadPoolExecutor(_PARALLEL) as pool:
        list(pool.map(lambda p: bucket.put_file(p, p.relative_to(store).as_posix()), files))
    chunk_files = [p for p in files if p.parent.parent == store and p.parent.name.startswith("chunk-")]
    total += _upload_packed(store, [p for p in chunk_files if p.name in packed.PACKED_FILES], bucket)
    bucket.put_file(store / MANIFEST, MANIFEST)
    return total + len(manifest)


def _upload_packed(store: Path, files: list[Path], bucket: Bucket) -> int:
    """Each file packed beside itself (`<key>.packed`), then packed.json: {"codec", "files": {key:
    packed bytes}}; returns the bytes uploaded."""
    with tempfile.TemporaryDirectory(prefix="grappa-packed-") as tmp:
        def one(p: Path) -> tuple[str, int]:
            rel = p.relative_to(store).as_posix()
            dst = Path(tmp) / rel.replace("/", "__")
            size = packed.pack_file(p, dst)
            bucket.put_file(dst, rel + packed.KEY_SUFFIX)
            dst.unlink()
            return rel, size
        with ThreadPoolExecutor(_PARALLEL) as pool:
            sizes = dict(pool.map(one, files))
        index = Path(tmp) / packed.INDEX
        index.write_text(json.dumps({"codec": packed.CODEC, "files": sizes}, indent=1, sort_keys=True))
        bucket.put_file(index, packed.INDEX)
        return sum(sizes.values()) + index.stat().st_size
