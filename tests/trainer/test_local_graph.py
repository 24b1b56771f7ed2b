"""data/local_graph.py: a round's local graph relabels every owned chunk's in-edges to local ids.
Both ways of relabelling the sources (a table by global id, a search among the distinct sources)
give the same graph, and each local edge's source is the store's, read here from its files."""
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.data import local_graph
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.manifest import chunk_dir
from small_jobs import csbm_job

BASE, VAR = [0, 1], 3  # owned: two base chunks and a variable one; the halo is in chunk 2 and others


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    cfg = csbm_job(tmp_path_factory.mktemp("local-graph"), **{"grappa.chunks": 6})
    return ChunkStore(cfg.store_path), Path(cfg.store_dir)


def build(store: ChunkStore, share: float, monkeypatch) -> local_graph.LocalGraph:
    monkeypatch.setattr(local_graph, "TABLE_SHARE", share)
    return local_graph.build_local_graph(store, BASE, VAR)


def test_the_table_and_the_search_relabel_alike(store, monkeypatch):
    s, _ = store
    searches = []
    search_sorted = torch.searchsorted
    monkeypatch.setattr(torch, "searchsorted", lambda *a, **k: searches.append(1) or search_sorted(*a, **k))
    table = build(s, 1e9, monkeypatch)  # any table is small enough
    assert not searches
    search = build(s, 0.0, monkeypatch)  # none is
    assert searches
    for name in ("global_ids", "indptr", "indices", "deg", "y", "split"):
        assert torch.equal(getattr(table, name), getattr(search, name)), name
    assert table.indices.dtype == torch.int32


def test_each_local_edge_has_the_stores_source(store, monkeypatch):
    s, folder = store
    g = build(s, local_graph.TABLE_SHARE, monkeypatch)
    want = np.concatenate([np.load(folder / chunk_dir(k) / "indices.npy") for k in BASE + [VAR]])
    assert np.array_equal(g.global_ids.numpy()[g.indices.numpy()], want.astype(np.int64))
    # the halo: every source the owned chunks do not hold, once each, after the owned nodes
    halo = g.global_ids[g.num_owned:].numpy()
    owned = set(g.global_ids[:g.num_owned].tolist())
    assert np.array_equal(halo, np.unique([v for v in want.tolist() if v not in owned]))
