"""Link prediction's data beyond the in-memory built-ins: the arrays format (the seeded split of
edges.npy, or the folder's own train/val/test edge files and negatives) and OGB's link layouts
(ogbl-collab, ogbl-citation2) on small fake downloads; refusals name the file, the row and the fix."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fake_ogb import make_link_arrays, write_link_dataset
from grappa.config import ConfigError, config_with
from grappa.data.errors import DatasetError
from grappa.data.link_split import LinkEdges
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store

N = 200


def cfg_for(tmp_path: Path, dataset: dict, **over):
    data = {"partitions": 2, "task": "link-prediction", "dataset": dataset,
            "model": {"hidden": 8}, "training": {"epochs": 2},
            "link": {"evalNegatives": 7, "sharedNegatives": 50},
            "runDir": str(tmp_path / "run"), "storeDir": str(tmp_path / "store")}
    return config_with(data, over)


def stored_keys(cfg) -> set[int]:
    store = ChunkStore(cfg.store_path)
    e = torch.cat([store.load_chunk(k).edge_index for k in range(store.num_chunks)], 1).numpy()
    return set((e[0] * N + e[1]).tolist())


def keys(e, both: bool = False) -> set[int]:
    e = np.asarray(e, dtype=np.int64)
    out = set((e[0] * N + e[1]).tolist())
    return out | set((e[1] * N + e[0]).tolist()) if both else out


def graph_folder(tmp_path: Path, undirected: bool = True, seed: int = 0) -> tuple[Path, np.ndarray]:
    """An arrays folder without labels or node splits (link prediction needs neither)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, 900), rng.integers(0, N, 900)
    keep = src != dst
    e = np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)])[:, keep], axis=1)
    folder = tmp_path / "graph"
    folder.mkdir()
    np.save(folder / "edges.npy", np.concatenate([e, e[::-1]], 1) if undirected else e)
    np.save(folder / "features.npy", rng.standard_normal((N, 6)).astype(np.float32))
    return folder, e


def arrays(folder: Path) -> dict:
    return {"name": "arrays", "path": str(folder)}


def test_arrays_without_edge_files_get_the_seeded_split_and_keep_held_out_edges_out(tmp_path):
    folder, e = graph_folder(tmp_path)
    cfg = cfg_for(tmp_path, arrays(folder))
    man = prepare_store(cfg, progress=False)
    link = LinkEdges(cfg.store_path, man)
    assert link.undirected
    total = sum(link[s].shape[1] for s in ("train", "val", "test"))
    assert total == e.shape[1] and link["val"].shape[1] == int(0.1 * total)
    held = keys(link["val"], both=True) | keys(link["test"], both=True)
    stored = stored_keys(cfg)
    assert not stored & held and stored == keys(link["train"], both=True)
    assert link["val_neg"].shape == (link["val"].shape[1], 7) and link["test_shared_neg"].shape == (2, 50)


def test_arrays_edge_files_and_negatives_are_the_split(tmp_path):
    folder, e = graph_folder(tmp_path)
    perm = np.random.default_rng(1).permutation(e.shape[1])
    train, val, test = e[:, perm[:300]], e[:, perm[300:340]], e[:, perm[340:380]]
    np.save(folder / "train_edges.npy", train)
    np.save(folder / "val_edges.npy", val[::-1].copy())  # the other direction: the same undirected edge
    np.save(folder / "test_edges.npy", test)
    val_neg = np.random.default_rng(2).integers(0, N, (40, 3))
    np.save(folder / "val_neg.npy", val_neg)
    np.save(folder / "test_shared_neg.npy", np.array([[1, 2, 3], [4, 5, 6]]))
    cfg = cfg_for(tmp_path, arrays(folder))
    man = prepare_store(cfg, progress=False)
    link = LinkEdges(cfg.store_path, man)
    assert np.array_equal(link["train"], train) and np.array_equal(link["test"], test)
    assert np.array_equal(link["val_neg"], val_neg)                 # given: k = 3, not evalNegatives
    assert link["test_neg"].shape == (40, 7)                        # not given: drawn
    assert np.array_equal(link["test_shared_neg"], [[1, 2, 3], [4, 5, 6]])
    assert link["val_shared_neg"].shape == (2, 50)
    # message passing: edges.npy less the held-out edges, both directions
    stored = stored_keys(cfg)
    assert not stored & (keys(val, both=True) | keys(test, both=True))
    assert stored == keys(e, both=True) - keys(val, both=True) - keys(test, both=True)


