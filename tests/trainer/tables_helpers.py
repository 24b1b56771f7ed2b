"""Small graphs as tables (Parquet or CSV) with the user's own ids, for the tables tests."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from grappa.config import TrainConfig
from grappa.data.store.preparation import prepare_store

CLASSES = ["fraud", "legit", "review"]


def make_ids(kind: str, n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    if kind == "string":
        return [f"acct-{i:07d}" for i in rng.permutation(10 * n)[:n]]
    if kind == "int64":  # sparse, both signs, the whole int64 range
        return rng.choice(np.iinfo(np.int64).max, n, replace=False).astype(np.int64) * rng.choice([-1, 1], n)
    if kind == "uuid":
        return [str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i)) for i in range(n)]
    raise ValueError(kind)


def graph(n: int = 300, e: int = 1500, f: int = 6, kind: str = "string", seed: int = 0) -> dict:
    """Columns of a nodes and an edges table: ids, features, string labels, a split column."""
    rng = np.random.default_rng(seed)
    ids = make_ids(kind, n, seed)
    cls = rng.integers(0, len(CLASSES), n)
    x = (rng.normal(size=(n, f)) + cls[:, None]).astype(np.float32)
    split = rng.choice(["train", "val", "test", None], n, p=[0.5, 0.2, 0.2, 0.1])
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    ids_arr = np.array(ids, dtype=object if kind != "int64" else np.int64)
    return {"nodes": {"id": list(ids_arr), "x": x, "label": [CLASSES[c] for c in cls], "split": list(split)},
            "edges": {"src": list(ids_arr[src]), "dst": list(ids_arr[dst])}, "cls": cls, "x": x,
            "src": src, "dst": dst, "ids": ids_arr}


def nodes_table(g: dict, features: str = "list") -> pa.Table:
    nd = g["nodes"]
    cols = {"id": pa.array(nd["id"]), "label": pa.array(nd["label"]), "split": pa.array(nd["split"], pa.string())}
    x = nd["x"]
    if features == "list":
        cols["features"] = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
    elif features == "varlist":
        cols["features"] = pa.array([list(map(float, r)) for r in x], pa.list_(pa.float64()))
    else:
        for j in range(x.shape[1]):
            cols[f"f_{j}"] = pa.array(x[:, j])
    return pa.table(cols)


def edges_table(g: dict) -> pa.Table:
    return pa.table({"src": pa.array(g["edges"]["src"]), "dst": pa.array(g["edges"]["dst"])})


def write(folder: Path, nodes: pa.Table, edges: pa.Table, fmt: str = "parquet", parts: int = 1) -> Path:
    """The tables in `folder`, each as `parts` files of `fmt` in a subfolder nodes/ and edges/."""
    for name, t in (("nodes", nodes), ("edges", edges)):
        d = folder / name
        d.mkdir(parents=True, exist_ok=True)
        bounds = np.linspace(0, t.num_rows, parts + 1).astype(int)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            piece = t.slice(lo, hi - lo)
            if fmt == "parquet":
                pq.write_table(piece, d / f"part-{i}.parquet")
            else:
                pacsv.write_csv(piece, d / f"part-{i}.csv")
    return folder


def config(folder: Path, root: Path, chunks: int = 3, features=("features",), **tables) -> TrainConfig:
    t = {"nodes": {"files": ["nodes"], "id": "id", "features": list(features), "label": "label",
                   "split": "split"}, "edges": {"files": ["edges"]}}
    for k, v in tables.items():
        if k in ("nodes", "edges"):
            t[k].update(v)
        else:
            t[k] = v
    return TrainConfig.model_validate({
        "partitions": 1, "grappa": {"chunks": chunks},
        "dataset": {"name": "tables", "path": str(folder), "tables": t},
        "runDir": str(root / "run"), "storeDir": str(root / "store"), "prepare": {"workers": 1}})


def prepared(cfg: TrainConfig, need_labels: bool = True) -> dict:
    from grappa.data.store.preparation import Purpose
    return prepare_store(cfg, progress=False, purpose=Purpose(need_labels=need_labels))


def store_arrays(store: Path, manifest: Optional[dict] = None) -> dict:
    """x, y, split per dense id and the edge set (pairs of dense ids) of a store."""
    import json
    m = manifest or json.loads((store / "manifest.json").read_text())
    n, f = m["num_nodes"], m["num_features"]
    x, y, split = np.zeros((n, f), np.float32), np.zeros(n, np.int64), np.zeros(n, np.uint8)
    edges = []
    for k in range(m["num_chunks"]):
        c = store / f"chunk-{k}"
        nodes = np.load(c / "nodes.npy")
        x[nodes], y[nodes], split[nodes] = np.load(c / "x.npy"), np.load(c / "y.npy"), np.load(c / "split.npy")
        indptr, indices = np.load(c / "indptr.npy"), np.load(c / "indices.npy")
        dst = np.repeat(nodes, np.diff(indptr))
        edges += list(zip(indices.tolist(), dst.tolist()))
    ids = pq.read_table(store / "node_ids.parquet").column(0).to_pylist()
    return {"x": x, "y": y, "split": split, "edges": set(edges), "ids": ids}
