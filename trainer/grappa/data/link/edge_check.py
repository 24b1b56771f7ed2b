"""Refusals of supervision edge files, in bounded memory: each names the file, the edge (its
column) and the fix. A shape other than [2, E], a node id out of range, an edge in two splits
(either direction, when the graph is undirected).

Files may be memory maps of any size (the store's train.npy at load): ids are checked a block of
columns at a time; for an overlap, the smaller file's keys are sorted in memory and the larger
one is scanned against them, so a 64M-edge train.npy is never sorted or copied whole.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from grappa.data.errors import DatasetError

BLOCK = 1 << 20  # columns read at a time


def _file(where: str, name: str) -> str:
    return f"{where}/{name}" if "." in name else f"{where}/{name}.npy"


def _keys(e: np.ndarray, lo: int, hi: int, n: int, undirected: bool) -> np.ndarray:
    src, dst = np.asarray(e[0, lo:hi], np.int64), np.asarray(e[1, lo:hi], np.int64)
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * np.int64(n) + dst


def check_edges(arrays: dict[str, np.ndarray], num_nodes: int, undirected: bool, where: str,
                overlap: bool = True, block: int = BLOCK) -> None:
    names = list(arrays)
    for i, name in enumerate(names):
        e, file = arrays[name], _file(where, name)
        if e.ndim != 2 or e.shape[0] != 2:
            raise DatasetError(f"{file}: expected a [2, E] array of (source, destination) rows, "
                               f"found shape {list(e.shape)}; write sources in row 0, destinations in row 1")
        for lo in range(0, e.shape[1], block):
            cols = np.asarray(e[:, lo:lo + block])
            bad = np.flatnonzero((cols < 0).any(axis=0) | (cols >= num_nodes).any(axis=0))
            if bad.size:
                col = lo + int(bad[0])
                raise DatasetError(f"{file}: edge {col} (column {col}) is ({int(e[0, col])}, "
                                   f"{int(e[1, col])}), a node id outside [0, {num_nodes}); fix or remove "
                                   "that edge (ids are the graph's node ids)")
        if not overlap:  # a dataset's own split (OGB's), taken as published
            continue
        for prev in names[:i]:
            shared = _first_shared(arrays[prev], e, num_nodes, undirected, block)
            if shared is not None:
                col, j = shared
                raise DatasetError(
                    f"{file}: edge {col} (column {col}), ({int(e[0, col])}, {int(e[1, col])}), is "
                    f"also edge {j} of {_file(where, prev)}; an edge belongs to one split only: "
                    "remove it from one of the two files")


def _sorted(e: np.ndarray, n: int, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
    keys = _keys(e, 0, e.shape[1], n, undirected)
    order = np.argsort(keys, kind="stable")  # equal keys: the first column first
    return keys[order], order


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return pos, sorted_keys[pos] == keys


def _first_shared(a: np.ndarray, b: np.ndarray, n: int, undirected: bool,
                  block: int) -> Optional[tuple[int, int]]:
    """(first column of b whose edge is in a, first column of a with that edge), or None."""
    if not a.shape[1] or not b.shape[1]:
        return None
    col: Optional[int] = None
    if b.shape[1] <= a.shape[1]:  # b in memory, a scanned
        kb, ob = _sorted(b, n, undirected)
        for lo in range(0, a.shape[1], block):
            pos, hit = _lookup(kb, _keys(a, lo, lo + block, n, undirected))
            if hit.any():
                first = int(ob[pos[hit]].min())
                col = first if col is None else min(col, first)
    else:  # a in memory, b scanned
        ka, _ = _sorted(a, n, undirected)
        for lo in range(0, b.shape[1], block):
            _, hit = _lookup(ka, _keys(b, lo, lo + block, n, undirected))
            if hit.any():
                col = lo + int(np.flatnonzero(hit)[0])
                break
    if col is None:
        return None
    key = _keys(b, col, col + 1, n, undirected)[0]
    for lo in range(0, a.shape[1], block):
        at = np.flatnonzero(_keys(a, lo, lo + block, n, undirected) == key)
        if at.size:
            return col, lo + int(at[0])
    return None  # not reached: the key was found in a
