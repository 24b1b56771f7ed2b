"""Small fake OGB node datasets in OGB's own on-disk layout, written from seeded arrays.

Stand-alone (numpy and the standard library only) so the end-to-end suite can run it inside a
pod to put a dataset on a job's volume:  python fake_ogb.py ROOT NAME [NODES EDGES FEATURES]
`make_arrays` gives the arrays the files hold, so tests can build what the store must contain.
"""
from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np

# name -> (OGB folder name, classes, split folder, binary layout)
LAYOUT = {
    "ogbn-arxiv": ("ogbn_arxiv", 40, "time", False),
    "ogbn-products": ("ogbn_products", 47, "sales_ranking", False),
    "ogbn-papers100M": ("ogbn_papers100M", 172, "time", True),
}


def make_arrays(name: str, nodes: int = 600, edges: int = 3000, features: int = 8, seed: int = 0) -> dict:
    """Edges with duplicates and self-loops (the store must drop them), float features, labels
    (papers100M: 70% unlabelled, as NaN), and a split over labelled nodes only."""
    _, classes, _, binary = LAYOUT[name]
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, edges)
    dst = rng.integers(0, nodes, edges)
    src[:5], dst[:5] = np.arange(5), np.arange(5)        # self-loops
    src[5:10], dst[5:10] = src[10:15], dst[10:15]        # duplicates
    x = rng.standard_normal((nodes, features)).astype(np.float32)
    y = rng.integers(0, classes, nodes).astype(np.float64)
    if binary:
        y[rng.random(nodes) < 0.7] = np.nan
    labelled = np.flatnonzero(~np.isnan(y))
    perm = rng.permutation(labelled)
    a, b = int(0.5 * perm.size), int(0.7 * perm.size)
    return {"edge_index": np.stack([src, dst]).astype(np.int64), "x": x, "y": y,
            "train": np.sort(perm[:a]), "valid": np.sort(perm[a:b]), "test": np.sort(perm[b:]),
            "num_classes": classes}


def _csv(path: Path, rows: np.ndarray, fmt: str) -> None:
    with gzip.open(path, "wt") as fh:
        np.savetxt(fh, rows, fmt=fmt, delimiter=",")


def write_dataset(root: Path, name: str, arrays: dict) -> Path:
    folder_name, _, split_name, binary = LAYOUT[name]
    folder = Path(root) / folder_name
    raw, split = folder / "raw", folder / "split" / split_name
    raw.mkdir(parents=True, exist_ok=True)
    split.mkdir(parents=True, exist_ok=True)
    n, e = arrays["x"].shape[0], arrays["edge_index"].shape[1]
    if binary:
        np.savez_compressed(raw / "data.npz", edge_index=arrays["edge_index"],
                            num_nodes_list=np.array([n]), num_edges_list=np.array([e]),
                            node_feat=arrays["x"])
        np.savez_compressed(raw / "node-label.npz", node_label=arrays["y"].reshape(-1, 1))
    else:
        _csv(raw / "edge.csv.gz", arrays["edge_index"].T, "%d")
        _csv(raw / "num-node-list.csv.gz", np.array([[n]]), "%d")
        _csv(raw / "num-edge-list.csv.gz", np.array([[e]]), "%d")
        _csv(raw / "node-feat.csv.gz", arrays["x"], "%.9g")  # %.9g round-trips float32 exactly
        _csv(raw / "node-label.csv.gz", arrays["y"].reshape(-1, 1), "%d")
    for key in ("train", "valid", "test"):
        _csv(split / f"{key}.csv.gz", arrays[key].reshape(-1, 1), "%d")
    (folder / "RELEASE_v1.txt").write_text("fake dataset written by the Grappa test suite\n")
    return folder


# OGB link datasets: name -> (OGB folder name, undirected, negatives given per positive (citation2)
# or as a shared set (collab))
LINK_LAYOUT = {
    "ogbl-collab": ("ogbl_collab", True, "shared"),
    "ogbl-citation2": ("ogbl_citation2", False, "per_positive"),
}


def make_link_arrays(name: str, nodes: int = 300, edges: int = 1500, features: int = 8, seed: int = 0,
                     negatives: int = 20) -> dict:
    """A graph and OGB's kind of split: held-out edges that are not in the training graph
    (edge.csv.gz holds training edges only), with the negatives OGB gives for the dataset."""
    _, undirected, kind = LINK_LAYOUT[name]
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    keep = src != dst
    pairs = np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)] if undirected else [src, dst])[:, keep],
                      axis=1)
    perm = rng.permutation(pairs.shape[1])
    a, b = int(0.8 * perm.size), int(0.9 * perm.size)
    out = {"x": rng.standard_normal((nodes, features)).astype(np.float32),
           "train": pairs[:, np.sort(perm[:a])], "valid": pairs[:, perm[a:b]], "test": pairs[:, perm[b:]]}
    for split in ("valid", "test"):
        e = out[split].shape[1]
        if kind == "shared":
            out[f"{split}_edge_neg"] = rng.integers(0, nodes, (negatives * 5, 2))
        else:
            out[f"{split}_target_node_neg"] = rng.integers(0, nodes, (e, negatives))
    return out


def write_link_dataset(root: Path, name: str, arrays: dict) -> Path:
    """OGB's link layout; the split's .pt files need torch (OGB writes them with torch.save)."""
    import torch
    folder_name, _, kind = LINK_LAYOUT[name]
    folder = Path(root) / folder_name
    raw, split = folder / "raw", folder / "split" / "time"
    raw.mkdir(parents=True, exist_ok=True)
    split.mkdir(parents=True, exist_ok=True)
    n, train = arrays["x"].shape[0], arrays["train"]
    _csv(raw / "edge.csv.gz", train.T, "%d")
    _csv(raw / "num-node-list.csv.gz", np.array([[n]]), "%d")
    _csv(raw / "num-edge-list.csv.gz", np.array([[train.shape[1]]]), "%d")
    _csv(raw / "node-feat.csv.gz", arrays["x"], "%.9g")
    for key in ("train", "valid", "test"):
        e = arrays[key]
        if kind == "shared":  # collab: edges as [E, 2] with their weight and year
            d = {"edge": e.T.copy(), "weight": np.ones(e.shape[1]), "year": np.full(e.shape[1], 2018)}
            if key != "train":
                d["edge_neg"] = arrays[f"{key}_edge_neg"]
        else:
            d = {"source_node": e[0].copy(), "target_node": e[1].copy()}
            if key != "train":
                d["target_node_neg"] = arrays[f"{key}_target_node_neg"]
        torch.save(d, split / f"{key}.pt")
    (folder / "RELEASE_v1.txt").write_text("fake dataset written by the Grappa test suite\n")
    return folder


if __name__ == "__main__":
    root, name, *sizes = sys.argv[1:]
    out = write_dataset(Path(root), name, make_arrays(name, *map(int, sizes)))
    print(f"wrote {out}")
