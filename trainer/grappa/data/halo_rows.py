"""A mini-batch round's halo feature rows, fetched from the store when the steps first read them.

A mini-batch round reads only the halo rows its sampled neighbourhoods reach, a small part of the
halo on wide graphs (Coauthor-Physics at P = 8: a few tens of MB a round of the ~1 GB of rows its
halo references). So a mini-batch round's fetch (local_copy.LocalCopy, rows="as-read") brings the
halo's structure (ids, chunk, store row, in-degree) and leaves its feature rows in the store: the
first read of a row fetches it (in ascending store row per chunk; a bucket store's ranged
requests for all the chunks a step reaches at once) into this round's cache file, and every
later read in the round is local. A step's sample and rows are drawn while the step before is in
its all-reduce (runtime/worker.py), so the fetch overlaps the network wait.

By default only for wide rows (storage.haloRows auto: `rows_as_read`): a bucket store reads rows
closer than GAP_BYTES in one request, so a halo of narrow rows comes whole in a few requests a
chunk, where fetching as read costs requests a chunk a step (RMAT-17 at P = 8 trained several
times slower so: docs/results/peer-store.md); rows wider than half the gap are one request each
either way, and fetching only those read saves their bytes.

Counted into the round's local_copy.Fetched: `halo_rows` and `on_demand` both grow by
rows x row bytes (every fetched row once), `over_read` by a bucket's gap bytes.

Nothing half-fetched is used: a row's slot is set only once its bytes are in the file. The cache
belongs to the process that wrote it: `rows-<key>` folders are removed when a LocalCopy opens the
folder, so a resumed worker fetches again what it reads.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from grappa.data.s3.source import GAP_BYTES
from grappa.data.store.feature_codec import codec_of
from grappa.util.npy import map_npy

_SLAB = 1 << 23  # bytes of rows read from the store at once
_PACED_SLAB = 1 << 20  # a paced fetch ahead's: smaller, so its pace can spread them over the budget


def rows_as_read(manifest: dict) -> bool:
    """Whether a mini-batch round's halo rows are fetched as read (module docstring): rows wider
    than half the gap a bucket read merges."""
    return 2 * codec_of(manifest).row_bytes > GAP_BYTES


class HaloRows:
    """Rows of the halo whose structure is in `halo_dir` (ids, chunk and row per halo position,
    sorted by chunk, then id), read from the store through `copy` into `cache_dir`."""

    def __init__(self, copy, halo_dir: Path, cache_dir: Path, counts) -> None:
        self.copy, self.counts = copy, counts
        self.chunk = np.asarray(map_npy(halo_dir / "chunk.npy"))
        self.row = np.asarray(map_npy(halo_dir / "row.npy"))
        codec = codec_of(copy.manifest)
        self.width, self.dtype = codec.columns, codec.dtype  # of stored rows
        self.row_bytes = self.width * self.dtype.itemsize
        self.slot = np.full(self.chunk.size, -1, dtype=np.int64)  # position -> row of the cache file
        self.cached = 0
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.path = cache_dir / "x.bin"
        self._file = open(self.path, "w+b")
        self._map = None
        self._lock = threading.Lock()

    def fetch(self, positions: np.ndarray, pace=None, ahead: bool = False) -> None:
        """Bring the rows of halo `positions` not yet here from the store; `ahead`: before the
        steps read them (storage.haloRows reachable), not counted as read on demand; paced by
        `pace` (a fetch ahead of the round)."""
        missing = np.unique(positions[self.slot[positions] < 0])
        if not missing.size:
            return
        if pace is not None:  # the rows the fetch ahead expected (local_copy.LocalCopy.fetch)
            pace.settle(missing.size * self.row_bytes)
        step = max(1, (_SLAB if pace is None else _PACED_SLAB) // max(1, self.row_bytes))
        self._file.seek(0, 2)
        for lo in range(0, missing.size, step):  # a slab of rows at once, their chunks' requests together
            pos = missing[lo:lo + step]
            chunks = self.chunk[pos]
            bounds = np.flatnonzero(np.r_[True, chunks[1:] != chunks[:-1], True]).tolist()
            # ascending positions of one chunk: ascending store rows
            parts = [pos[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            blocks = self.copy.read_rows([(int(self.chunk[p[0]]), self.row[p]) for p in parts], self.counts)
            for p, block in zip(parts, blocks):
                self._file.write(memoryview(np.ascontiguousarray(block, dtype=self.dtype)).cast("B"))
                self.slot[p] = self.cached + np.arange(p.size)
                self.cached += p.size
            self.counts.halo_rows += pos.size * self.row_bytes
            if not ahead:
                self.counts.on_demand += pos.size * self.row_bytes
            if pace is not None:
                pace.spend(pos.size * self.row_bytes)
        self._file.flush()
        self._map = None

    def take(self, positions: np.ndarray) -> np.ndarray:
        """[len(positions), width] rows as stored, fetched first where needed."""
        with self._lock:
            self.fetch(positions)
            if not positions.size:
                return np.empty((0, self.width), dtype=self.dtype)
            if self._map is None:
                self._map = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.cached, self.width))
            return self._map[self.slot[positions]]


class HaloChunkRows:
    """One chunk's slice of a HaloRows (positions start .. start + n), indexed like the x.npy rows
    of a halo chunk in local_copy.LocalView (stored rows; the view decodes them): what
    FeatureRows.gather reads."""

    def __init__(self, rows: HaloRows, start: int, n: int) -> None:
        self.rows, self.start = rows, start
        self.dtype = rows.dtype
        self.shape = (n, rows.width)
        self.strides = (rows.row_bytes, rows.dtype.itemsize)
        self.nbytes = 0  # nothing of it is held: rows come as they are read

    def __getitem__(self, idx) -> np.ndarray:
        return self.rows.take(self.start + np.asarray(idx, dtype=np.int64).reshape(-1))
