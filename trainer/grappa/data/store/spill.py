"""Edges bucketed by destination range into append-only spill files.

Range r holds every edge whose destination lies in [r * 2^bits, (r + 1) * 2^bits). Ranges are
sized so one range fits a worker's block (`plan_range_bits`), and each range is finalised alone;
ranges are processed in ascending order, so every chunk's rows come out in ascending id order.
A record is (dst, src) in the store's id dtype. Each writing process appends to its own files
(`tag`), so no two processes write one file.
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np

MAX_RANGES = 1 << 16  # range ids stay 16-bit, which numpy radix-sorts


def plan_range_bits(num_nodes: int, edges_estimate: int, block_edges: int) -> int:
    """log2 of the destination-range width: about half a block of edges per range on average
    (skew leaves room), at most MAX_RANGES ranges, and narrow enough that (destination offset,
    source id) packs into one 64-bit sort key."""
    id_bits = max(1, (num_nodes - 1).bit_length())
    bits = min(id_bits, 63 - id_bits)
    while bits > 0 and edges_estimate * (1 << bits) > (block_edges // 2) * num_nodes:
        bits -= 1
    while ((num_nodes - 1) >> bits) >= MAX_RANGES:
        bits += 1
    return bits


class RangeSpill:
    def __init__(self, folder: Path, range_bits: int, id_dtype: np.dtype, tag: str,
                 flush_edges: int, base: int = 0) -> None:
        """Range r of this spill covers destinations [base + r * 2^bits, base + (r+1) * 2^bits)."""
        self.folder, self.bits, self.dtype, self.tag = folder, range_bits, id_dtype, tag
        self.base = base
        self.flush_edges = flush_edges
        self._src: list[np.ndarray] = []
        self._dst: list[np.ndarray] = []
        self._held = 0

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        self._src.append(src)
        self._dst.append(dst)
        self._held += src.size
        if self._held >= self.flush_edges:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        src, dst = _joined(self._src), _joined(self._dst)
        self._src, self._dst, self._held = [], [], 0
        rng = dst - self.base
        rng >>= self.bits
        rng = rng.astype(np.uint16)  # < MAX_RANGES: numpy radix-sorts 16-bit keys
        order = np.argsort(rng, kind="stable")
        ends = np.cumsum(np.bincount(rng))
        del rng
        rec = _records(dst, src, self.dtype)[order]
        del src, dst, order
        start = 0
        for r in np.flatnonzero(np.diff(ends, prepend=0)).tolist():
            with open(self.folder / f"r{r:07d}-{self.tag}.bin", "ab") as fh:
                fh.write(memoryview(rec[start:ends[r]]).cast("B"))
            start = int(ends[r])


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One array of the parts; a lone part as it is (flush only reads it), saving a block's copy."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _records(dst: np.ndarray, src: np.ndarray, id_dtype: np.dtype) -> np.ndarray:
    """One item per edge whose bytes are (dst, src) in id_dtype, so a gather moves whole records.
    int32 ids pack into one little-endian int64: dst in the low half, src in the high half."""
    if id_dtype == np.int32 and np.little_endian:
        packed = src.astype(np.int64)
        packed <<= 32
        packed |= dst
        return packed
    rec = np.empty((dst.size, 2), dtype=id_dtype)
    rec[:, 0], rec[:, 1] = dst, src
    return rec.view(np.dtype((np.void, 2 * id_dtype.itemsize))).reshape(-1)


def spill_files(folder: Path) -> dict[int, list[Path]]:
    """Files per range, ranges ascending."""
    out: dict[int, list[Path]] = defaultdict(list)
    for name in sorted(os.listdir(folder)):
        if name.startswith("r") and name.endswith(".bin"):
            out[int(name[1:8])].append(folder / name)
    return dict(sorted(out.items()))


def respill(paths: list[Path], folder: Path, bits: int, id_dtype: np.dtype, base: int,
            max_edges: int) -> dict[int, list[Path]]:
    """Spill the records of `paths` again into ranges of 2^bits destinations from `base`, read
    2 x max_edges ids at a time (a skewed range cut narrower); returns spill_files(folder)."""
    spill = RangeSpill(folder, bits, id_dtype, "s", flush_edges=max_edges, base=base)
    step = max_edges * 2
    for path in paths:
        total = path.stat().st_size // id_dtype.itemsize
        for off in range(0, total, step):
            rec = np.fromfile(path, id_dtype, count=min(step, total - off),
                              offset=off * id_dtype.itemsize).reshape(-1, 2)
            spill.add(rec[:, 1].astype(np.int64), rec[:, 0].astype(np.int64))
    spill.flush()
    return spill_files(folder)


def read_records(paths: list[Path], id_dtype: np.dtype) -> np.ndarray:
    """All (dst, src) records of the given spill files, [m, 2]."""
    parts = [np.fromfile(p, dtype=id_dtype).reshape(-1, 2) for p in paths]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]
