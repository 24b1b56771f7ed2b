"""The link split made out of core (data/link/): the same split whatever the block size (so
whatever the memory setting), RandomLinkSplit's exact counts, and a working memory bounded by
the block, not by the graph."""
from __future__ import annotations

import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from grappa.data.idhash import hash64
from grappa.data.link import edge_keys as edge_keys_module
from grappa.data.link_split import split_edges, split_source
from grappa.data.sources.base import EdgeBlock, EdgePart, GraphSource

SPLITS = ("train", "val", "test")


def canonical(e: np.ndarray, n: int) -> set[int]:
    return set((np.minimum(e[0], e[1]) * n + np.maximum(e[0], e[1])).tolist())


def directed(e: np.ndarray, n: int) -> set[int]:
    return set((np.asarray(e[0], np.int64) * n + e[1]).tolist())


@pytest.mark.parametrize("undirected", [True, False])
def test_the_split_is_the_same_whatever_the_block_and_its_counts_are_randomlinksplits(undirected, monkeypatch):
    n = 300
    rng = np.random.default_rng(5)
    e = rng.integers(0, n, (2, 4000))
    e[:, :40] = e[0, :40]  # self-loops: never candidates
    e[:, 40:400] = e[:, 400:760]  # duplicates: one candidate each
    if undirected:
        e = np.concatenate([e, e[::-1]], axis=1)[:, rng.permutation(2 * e.shape[1])]
    ref = split_edges(e, n, 0.15, 0.25, seed=3)
    assert ref.undirected == undirected
    keep = e[0] != e[1]
    cand = canonical(e[:, keep], n) if undirected else directed(e[:, keep], n)
    m = len(cand)
    key = canonical if undirected else directed
    parts = [key(getattr(ref, s), n) for s in SPLITS]
    assert [len(p) for p in parts] == [m - int(0.15 * m) - int(0.25 * m), int(0.15 * m), int(0.25 * m)]
    assert set().union(*parts) == cand and sum(map(len, parts)) == m  # each candidate once
    if undirected:
        assert np.all(ref.train[0] < ref.train[1])  # written (min, max)
    for block in (7, 64, 1 << 12):
        other = split_edges(e[:, ::-1], n, 0.15, 0.25, seed=3, block_edges=block)
        assert all(np.array_equal(getattr(ref, s), getattr(other, s)) for s in SPLITS), block
    # one range over the whole graph at a tiny block: split again into narrower ranges, recursively
    monkeypatch.setattr(edge_keys_module, "plan_range_bits", lambda *a: 9)
    narrow = split_edges(e, n, 0.15, 0.25, seed=3, block_edges=16)
    assert all(np.array_equal(getattr(ref, s), getattr(narrow, s)) for s in SPLITS)
    assert not np.array_equal(split_edges(e, n, 0.15, 0.25, seed=4).test, ref.test)


class HashedEdges(EdgePart):
    """Edges i in [lo, hi) from a hash of i: a graph of any size, never held, honouring the block."""

    def __init__(self, n: int, lo: int, hi: int) -> None:
        self.n, self.lo, self.hi, self.num_edges = n, lo, hi, hi - lo

    def blocks(self, block_edges: int):
        for a in range(self.lo, self.hi, block_edges):
            h = hash64(np.arange(a, min(self.hi, a + block_edges)), 7)
            n = np.uint64(self.n)
            yield EdgeBlock((h % n).astype(np.int64), ((h >> np.uint64(32)) % n).astype(np.int64), "hashed", a)


class HashedGraph(GraphSource):
    def __init__(self, n: int, e: int) -> None:
        self.name, self.num_nodes, self.num_features, self.num_edges = "hashed", n, 0, e
        self.add_inverse_edges = True

    def edge_parts(self, parts: int):
        return [HashedEdges(self.num_nodes, 0, self.num_edges)]

    def node_blocks(self, block_rows: int):
        return iter(())


BLOCK = 1 << 13
LINK = SimpleNamespace(val_fraction=0.1, test_fraction=0.2, split_seed=0, eval_negatives=20, shared_negatives=500)


def traced_split(tmp: Path, edges: int) -> tuple[int, dict]:
    """Peak bytes numpy and Python allocated while the split was made, and its manifest entry."""
    src = HashedGraph(1 << 16, edges)
    tracemalloc.start()
    try:
        message, entry = split_source(src, LINK, None, tmp / "staging", tmp / "work", BLOCK)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message.num_edges == entry["link"]["files"]["train"][1] and message.add_inverse_edges
    return peak, entry


def test_the_split_working_memory_is_bounded_by_the_block_not_the_graph(tmp_path):
    small, big = 8 * BLOCK, 64 * BLOCK  # 65k and 524k edges: 8x and 64x the block
    peak_small, _ = traced_split(tmp_path / "s", small)
    peak_big, entry = traced_split(tmp_path / "b", big)
    m = sum(entry["link"]["files"][s][1] for s in SPLITS)
    assert m > 0.95 * big and entry["link"]["files"]["val"][1] == int(0.1 * m)
    # Holding the edge list alone would take 16 B x 524k = 8 MiB (the in-memory split held ~6x
    # that); the block bounds the spill buffer and one range (~100 B an edge of a block), plus
    # constants: the rank histogram and its sums (3 x 512 KiB) and the 1 MiB read of a hash.
    assert peak_big < 100 * BLOCK + (3 << 20), (peak_small, peak_big)
    # flat as the graph grows 8x (the spill buffer holds one to two blocks, by where blocks fall)
    assert peak_big - peak_small < 64 * BLOCK, (peak_small, peak_big)


@pytest.mark.parametrize("undirected", [True, False])
def test_an_edge_in_two_files_is_named_by_its_first_columns_whatever_the_block(undirected):
    """The overlap refusal scans the larger file in blocks (the store's train.npy at load): it
    names the first column of the later file whose edge the earlier one has, and that edge's
    first column there, as a straightforward search does."""
    from grappa.data.errors import DatasetError
    from grappa.data.link.edge_check import check_edges
    rng = np.random.default_rng(1)
    n = 30
    for trial in range(20):
        a, b = rng.integers(0, n, (2, int(rng.integers(1, 60)))), rng.integers(0, n, (2, int(rng.integers(1, 60))))
        norm = (lambda e: (min(e), max(e))) if undirected else tuple
        first_a = {}
        for j in range(a.shape[1]):
            first_a.setdefault(norm(a[:, j].tolist()), j)
        hits = [(c, first_a[norm(b[:, c].tolist())]) for c in range(b.shape[1]) if norm(b[:, c].tolist()) in first_a]
        for block in (1, 3, 1 << 20):
            arrays = {"train": a, "val": b} if trial % 2 else {"train": b[:, :0], "val": a, "test": b}
            later, earlier = ("val", "train") if trial % 2 else ("test", "val")
            if not hits:
                check_edges(arrays, n, undirected, "link", block=block)
                continue
            col, j = hits[0]
            with pytest.raises(DatasetError, match=rf"link/{later}\.npy: edge {col} \(column {col}\), .* is also "
                                                   rf"edge {j} of link/{earlier}\.npy"):
                check_edges(arrays, n, undirected, "link", block=block)
