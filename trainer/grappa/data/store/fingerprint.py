"""Fingerprints of a user's dataset files (arrays, tables, file), kept in the store's manifest so a store
prepared from files that changed since is never reused silently.

Per file: its size, its modification time and a sha256 of its content. Files up to
`FULL_HASH_BYTES` are hashed whole; larger ones by `SAMPLES` blocks of `SAMPLE_BYTES` spread
evenly from the first byte to the last (a few MiB read whatever the size). A file has changed
when its size or hash differs, or, for a sampled one, its modification time: an in-place edit
between the samples still moves the time, and a copy of a small file that kept its bytes is
not a change.
"""
from __future__ import annotations

import glob
import hashlib
from pathlib import Path
from typing import Optional

from grappa.config import DatasetConfig

FULL_HASH_BYTES = 64 << 20
SAMPLES, SAMPLE_BYTES = 16, 1 << 20


def input_files(cfg: DatasetConfig) -> tuple[Path, list[Path]]:
    """The folder and the user files a dataset is read from; no files for built-in, synthetic
    and OGB datasets (fixed releases, or generated)."""
    if cfg.name == "file":
        path = Path(cfg.path or "")
        return path.parent, [path]
    if cfg.name == "tables":
        from grappa.data.sources import dataset_path
        from grappa.data.tables.files import resolve
        folder, t = dataset_path(cfg), cfg.tables
        files = resolve(folder, t.nodes.files, "dataset.tables.nodes") if folder.is_dir() else []
        files += resolve(folder, t.edges.files, "dataset.tables.edges") if folder.is_dir() else []
        return folder, list(dict.fromkeys(files))
    if cfg.name != "arrays":
        return Path("."), []
    from grappa.data.sources import dataset_path
    folder, a = dataset_path(cfg), cfg.arrays
    from grappa.data.sources.arrays import LINK_FILES
    names = [a.features, a.labels, a.train, a.val, a.test, *a.src, *a.dst, *LINK_FILES]
    files = [folder / n for n in names]
    if not a.src:
        for pattern in a.edges or ["edges.npy"]:
            files += [Path(p) for p in sorted(glob.glob(str(folder / pattern)))] or [folder / pattern]
    return folder, files


def _digest(path: Path, size: int) -> tuple[str, bool]:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        if size <= FULL_HASH_BYTES:
            while block := f.read(1 << 22):
                h.update(block)
            return h.hexdigest(), False
        for i in range(SAMPLES):
            f.seek((size - SAMPLE_BYTES) * i // (SAMPLES - 1))
            h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest(), True


def fingerprint(folder: Path, files: list[Path]) -> dict[str, dict]:
    """{path relative to the dataset's folder: {size, mtime_ns, sha256, sampled}} (relative: a
    moved data root is the same data); a missing file is left out (the prepare names it)."""
    out = {}
    for path in files:
        try:
            st = path.stat()
            digest, sampled = _digest(path, st.st_size)
        except OSError:
            continue
        out[str(path.relative_to(folder)) if path.is_relative_to(folder) else path.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                    "sha256": digest, "sampled": sampled}
    return out


def changes(recorded: Optional[dict], now: dict, folder: Path) -> list[str]:
    """How the files differ from when the store was prepared, one line per file; empty when
    they don't (or the store predates fingerprints)."""
    if recorded is None:
        return []
    out = []
    for name in sorted(set(recorded) | set(now)):
        old, new, path = recorded.get(name), now.get(name), folder / name
        if old is None or new is None:
            out.append(f"{path} {'is new' if old is None else 'is gone'}")
        elif old["size"] != new["size"]:
            out.append(f"{path} changed size ({old['size']:,} -> {new['size']:,} bytes)")
        elif old["sha256"] != new["sha256"]:
            out.append(f"{path} changed content (same size)")
        elif new["sampled"] and old["mtime_ns"] != new["mtime_ns"]:
            out.append(f"{path} was modified (newer modification time)")
    return out


def changed_since_prepared(manifest: dict) -> tuple[Optional[Path], list[str]]:
    """(the dataset folder, how its files differ from when the store was prepared), for a store
    that records them (`source_folder`, `source_files`): what a command reading a store it did
    not prepare checks. (None, []) when the store records no folder, or the folder is gone (the
    store is all that is left of the data)."""
    recorded, where = manifest.get("source_files"), manifest.get("source_folder")
    if not recorded or not where or not Path(where).is_dir():
        return None, []
    folder = Path(where)
    return folder, changes(recorded, fingerprint(folder, [folder / name for name in recorded]), folder)
