"""The graph's distinct edges as one sorted file of 64-bit keys, in bounded memory.

An edge (s, d), s != d, is the key r = (min(s, d) * n + max(s, d)) * 2 + [s > d]: r >> 1 is
its undirected edge {s, d} (its canonical key c), the low bit its direction. Keys are spilled
into ranges of the smaller id with the store's own spill (store/spill.py: a record is
(min, 2 * max + direction)); each range, in ascending order, is sorted and deduplicated alone
(a range larger than 2 x block_edges is spilled again into narrower ones, as the store's
finalise does), and appended to `keys.bin`: the ranges ascend, so the whole file is sorted.

The graph is undirected when every {u, v} comes in both directions: 2 x (distinct c) equals
the distinct r. A source that adds the inverse edges itself is undirected by construction; its
keys are spilled once, direction 0, so each {u, v} is one key. Memory: the spill's buffer and
one range, O(block_edges), whatever the graph's size.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.store.spill import RangeSpill, plan_range_bits, read_records, respill, spill_files

KEYS_FILE = "keys.bin"
_NARROWER_BITS = 3  # a range too large for memory is cut into 2^3 (as store/finalise.py does)


def record_keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """r of each (src, dst) (int64; self-loops give a key no graph edge has)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    return (lo * np.int64(n) + hi) * 2 + (src > dst)


@dataclass
class EdgeKeys:
    """The sorted distinct keys on disk and what the pass counted."""

    folder: Path
    num_nodes: int
    records: int = 0                 # distinct keys r in keys.bin
    canonical: int = 0               # distinct c = r >> 1
    listed: int = 0                  # edges the source lists (duplicates, self-loops included)
    known_undirected: bool = False   # the source adds the inverse edges (keys: direction 0 only)
    held_hits: dict = field(default_factory=lambda: {True: 0, False: 0})  # listed edges held out, by mode

    @property
    def path(self) -> Path:
        return self.folder / KEYS_FILE

    @property
    def undirected(self) -> bool:
        return self.known_undirected or self.records == 2 * self.canonical

    @property
    def directed_edges(self) -> int:
        """Distinct (u, v) pairs of the graph, both directions counted when undirected."""
        return 2 * self.canonical if self.undirected else self.records

    @property
    def candidates_count(self) -> int:
        return self.canonical if self.undirected else self.records

    def blocks(self, block: int) -> Iterator[np.ndarray]:
        """keys.bin in ascending slices (read, not mapped: no file page stays resident)."""
        for off in range(0, self.records, block):
            yield np.fromfile(self.path, np.int64, count=min(block, self.records - off), offset=off * 8)

    def candidates(self, block: int) -> Iterator[np.ndarray]:
        """The split's candidates, ascending and distinct: c when undirected, else r."""
        undirected, last = self.undirected, None
        for k in self.blocks(block):
            if not undirected:
                yield k
                continue
            c = k >> 1
            c = c[np.r_[True, c[1:] != c[:-1]]]
            if last is not None and c[0] == last:  # its other direction ended the previous slice
                c = c[1:]
            if c.size:
                last = int(c[-1])
                yield c

    def edges_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of candidates: (min, max) when undirected, else as listed."""
        n = np.int64(self.num_nodes)
        if self.undirected:
            return ids // n, ids % n
        c, back = ids >> 1, (ids & 1).astype(bool)
        lo, hi = c // n, c % n
        return np.where(back, hi, lo), np.where(back, lo, hi)

    def contains(self, src: np.ndarray, dst: np.ndarray, block: int,
                 extra: Optional[np.ndarray] = None) -> np.ndarray:
        """Whether each pair is an edge (either direction when undirected), by one scan of the
        sorted file: the queries are sorted and looked up in each slice. `extra`: more keys r."""
        undirected = self.undirected
        q = record_keys(src, dst, self.num_nodes)
        q = q >> 1 if undirected else q
        order = np.argsort(q, kind="stable")
        qs = q[order]
        found = np.zeros(q.size, bool)

        def look(sorted_keys: np.ndarray) -> None:
            k = sorted_keys >> 1 if undirected else sorted_keys
            if not k.size:
                return
            pos = np.minimum(np.searchsorted(k, qs), k.size - 1)
            found[:] |= k[pos] == qs  # noqa: B023 (each slice in turn)

        for k in self.blocks(block):
            look(k)
        if extra is not None and extra.size:
            look(np.sort(extra))
        out = np.empty(q.size, bool)
        out[order] = found
        return out


class Count:
    """Edges read so far (a progress bar's counter; one writer)."""

    value = 0


def edge_keys(source, work: Path, block_edges: int, held: Optional[dict] = None,
              count: Optional[Count] = None) -> EdgeKeys:
    """Stream the source's edges (ids checked naming the file and row) into keys.bin under
    `work`. `held`: sorted keys of held-out edges by mode (True: c, False: src * n + dst), whose
    listed occurrences are counted (the store's edge count without them)."""
    n = int(source.num_nodes)
    folder = Path(work)
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "spill").mkdir(parents=True)
    out = EdgeKeys(folder, n, known_undirected=bool(source.add_inverse_edges))
    rec_dtype = np.dtype(np.int32 if 2 * n - 1 <= np.iinfo(np.int32).max else np.int64)
    bits = plan_range_bits(n, max(1, int(source.num_edges)), block_edges)
    spill = RangeSpill(folder / "spill", bits, rec_dtype, "k", flush_edges=block_edges)
    for part in source.edge_parts(1):
        for big in part.blocks(block_edges):
            for lo in range(0, len(big.src), block_edges):  # a source's block may exceed ours
                src = np.asarray(big.src[lo:lo + block_edges], np.int64)
                dst = np.asarray(big.dst[lo:lo + block_edges], np.int64)
                _check_ids(src, dst, n, big.origin, big.first_row + lo)
                out.listed += src.size
                if count is not None:
                    count.value = out.listed
                if held:
                    _count_held(out, src, dst, n, held)
                keep = src != dst
                src, dst = src[keep], dst[keep]
                small, large = np.minimum(src, dst), np.maximum(src, dst)
                large *= 2
                if not out.known_undirected:
                    large += src > dst
                spill.add(large, small)  # a record (min, 2 max + direction), ranged by min
    spill.flush()
    with open(out.path, "wb") as fh:
        for r, paths in spill_files(folder / "spill").items():
            for keys in _sorted_range(paths, r << bits, bits, rec_dtype, 2 * block_edges, n):
                fh.write(memoryview(keys).cast("B"))
                out.records += keys.size
                c = keys >> 1
                out.canonical += int(np.count_nonzero(c[1:] != c[:-1])) + 1
    shutil.rmtree(folder / "spill", ignore_errors=True)
    return out


