"""A local mirror of a store in a bucket: storeDir filled with the store's files as they are first read.

What reads a store whole (exact evaluation, the other strategies, predict's graph) reads the
store's files through memory maps; with storage.s3 those maps are of this folder, whose
manifest.json is the bucket's and whose files are downloaded whole when first opened
(ChunkStore's `remote`; the chunks' structure files from their packed objects, s3/packed.py),
checked against the manifest (sha256) like any store file, under a `.tmp-` name until complete.
A worker that fetches its rounds (storage.fetch) opens none of them: its mirror holds the
manifest alone.

A storeDir holding another store than the bucket's is refused, never replaced: it may be a
user's store.
"""
from __future__ import annotations

import os
from pathlib import Path

from grappa.data.s3 import packed
from grappa.data.s3.bucket import Bucket, S3Error
from grappa.data.store.manifest import LINK_DIR, MANIFEST, read_manifest

_TMP = ".tmp-"
_BLOCK = 1 << 22


def download(bucket: Bucket, rel: str, dst: Path) -> int:
    """The object `rel` into dst, whole or not at all, from its packed object where the bucket
    holds one (s3/packed.py); returns the bytes that crossed."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f"{_TMP}{dst.name}-{os.getpid()}")
    n = 0
    try:
        with open(tmp, "wb") as fo:
            if rel in bucket.packed():
                header, n = packed.copy_unpacked(bucket.stream(rel + packed.KEY_SUFFIX, _BLOCK), fo,
                                                 lambda data: None, lambda read: None,
                                                 f"{bucket.where}{rel}{packed.KEY_SUFFIX}")
                n += packed.LENGTH.size + len(header)
            else:
                for buf in bucket.stream(rel, _BLOCK):
                    fo.write(buf)
                    n += len(buf)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def open_mirror(bucket: Bucket, folder: Path) -> dict:
    """The bucket's store, its manifest written into `folder` (and the link split's files, which
    are read through their own paths); returns the manifest."""
    bucket.check()
    if not bucket.exists(MANIFEST):
        raise S3Error(f"storage.s3.prefix: {bucket.where} holds no prepared chunk store "
                      f"({MANIFEST} is missing): run `grappa prepare` with the same storage.s3")
    remote = bucket.get(MANIFEST)
    local = folder / MANIFEST
    if local.is_file() and local.read_bytes() != remote:
        raise S3Error(f"storeDir {folder} holds another chunk store than {bucket.where} (their "
                      f"{MANIFEST} differ), and with storage.s3 storeDir is the bucket's local "
                      "mirror: give the job another storeDir, or delete this one")
    if not local.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{_TMP}{MANIFEST}-{os.getpid()}"
        tmp.write_bytes(remote)
        os.replace(tmp, local)
    manifest = read_manifest(folder)
    link = manifest.get("link")
    for stem in (link or {}).get("files", {}):
        rel = f"{LINK_DIR}/{stem}.npy"
        if not (folder / rel).is_file():
            download(bucket, rel, folder / rel)
    return manifest


def complete_mirror(bucket: Bucket, folder: Path) -> int:
    """Every file of the bucket's store in `folder` (what predict's workers read as a local store);
    files already there are kept (each is checked against the manifest when opened); returns
    the bytes downloaded."""
    from grappa.data.store.manifest import CHUNK_OF, chunk_dir
    manifest = open_mirror(bucket, folder)
    rels = [CHUNK_OF] + [f"{chunk_dir(k)}/{name}" for k, chunk in enumerate(manifest["chunks"])
                         for name in chunk["files"]]
    return sum(download(bucket, rel, folder / rel) for rel in rels if not (folder / rel).is_file())
