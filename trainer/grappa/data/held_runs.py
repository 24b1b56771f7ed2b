"""Halo rows a worker already holds: a round takes them from its own folder, not from the store.

A fetched round's halo keeps its feature rows as *runs*, the ranges of store rows its fetch read:
from a bucket, rows at most GAP_BYTES apart are read in one request with the rows between them
(s3/source.py's gap rule), and the run keeps those too; from a folder, rows are read exactly, and
a run is adjacent rows. The halo folder holds the runs' rows in x.npy, their ranges in xruns.npy
(chunk, first row, end row, position in x.npy) and each halo row's position in x.npy (xpos.npy).

Rounds' halos overlap: the base chunks' in-neighbours are in every one, and the chunk a worker
held the round before is in its folder whole. So a fetch takes a run from the folder when a halo
kept there (or a chunk copy) holds all of its rows, and of the other runs the rows the folder
holds (`take_rows`): only the rest is read from the store. Where a halo reaches a large share of
a chunk's rows, its runs from a bucket cover the whole chunk, and the next round's rows of that
chunk come from the folder though they are other rows.

The same runs assemble a chunk's x.npy when it becomes the worker's variable chunk: it was in the
last round's halo, so the runs held cover most of its rows (`mask`, `fill`), and only the rest is
read from the store (local_copy.py checks the whole file against the manifest's sha256).

Bounded as the folder is (two rounds' data): a round's runs are what its fetch would read from
the store, gaps included; they replace the bare rows, never add to them.

`locate` finds where a halo folder's runs hold given rows: a round's halo beside the stable halo
(local_copy.py) points at those rows there instead of copying them, and `RunRows` reads each
halo row from its part.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Optional

import numpy as np

from grappa.util.npy import load_npy, map_npy

RUN_FILES = ("x.npy", "xpos.npy", "xruns.npy")  # a halo folder's rows, beside its index files
_BATCH_BYTES = 1 << 25
_SLICE_BYTES = 1 << 20  # a run this long is copied as a slice, not by its row numbers


def spans(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """first[i], first[i] + 1, .., first[i] + lengths[i] - 1 for every i, one after another."""
    starts = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(first, dtype=np.int64) - starts, lengths) + np.arange(int(lengths.sum()))


def file_rows(a: np.ndarray) -> Optional[tuple[str, int]]:
    """(file, byte offset of row 0) when `a` maps a whole .npy file (an np.memmap over its own
    mmap, rows contiguous), else None."""
    if isinstance(a, np.memmap) and isinstance(a.base, mmap.mmap) and a.filename and a.flags.c_contiguous:
        return a.filename, int(a.offset)
    return None


def _kernel_copy(out: np.ndarray, to: list[int], x: np.ndarray, frm: list[int], n: list[int]) -> int:
    """Runs copied file to file by the kernel (os.copy_file_range) where both arrays map whole
    files: no page of either mapping is touched, so none faults in (a fresh mapping's first touch
    of a page costs a fault, which on some kernels costs more than copying the page). Returns how
    many runs were copied, in order; the rest are left to the caller (no such files, or a file
    system that cannot)."""
    src, dst = file_rows(x), file_rows(out)
    if not n or src is None or dst is None or out.strides[0] != x.strides[0] or not hasattr(os, "copy_file_range"):
        return 0
    row = x.strides[0]
    with open(src[0], "rb") as fi, open(dst[0], "r+b") as fo:
        for done, (t, f, m) in enumerate(zip(to, frm, n)):
            left, a, b = m * row, src[1] + f * row, dst[1] + t * row
            try:
                while left:
                    got = os.copy_file_range(fi.fileno(), fo.fileno(), left, a, b)
                    if not got:  # the source ended early: let numpy's copy say so
                        return done
                    left, a, b = left - got, a + got, b + got
            except OSError:  # e.g. EXDEV, EOPNOTSUPP: a partial run is copied again by the caller
                return done
    return len(n)


def _copy_runs(out: np.ndarray, to: np.ndarray, x: np.ndarray, frm: np.ndarray, n: np.ndarray) -> None:
    """out[to[i]:to[i] + n[i]] = x[frm[i]:frm[i] + n[i]] for every i: long runs by the kernel
    between the files (`_kernel_copy`) or as slices (a copy of memory), the others by their row
    numbers, a bounded batch of rows at a time."""
    row = x.strides[0]
    step = max(1, _BATCH_BYTES // row)
    long = n * row >= _SLICE_BYTES
    runs = (to[long].tolist(), frm[long].tolist(), n[long].tolist())
    copied = _kernel_copy(out, runs[0], x, runs[1], runs[2])
    for t, f, m in list(zip(*runs))[copied:]:
        for a in range(0, m, step):
            b = min(m, a + step)
            out[t + a:t + b] = x[f + a:f + b]
    to, frm, n = to[~long], frm[~long], n[~long]
    batch = (np.cumsum(n) - n) * row // _BATCH_BYTES
    for b in np.unique(batch).tolist():
        sel = batch == b
        out[spans(to[sel], n[sel])] = x[spans(frm[sel], n[sel])]


class HeldRuns:
    """Store rows of each chunk held in a worker's folder: whole chunk copies and halos' runs."""

    def __init__(self) -> None:
        # chunk -> sources: (first rows, end rows, rows array, each first row's position in it),
        # each source's ranges disjoint and ascending
        self._sources: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add_chunk(self, k: int, x: np.ndarray) -> None:
        """Chunk k's x.npy copied whole."""
        zero = np.zeros(1, np.int64)
        self._sources.setdefault(k, []).append((zero, np.full(1, x.shape[0], np.int64), x, zero))

    def add_halo(self, folder: Path, sources: Optional[dict] = None) -> dict:
        """A halo folder's runs (RUN_FILES), in (chunk, row) order; runs that continue one another,
        in the store and in x.npy (a long one split), are joined. Returns what it added, per
        chunk, to be given as `sources` next time for the same folder (unchanged) instead of
        reading it again."""
        if sources is None:
            sources = {}
            runs = load_npy(folder / "xruns.npy")
            x = map_npy(folder / "x.npy")
            for k in np.unique(runs[:, 0]).tolist():
                first, end, at = (runs[runs[:, 0] == k, c] for c in (1, 2, 3))
                joined = np.r_[False, (first[1:] == end[:-1]) & (at[1:] == at[:-1] + end[:-1] - first[:-1])]
                keep = ~joined
                last = np.r_[np.flatnonzero(keep)[1:], first.size] - 1  # each joined range's last run
                sources[int(k)] = (first[keep], end[last], x, at[keep])
        for k, source in sources.items():
            self._sources.setdefault(k, []).append(source)
        return sources

    def chunks(self) -> list[int]:
        """The chunks the folder holds rows of."""
        return sorted(self._sources)

    def mask(self, k: int, n: int) -> np.ndarray:
        """Which of chunk k's n rows the folder holds (bool [n])."""
        held = np.zeros(n, dtype=bool)
        for first, end, _, _ in self._sources.get(k, ()):
            held[spans(first, end - first)] = True
        return held

    def fill(self, k: int, out: np.ndarray) -> None:
        """Copy every row of chunk k the folder holds into out (the chunk's rows, out[r] = row r)."""
        for first, end, x, pos in self._sources.get(k, ()):
            _copy_runs(out, first, x, pos, end - first)

    def take(self, k: int, lo: np.ndarray, hi: np.ndarray, out: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Copy rows lo[i]..hi[i] of chunk k into out[at[i]:], for every run i one source holds
        whole; returns which runs were copied (bool)."""
        done = np.zeros(lo.size, dtype=bool)
        for first, end, x, pos in self._sources.get(k, ()):
            left = np.flatnonzero(~done)
            i = np.searchsorted(first, lo[left], "right") - 1
            ok = (i >= 0) & (end[np.maximum(i, 0)] >= hi[left])
            sel, i = left[ok], i[ok]
            _copy_runs(out, at[sel], x, pos[i] + lo[sel] - first[i], hi[sel] - lo[sel])
            done[sel] = True
        return done

    def take_rows(self, k: int, rows: np.ndarray, out: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Copy each of chunk k's `rows` (ascending) that a source holds into out[at[j]];
        returns which were copied (bool): a run held in part gives the rows it holds."""
        done = np.zeros(rows.size, dtype=bool)
        for first, end, x, pos in self._sources.get(k, ()):
            left = np.flatnonzero(~done)
            i = np.searchsorted(first, rows[left], "right") - 1
            ok = (i >= 0) & (rows[left] < end[np.maximum(i, 0)])
            sel, i = left[ok], i[ok]
            src = pos[i] + rows[sel] - first[i]
            step = max(1, _BATCH_BYTES // x.strides[0])  # rows copied at once, bounded
            for a in range(0, sel.size, step):
                out[at[sel[a:a + step]]] = x[src[a:a + step]]
            done[sel] = True
        return done


def locate(runs: np.ndarray, chunks: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where a halo folder's runs (xruns.npy: chunk, first row, end row, position; in (chunk,
    row) order) hold each (chunks[i], rows[i]): its row in that folder's x.npy, or -1."""
    pos = np.full(rows.size, -1, dtype=np.int64)
    for k in np.intersect1d(np.unique(chunks), runs[:, 0]).tolist():
        sel = np.flatnonzero(chunks == k)
        mine = runs[runs[:, 0] == k]
        i = np.searchsorted(mine[:, 1], rows[sel], "right") - 1
        ic = np.maximum(i, 0)
        ok = (i >= 0) & (rows[sel] < mine[ic, 2])
        pos[sel[ok]] = mine[ic[ok], 3] + rows[sel[ok]] - mine[ic[ok], 1]
    return pos


class RunRows:
    """A halo chunk's rows in a halo folder's x.npy, indexed like that chunk's x.npy rows in
    local_copy.LocalView (row j of the chunk's halo rows is x[pos[j]]): what FeatureRows reads.
    With `stable` (the x.npy of the halo of the chunks owned every round, kept for the job) a
    position below its row count is a row of it, the others x's row (position - that count)."""

    def __init__(self, x: np.ndarray, pos: np.ndarray, stable: Optional[np.ndarray] = None) -> None:
        self.x, self.pos, self.stable = x, pos, stable
        self.split = stable.shape[0] if stable is not None else 0
        self.dtype = x.dtype
        self.shape = (pos.shape[0], *x.shape[1:])
        self.strides = x.strides
        self.nbytes = pos.shape[0] * x.strides[0]

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        p = np.asarray(self.pos[idx])
        if self.stable is None:
            return self.x[p]
        if p.ndim == 0:
            return self.stable[p] if p < self.split else self.x[p - self.split]
        old = p < self.split
        if old.all():
            return self.stable[p]
        out = np.empty((*p.shape, *self.x.shape[1:]), dtype=self.dtype)
        out[old] = self.stable[p[old]]
        out[~old] = self.x[p[~old] - self.split]
        return out