def _sorted_range(paths: list[Path], base: int, bits: int, dtype: np.dtype, max_edges: int,
                  n: int) -> Iterator[np.ndarray]:
    """Sorted distinct keys of one range (ascending sub-ranges when it is too large)."""
    size = sum(p.stat().st_size for p in paths) // (2 * dtype.itemsize)
    if size > max_edges and bits > 0:
        sub_bits = max(0, bits - _NARROWER_BITS)
        folder = paths[0].parent / f"sub-{base}"
        folder.mkdir()
        files = respill(paths, folder, sub_bits, dtype, base, max_edges)
        for p in paths:
            p.unlink()
        for r, sub in files.items():
            yield from _sorted_range(sub, base + (r << sub_bits), sub_bits, dtype, max_edges, n)
        shutil.rmtree(folder, ignore_errors=True)
        return
    rec = read_records(paths, dtype)
    for p in paths:
        p.unlink()
    key = rec[:, 0].astype(np.int64)  # min
    key *= 2 * n
    key += rec[:, 1]                  # 2 max + direction
    del rec
    key.sort()
    if key.size:
        yield key[np.r_[True, key[1:] != key[:-1]]]


def _check_ids(src: np.ndarray, dst: np.ndarray, n: int, origin: str, first_row: int) -> None:
    bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{origin}: edge {first_row + i} is ({int(src[i])}, {int(dst[i])}), "
                           f"a node id outside [0, {n}); fix or remove that edge")


def _count_held(out: EdgeKeys, src: np.ndarray, dst: np.ndarray, n: int, held: dict) -> None:
    for undirected, keys in held.items():
        if not keys.size:
            continue
        k = (np.minimum(src, dst) * n + np.maximum(src, dst)) if undirected else src * n + dst
        pos = np.minimum(np.searchsorted(keys, k), keys.size - 1)
        out.held_hits[undirected] += int(np.count_nonzero(keys[pos] == k))


def remove(keys: EdgeKeys) -> None:
    shutil.rmtree(keys.folder, ignore_errors=True)
