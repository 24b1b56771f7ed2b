"""Chunk store: seeded assignment, exact coverage, checksums, corruption and idempotency."""
from __future__ import annotations

import json

import pytest
import torch

from grappa.chunks import ChunkStore, ChunkStoreError, assign_chunks, is_prepared, prepare
from grappa.config import DatasetConfig, SyntheticConfig
from grappa.data import load_dataset

SOURCE = {"name": "csbm", "num_nodes": 1500, "split_seed": 0}
K = 4


@pytest.fixture(scope="module")
def graph():
    return load_dataset(DatasetConfig(name="csbm", synthetic=SyntheticConfig(num_nodes=1500)))


@pytest.fixture
def store(graph, tmp_path):
    prepare(graph, tmp_path / "store", K, seed=7, source=SOURCE, progress=False)
    return tmp_path / "store"


def tree_digests(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*.npy"))}


def test_assign_chunks_seeded_and_nonempty():
    a = assign_chunks(10, 10, seed=1)
    assert sorted(a.tolist()) == list(range(10))
    assert torch.equal(assign_chunks(1000, 7, 3), assign_chunks(1000, 7, 3))
    assert not torch.equal(assign_chunks(1000, 7, 3), assign_chunks(1000, 7, 4))
    with pytest.raises(ChunkStoreError, match="partitions"):
        assign_chunks(3, 4, 0)


def test_prepare_deterministic_by_seed(graph, store, tmp_path):
    again = prepare(graph, tmp_path / "again", K, seed=7, source=SOURCE, progress=False)
    other = prepare(graph, tmp_path / "other", K, seed=8, source=SOURCE, progress=False)
    manifest = json.loads((store / "manifest.json").read_text())
    assert again == manifest
    assert tree_digests(store) == tree_digests(tmp_path / "again")
    assert other["chunk_of"]["sha256"] != manifest["chunk_of"]["sha256"]
    assert not list(store.glob(".staging-*"))


def test_exact_coverage_and_degrees(graph, store):
    s = ChunkStore(store)
    chunk_of = s.chunk_of()
    n = graph.num_nodes
    seen_nodes, edges = [], []
    for k in range(K):
        c = s.load_chunk(k)
        assert torch.equal(c.nodes, torch.sort(c.nodes).values)
        assert bool((chunk_of[c.nodes] == k).all())
        assert bool((chunk_of[c.intra] == k).all())
        assert bool((chunk_of[c.bridge[0]] != k).all()) and bool((chunk_of[c.bridge[1]] == k).all())
        assert torch.equal(c.x, graph.x[c.nodes]) and torch.equal(c.y, graph.y[c.nodes])
        assert torch.equal(c.train_mask, graph.train_mask[c.nodes])
        assert torch.equal(c.test_mask, graph.test_mask[c.nodes])
        assert torch.equal(c.in_degree, torch.bincount(graph.edge_index[1], minlength=n)[c.nodes])
        seen_nodes.append(c.nodes)
        edges += [c.intra, c.bridge]
    assert torch.equal(torch.sort(torch.cat(seen_nodes)).values, torch.arange(n))
    key = lambda e: torch.sort(e[0] * n + e[1]).values  # noqa: E731
    assert torch.equal(key(torch.cat(edges, 1)), key(graph.edge_index))  # each edge exactly once
    m = s.manifest
    assert (m["num_nodes"], m["num_edges"], m["num_chunks"], m["seed"]) == (n, graph.edge_index.size(1), K, 7)
    assert sum(c["train"] for c in m["chunks"]) == int(graph.train_mask.sum())


def test_manifest_checksums(store):
    import hashlib
    m = json.loads((store / "manifest.json").read_text())
    for k, c in enumerate(m["chunks"]):
        for name, meta in c["files"].items():
            data = (store / f"chunk-{k}" / name).read_bytes()
            assert meta == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert m["chunk_of"]["sha256"] == hashlib.sha256((store / "chunk_of.npy").read_bytes()).hexdigest()


def test_load_node_rows(graph, store):
    s = ChunkStore(store)
    ids = torch.tensor([1499, 0, 17, 17, 900, 3])
    x, deg = s.load_node_rows(ids)
    assert torch.equal(x, graph.x[ids])
    assert torch.equal(deg, torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)[ids])
    s.load_node_rows(torch.tensor([5]))
    before = s.bytes_read
    s.load_node_rows(torch.tensor([5]))
    assert s.bytes_read - before == 64 * 4 + 8  # one row of x and of in_degree, not the chunk


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_corrupt_or_missing_file(store, damage):
    victim = store / "chunk-2" / "x.npy"
    if damage == "flip":
        raw = bytearray(victim.read_bytes())
        raw[-5] ^= 0xFF
        victim.write_bytes(bytes(raw))
    else:
        victim.unlink()
    s = ChunkStore(store)
    s.load_chunk(1)  # others still fine
    word = "corrupt" if damage == "flip" else "missing"
    with pytest.raises(ChunkStoreError, match=word) as err:
        s.load_chunk(2)
    assert str(victim) in str(err.value) and "re-prepare" in str(err.value)
    with pytest.raises(ChunkStoreError, match=str(victim)):
        s.load_node_rows(torch.nonzero(s.chunk_of() == 2).view(-1)[:3])


def test_missing_or_corrupt_manifest(tmp_path, store):
    with pytest.raises(ChunkStoreError, match="manifest.json is missing"):
        ChunkStore(tmp_path / "nothing")
    (store / "manifest.json").write_text("{not json")
    with pytest.raises(ChunkStoreError, match="manifest.json is corrupt"):
        ChunkStore(store)


def test_idempotent_and_mismatch(graph, store):
    assert is_prepared(store, SOURCE, K, 7)
    mtime = (store / "manifest.json").stat().st_mtime_ns
    prepare(graph, store, K, seed=7, source=dict(SOURCE), progress=False)
    assert (store / "manifest.json").stat().st_mtime_ns == mtime
    with pytest.raises(ChunkStoreError, match="num_chunks.*another storeDir"):
        is_prepared(store, SOURCE, K + 1, 7)
    with pytest.raises(ChunkStoreError, match="source.split_seed"):
        prepare(graph, store, K, seed=7, source={**SOURCE, "split_seed": 1}, progress=False)
    assert not is_prepared(store.parent / "fresh", SOURCE, K, 7)


def test_interrupted_prepare_is_not_complete(graph, tmp_path, monkeypatch):
    import grappa.chunks.writer as prep
    out = tmp_path / "store"

    def boom(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(prep, "file_digest", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare(graph, out, K, seed=1, source=SOURCE, progress=False)
    assert not is_prepared(out, SOURCE, K, 1)
    monkeypatch.undo()
    prepare(graph, out, K, seed=1, source=SOURCE, progress=False)
    assert is_prepared(out, SOURCE, K, 1) and len(ChunkStore(out).load_chunk(0).nodes) == 375