@pytest.mark.parametrize("write, words", [
    (lambda f, e: (np.save(f / "train_edges.npy", e[:, :50]), np.save(f / "val_edges.npy", e[:, 40:60]),
                   np.save(f / "test_edges.npy", e[:, 60:70])),
     r"val_edges\.npy: edge 0 \(column 0\), .* is also edge 40 of .*train_edges\.npy; an edge belongs to one "
     "split only: remove it from one of the two files"),
    (lambda f, e: (np.save(f / "train_edges.npy", e[:, :50]), np.save(f / "val_edges.npy", e[:, 50:60]),
                   np.save(f / "test_edges.npy", np.array([[0, 1], [2, 999]]))),
     r"test_edges\.npy: edge 1 \(column 1\) is \(1, 999\), a node id outside \[0, 200\); fix or remove that edge"),
    (lambda f, e: (np.save(f / "train_edges.npy", e[:, :50]), np.save(f / "val_edges.npy", e[:, 50:60])),
     r"has train_edges\.npy, val_edges\.npy but not test_edges\.npy: give all three edge files"),
    (lambda f, e: (np.save(f / "train_edges.npy", e[:, :50]), np.save(f / "val_edges.npy", e[:, 50:60]),
                   np.save(f / "test_edges.npy", e[:, 60:70]), np.save(f / "val_neg.npy", np.zeros((9, 2), np.int64))),
     r"val_neg\.npy: expected \[10, k\], k negative destinations for each of the 10 val edges, found shape "
     r"\[9, 2\].*remove the file to draw them"),
    (lambda f, e: np.save(f / "test_neg.npy", np.zeros((3, 2), np.int64)),
     r"test_neg\.npy gives negatives for edge files that are not there"),
])
def test_bad_arrays_link_files_are_refused_naming_file_row_and_fix(tmp_path, write, words):
    folder, e = graph_folder(tmp_path)
    write(folder, e)
    with pytest.raises(DatasetError, match=words):
        prepare_store(cfg_for(tmp_path, arrays(folder)), progress=False)


@pytest.mark.parametrize("name", ["ogbl-collab", "ogbl-citation2"])
def test_ogb_link_layouts_give_their_split_and_negatives(tmp_path, name):
    arr = make_link_arrays(name, nodes=N, edges=1200)
    write_link_dataset(tmp_path / "data", name, arr)
    cfg = cfg_for(tmp_path, {"name": name, "root": str(tmp_path / "data")})
    man = prepare_store(cfg, progress=False)
    link = LinkEdges(cfg.store_path, man)
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert np.array_equal(link[ours], arr[theirs]), ours
    undirected = name == "ogbl-collab"
    assert link.undirected == undirected
    # the training graph is edge.csv.gz (OGB's train edges), both directions when undirected
    assert stored_keys(cfg) == keys(arr["train"], both=undirected)
    if undirected:  # collab: Hits@50's shared negatives given, per-positive ones drawn
        assert np.array_equal(link["val_shared_neg"], arr["valid_edge_neg"].T)
        assert link["val_neg"].shape == (arr["valid"].shape[1], 7)
    else:  # citation2: MRR's 1,000 (here 20) negatives per positive given, shared ones drawn
        assert np.array_equal(link["test_neg"], arr["test_target_node_neg"])
        assert link["test_shared_neg"].shape == (2, 50)
    assert man["num_features"] == 8


def test_an_ogb_link_dataset_trains_and_reports_mrr(tmp_path):
    from grappa.runtime.local_job import LocalJob
    write_link_dataset(tmp_path / "data", "ogbl-citation2", make_link_arrays("ogbl-citation2", nodes=N, edges=1200))
    cfg = cfg_for(tmp_path, {"name": "ogbl-citation2", "root": str(tmp_path / "data")})
    prepare_store(cfg, progress=False)
    result = LocalJob(cfg, progress=False).run()["result"]
    assert 0 < result["test_mrr"] <= 1 and 0 <= result["test_auc"] <= 1


def test_an_ogb_link_dataset_needs_the_link_task(tmp_path):
    with pytest.raises(ConfigError, match="ogbl-collab.*is an OGB link-prediction dataset.*set task: link-prediction"):
        config_with({"dataset": {"name": "ogbl-collab"}}, {})
    with pytest.raises(DatasetError, match=r"RELEASE_v1\.txt is missing.*linkproppred/collab\.zip"):
        prepare_store(cfg_for(tmp_path, {"name": "ogbl-collab", "root": str(tmp_path / "none")}), progress=False)
