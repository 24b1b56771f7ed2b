"""Per-chunk row files: layer l's output rows of chunk k, in the chunk's node order.

Written whole by the worker that owns the chunk, under a temporary name renamed into place when
complete, so a file that exists is complete (what resume relies on). Read as memory maps whose
pages a process hands back after each block (`release`): the page cache keeps them, shared by the
processes of a machine, but no process's resident memory grows with the graph.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from grappa.util.npy import map_npy


LAYER_PREFIX = "layer-"


def layer_dir(scratch: Path, layer: int) -> Path:
    """Rows after `layer` layers (1 = the first layer's output)."""
    return scratch / f"{LAYER_PREFIX}{layer}"


def layer_file(scratch: Path, layer: int, k: int) -> Path:
    return layer_dir(scratch, layer) / f"chunk-{k}.npy"


def layer_complete(scratch: Path, layer: int, chunks) -> bool:
    return all(layer_file(scratch, layer, k).exists() for k in chunks)


def release(arr: np.ndarray) -> None:
    """Drop a memory map's pages from this process (they stay in the page cache)."""
    m = getattr(arr, "_mmap", None)
    if m is not None and hasattr(m, "madvise"):
        m.madvise(mmap.MADV_DONTNEED)


class RowFileWriter:
    """A float32 [rows, width] .npy written block by block, published by rename at `close`."""

    def __init__(self, path: Path, rows: int, width: int, dtype=np.float32) -> None:
        self.path, self.rows, self.written = path, rows, 0
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.tmp, "wb")
        np.lib.format.write_array_header_1_0(self._fh, {
            "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
            "shape": (rows, width)})
        self.dtype, self.width = np.dtype(dtype), width
        self.bytes = 0

    def append(self, block: np.ndarray) -> None:
        arr = np.ascontiguousarray(block, dtype=self.dtype)
        assert arr.shape[1:] == (self.width,), (arr.shape, self.width)
        self._fh.write(memoryview(arr).cast("B"))
        self.written += arr.shape[0]
        self.bytes += arr.nbytes

    def close(self) -> None:
        if self.written != self.rows:
            self.abort()
            raise RuntimeError(f"{self.path}: wrote {self.written} rows, expected {self.rows}")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._fh.close()
        self.tmp.unlink(missing_ok=True)


class LayerRows:
    """Layer l's rows of every chunk, opened lazily as memory maps. Open a new one per pass:
    training rewrites the files every evaluation, and a map keeps the file it opened.

    With `remote` (a run's home in the bucket, data/s3/run_home.py), the chunks not in `own`
    are another worker's: each is downloaded on its first read in this pass, over any copy of an
    earlier pass's."""

    def __init__(self, scratch: Path, layer: int, remote=None, own=()) -> None:
        self.scratch, self.layer = scratch, layer
        self.remote, self.own = remote, set(own)
        self._maps: dict[int, np.ndarray] = {}

    def rows(self, k: int) -> np.ndarray:
        if k not in self._maps:
            path = layer_file(self.scratch, self.layer, k)
            if self.remote is not None and k not in self.own:
                self.remote.fetch_rows(self.layer, k, path)
            self._maps[k] = map_npy(path)
        return self._maps[k]

    def release(self) -> None:
        for m in self._maps.values():
            release(m)
