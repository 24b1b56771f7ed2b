"""A prepared local store into its bucket: every file, then the manifest, so a reader never sees
a store whose files are not all there (a cut upload leaves no manifest: not a store)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
        print(f"uploading the chunk store to {bucket.where}: {len(files)} files, {total / 2**20:,.1f} MiB",
              flush=True)
    with ThreadPoolExecutor(_PARALLEL) as pool:
        list(pool.map(lambda p: bucket.put_file(p, p.relative_to(store).as_posix()), files))
    bucket.put_file(store / MANIFEST, MANIFEST)
    return total + len(manifest)
