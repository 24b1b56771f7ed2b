"""What a chunk store must contain, computed the plain in-memory way (whole arrays, one sort),
for comparison with the streaming prepare, and a reader of a store's raw arrays."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store import assign_chunks


def split_codes(n: int, train, val, test) -> np.ndarray:
    codes = np.zeros(n, dtype=np.uint8)
    for code, ids in ((SPLIT_TRAIN, train), (SPLIT_VAL, val), (SPLIT_TEST, test)):
        codes[np.asarray(ids)] = code
    return codes


def reference_store(edge_index: np.ndarray, x: np.ndarray, y: np.ndarray, split: np.ndarray,
                    num_chunks: int, seed: int, add_inverse: bool = False,
                    feature_dtype=np.float32) -> dict:
    """{'chunk_of': [n], 'chunks': [{nodes, indptr, indices, x, y, split}]} as the store's dtypes."""
    n = x.shape[0]
    src, dst = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
    if add_inverse:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = src != dst
    key = np.unique(dst[keep] * n + src[keep])  # sorted by (dst, src), duplicates gone
    dst, src = key // n, key % n
    chunk_of = assign_chunks(n, num_chunks, seed)
    chunks = []
    for k in range(num_chunks):
        nodes = np.flatnonzero(chunk_of == k)
        mine = chunk_of[dst] == k
        degree = np.bincount(np.searchsorted(nodes, dst[mine]), minlength=nodes.size)
        chunks.append({"nodes": nodes.astype(np.int32), "indptr": np.r_[0, np.cumsum(degree)].astype(np.int64),
                       "indices": src[mine].astype(np.int32), "x": x[nodes].astype(feature_dtype),
                       "y": y[nodes].astype(np.int32), "split": split[nodes]})
    return {"chunk_of": chunk_of.astype(np.int16), "chunks": chunks, "num_edges": int(key.size)}


def read_store(path: Path) -> dict:
    """The store's arrays as written (dtypes included)."""
    import json
    manifest = json.loads((path / "manifest.json").read_text())
    chunks = [{name: np.load(path / f"chunk-{k}" / f"{name}.npy")
               for name in ("nodes", "indptr", "indices", "x", "y", "split")}
              for k in range(manifest["num_chunks"])]
    return {"chunk_of": np.load(path / "chunk_of.npy"), "chunks": chunks, "num_edges": manifest["num_edges"]}


def assert_same_store(got: dict, want: dict) -> None:
    assert got["num_edges"] == want["num_edges"]
    assert got["chunk_of"].dtype == want["chunk_of"].dtype
    np.testing.assert_array_equal(got["chunk_of"], want["chunk_of"])
    assert len(got["chunks"]) == len(want["chunks"])
    for k, (g, w) in enumerate(zip(got["chunks"], want["chunks"])):
        for name in w:
            assert g[name].dtype == w[name].dtype, (k, name, g[name].dtype, w[name].dtype)
            np.testing.assert_array_equal(g[name], w[name], err_msg=f"chunk {k} {name}")
