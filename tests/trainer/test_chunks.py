"""Chunk store: seeded balanced assignment, exact coverage, checksums, corruption, idempotency,
and the refusal of older stores."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from grappa.config import DatasetConfig, SyntheticConfig
from grappa.data.datasets import load_dataset
from grappa.data.errors import ChunkStoreError
from grappa.data.idhash import IdPermutation
from grappa.data.sources.in_memory import from_data
from grappa.data.store import ChunkAssignment, assign_chunks, is_prepared, prepare
from grappa.data.store.chunk_store import ChunkStore

SOURCE = {"name": "csbm", "num_nodes": 1500, "split_seed": 0}
K = 4


@pytest.fixture(scope="module")
def graph():
    return load_dataset(DatasetConfig(name="csbm", synthetic=SyntheticConfig(num_nodes=1500)))


def write(graph, out, k=K, seed=7, source=SOURCE):
    return prepare(from_data("csbm", graph), out, k, seed=seed, source_id=source, progress=False)


@pytest.fixture
def store(graph, tmp_path):
    write(graph, tmp_path / "store")
    return tmp_path / "store"


def tree_bytes(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*.npy"))}


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 100, 1000, 4097])
def test_id_permutation_is_a_bijection(n):
    assert sorted(IdPermutation(n, 3, 1)(np.arange(n)).tolist()) == list(range(n))


def test_assignment_is_seeded_balanced_and_never_empty():
    assert sorted(assign_chunks(10, 10, seed=1).tolist()) == list(range(10))
    a, b, c = assign_chunks(100_003, 7, 3), assign_chunks(100_003, 7, 3), assign_chunks(100_003, 7, 4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    sizes = np.bincount(a, minlength=7)
    assert sizes.max() - sizes.min() <= 1
    assert [ChunkAssignment(100_003, 7, 3).size(k) for k in range(7)] == sizes.tolist()
    # random, not striped: neighbouring ids land in the same chunk about 1/K of the time
    assert abs(float(np.mean(a[1:] == a[:-1])) - 1 / 7) < 0.01
    with pytest.raises(ChunkStoreError, match="partitions"):
        assign_chunks(3, 4, 0)


def test_prepare_deterministic_by_seed(graph, store, tmp_path):
    again = write(graph, tmp_path / "again")
    other = write(graph, tmp_path / "other", seed=8)
    manifest = json.loads((store / "manifest.json").read_text())
    again.pop("prepare"), manifest.pop("prepare")
    assert again == manifest
    assert tree_bytes(store) == tree_bytes(tmp_path / "again")
    assert other["chunk_of"]["sha256"] != manifest["chunk_of"]["sha256"]
    assert not list(store.glob(".staging-*"))


def test_exact_coverage_and_degrees(graph, store):
    s = ChunkStore(store)
    chunk_of = s.chunk_of()
    n = graph.num_nodes
    seen_nodes, edges = [], []
    in_degree = torch.bincount(graph.edge_index[1], minlength=n)
    for k in range(K):
        c = s.load_chunk(k)
        assert torch.equal(c.nodes, torch.sort(c.nodes).values)
        assert bool((chunk_of[c.nodes] == k).all())
        assert bool((chunk_of[c.edge_index[1]] == k).all())  # every in-edge lives at its destination
        assert torch.equal(c.x, graph.x[c.nodes]) and torch.equal(c.y, graph.y[c.nodes])
        assert torch.equal(c.train_mask, graph.train_mask[c.nodes])
        assert torch.equal(c.test_mask, graph.test_mask[c.nodes])
        assert torch.equal(c.in_degree, in_degree[c.nodes])
        seen_nodes.append(c.nodes)
        edges.append(c.edge_index)
    assert torch.equal(torch.sort(torch.cat(seen_nodes)).values, torch.arange(n))
    key = lambda e: torch.sort(e[0] * n + e[1]).values  # noqa: E731
    assert torch.equal(key(torch.cat(edges, 1)), key(graph.edge_index))  # each edge exactly once
    m = s.manifest
    assert (m["num_nodes"], m["num_edges"], m["num_chunks"], m["seed"]) == (n, graph.edge_index.size(1), K, 7)
    assert sum(c["train"] for c in m["chunks"]) == int(graph.train_mask.sum())
    assert (m["id_dtype"], m["feature_dtype"]) == ("<i4", "<f4")


def test_manifest_checksums_cover_the_data_and_headers_match(store):
    m = json.loads((store / "manifest.json").read_text())
    for k, c in enumerate(m["chunks"]):
        for name, meta in c["files"].items():
            path = store / f"chunk-{k}" / name
            arr = np.load(path, mmap_mode="r")
            data = path.read_bytes()[arr.offset:]
            assert meta == {"dtype": arr.dtype.str, "shape": list(arr.shape), "data_bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()}
    assert np.load(store / "chunk_of.npy").dtype == np.int16


def test_load_node_rows(graph, store):
    s = ChunkStore(store)
    ids = torch.tensor([1499, 0, 17, 17, 900, 3])
    x, deg = s.load_node_rows(ids)
    assert torch.equal(x, graph.x[ids])
    assert torch.equal(deg, torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)[ids])
    s.load_node_rows(torch.tensor([5]))
    before = s.bytes_read
    s.load_node_rows(torch.tensor([5]))
    assert s.bytes_read - before == 64 * 4 + 2 * 8  # one row of x, two of indptr: not the chunk


@pytest.mark.parametrize("damage", ["flip", "delete", "header"])
def test_corrupt_or_missing_file(store, damage):
    victim = store / "chunk-2" / "x.npy"
    if damage == "flip":
        raw = bytearray(victim.read_bytes())
        raw[-5] ^= 0xFF
        victim.write_bytes(bytes(raw))
    elif damage == "header":  # a plausible file of another shape
        np.save(victim, np.zeros((3, 64), np.float32))
    else:
        victim.unlink()
    s = ChunkStore(store)
    s.load_chunk(1)  # others still fine
    word = "missing" if damage == "delete" else "corrupt"
    with pytest.raises(ChunkStoreError, match=word) as err:
        s.load_chunk(2)
    assert str(victim) in str(err.value) and "grappa prepare" in str(err.value)
    with pytest.raises(ChunkStoreError, match=str(victim)):
        s.load_node_rows(torch.nonzero(s.chunk_of() == 2).view(-1)[:3])


def test_missing_or_corrupt_manifest(tmp_path, store):
    with pytest.raises(ChunkStoreError, match="manifest.json is missing"):
        ChunkStore(tmp_path / "nothing")
    (store / "manifest.json").write_text("{not json")
    with pytest.raises(ChunkStoreError, match="manifest.json is corrupt"):
        ChunkStore(store)


def test_a_format_1_store_is_refused_with_the_fix(graph, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_text(json.dumps({"format": 1, "source": SOURCE, "num_chunks": K,
                                                   "seed": 7, "num_nodes": 1500, "chunks": [],
                                                   "chunk_of": {}}))
    (old / "chunk-0").mkdir()
    for attempt in (lambda: ChunkStore(old), lambda: write(graph, old)):
        with pytest.raises(ChunkStoreError) as err:
            attempt()
        msg = str(err.value)
        assert "format 1" in msg and "older Grappa" in msg and f"delete {old}" in msg
        assert "grappa prepare" in msg
    assert (old / "chunk-0").is_dir()  # nothing regenerated or removed behind the user's back


def test_idempotent_and_mismatch(graph, store):
    assert is_prepared(store, SOURCE, K, 7)
    mtime = (store / "manifest.json").stat().st_mtime_ns
    write(graph, store, source=dict(SOURCE))
    assert (store / "manifest.json").stat().st_mtime_ns == mtime
    with pytest.raises(ChunkStoreError, match="num_chunks.*another storeDir"):
        is_prepared(store, SOURCE, K + 1, 7)
    with pytest.raises(ChunkStoreError, match="source.split_seed"):
        write(graph, store, source={**SOURCE, "split_seed": 1})
    assert not is_prepared(store.parent / "fresh", SOURCE, K, 7)


def test_interrupted_prepare_is_not_complete(graph, tmp_path, monkeypatch):
    import grappa.data.store.writer as prep
    out = tmp_path / "store"

    def boom(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(prep, "finalise_range", boom)
    with pytest.raises(KeyboardInterrupt):
        write(graph, out, seed=1)
    assert not is_prepared(out, SOURCE, K, 1)
    monkeypatch.undo()
    write(graph, out, seed=1)
    assert is_prepared(out, SOURCE, K, 1) and len(ChunkStore(out).load_chunk(0).nodes) == 375
