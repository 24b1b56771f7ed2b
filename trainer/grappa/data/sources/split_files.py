"""Train/val/test membership from index lists or boolean masks, as per-node split codes."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import SPLIT_NAMES, SPLIT_NONE
from grappa.data.sources.npyio import NpyHeader, read_rows


class SplitIndex:
    """The three splits of a graph with n nodes. Index lists are held sorted in memory (8 bytes
    per split node); masks are read block by block. Every check names the file and the row."""

    def __init__(self, num_nodes: int) -> None:
        self.n = num_nodes
        self.origins: dict[int, str] = {}
        self._sorted: dict[int, np.ndarray] = {}
        self._masks: dict[int, NpyHeader] = {}

    def add_indices(self, code: int, ids: np.ndarray, origin: str) -> None:
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise DatasetError(f"{origin}: {SPLIT_NAMES[code]} indices have dtype {ids.dtype}; "
                               "save integer node ids (or a bool mask of length n)")
        bad = np.flatnonzero((ids < 0) | (ids >= self.n))
        if bad.size:
            raise DatasetError(f"{origin} row {bad[0]}: node id {ids[bad[0]]} is outside [0, {self.n}) "
                               f"(the graph has {self.n} nodes)")
        order = np.argsort(ids, kind="stable")
        s = ids[order].astype(np.int64)
        dup = np.flatnonzero(s[1:] == s[:-1])
        if dup.size:
            raise DatasetError(f"{origin} row {order[dup[0] + 1]}: node {s[dup[0]]} is listed twice; "
                               "list every node once")
        self._check_disjoint(code, s, origin)
        self._sorted[code] = s
        self.origins[code] = origin

    def add_mask(self, code: int, header: NpyHeader) -> None:
        """A bool mask file [n], read block by block."""
        self._masks[code] = header
        self.origins[code] = header.origin

    def _check_disjoint(self, code: int, s: np.ndarray, origin: str) -> None:
        for other, t in self._sorted.items():
            both = np.intersect1d(s, t)
            if both.size:
                raise DatasetError(f"node {both[0]} is in both {self.origins[other]} and {origin}: "
                                   "a node may be in one split only")

    def codes(self, start: int, stop: int) -> np.ndarray:
        """uint8 split code of nodes [start, stop)."""
        out = np.full(stop - start, SPLIT_NONE, dtype=np.uint8)
        for code, s in self._sorted.items():
            lo, hi = np.searchsorted(s, [start, stop])
            out[s[lo:hi] - start] = code
        for code, header in self._masks.items():
            mask = read_rows(header, Path(header.origin), start, stop)
            clash = np.flatnonzero(mask & (out != SPLIT_NONE))
            if clash.size:
                row = start + int(clash[0])
                first = self.origins[int(out[clash[0]])]
                raise DatasetError(f"node {row} is in both {first} and {self.origins[code]} "
                                   f"(row {row}): a node may be in one split only")
            out[mask] = code
        return out
