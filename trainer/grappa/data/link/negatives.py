"""The evaluation's negatives, seeded per split (streams apart from the split's own hash).

- Per positive: k corrupted destinations, uniform over all nodes (ogbl-citation2's protocol for
  MRR), [E, k]. Drawn and written a block of rows at a time: numpy's Generator gives the same
  numbers in blocks as at once, so the file is the same whatever the block.
- Shared: N uniform pairs (u != v) that are no edge of the graph (any split; either direction
  when undirected), [2, N] (ogbl-collab's protocol for Hits@K; AUC is measured against them).
  Candidates are drawn in rounds and checked against the sorted edge keys by one scan of the
  file per round, not against a set of every edge.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.link.edge_keys import EdgeKeys
from grappa.data.store.npywriter import NpyWriter

SUPERVISION = ("train", "val", "test")
_NEG_STREAM, _SHARED_STREAM = 1, 2  # seed streams of the negatives


def _rng(seed: int, stream: int, split: str) -> np.random.Generator:
    return np.random.default_rng([seed, stream, SUPERVISION.index(split)])


def eval_negatives(count: int, num_nodes: int, k: int, seed: int, split: str) -> np.ndarray:
    """[count, k] in memory (a given split's, whose positives are in memory already)."""
    return _rng(seed, _NEG_STREAM, split).integers(0, num_nodes, size=(count, k), dtype=np.int64)


def write_eval_negatives(path: Path, count: int, num_nodes: int, k: int, seed: int, split: str,
                         block: int) -> tuple[list[int], str]:
    """The same array as eval_negatives, written about `block` ids at a time; its shape and
    data sha256."""
    rng = _rng(seed, _NEG_STREAM, split)
    out = NpyWriter(path, np.int64, (k,), count)
    rows = max(1, block // k)
    for lo in range(0, count, rows):
        out.append(rng.integers(0, num_nodes, size=(min(rows, count - lo), k), dtype=np.int64))
    entry = out.close()
    return entry["shape"], entry["sha256"]


def shared_negatives(keys: EdgeKeys, count: int, seed: int, split: str, block: int,
                     extra: Optional[np.ndarray] = None, extra_edges: int = 0) -> np.ndarray:
    """[2, count] non-edges. `extra`: edge keys (edge_keys.record_keys) beyond the graph's, e.g.
    a given split's edges, `extra_edges` of them."""
    n = keys.num_nodes
    if keys.directed_edges + extra_edges >= n * (n - 1) - count:
        raise DatasetError(f"the graph has too few non-edges for link.sharedNegatives ({count}): "
                           "lower it")
    rng = _rng(seed, _SHARED_STREAM, split)
    got: list[np.ndarray] = []
    have = 0
    while have < count:
        want = 2 * (count - have) + 16
        a, b = rng.integers(0, n, size=want), rng.integers(0, n, size=want)
        ok = a != b
        a, b = a[ok], b[ok]
        ok = ~keys.contains(a, b, block, extra)
        got.append(np.stack([a[ok], b[ok]]))
        have += int(ok.sum())
    return np.concatenate(got, axis=1)[:, :count]
