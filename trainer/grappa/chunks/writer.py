"""Writer of the chunk store: split a graph into K seeded random chunks on shared storage.

Layout of `out_dir`: `chunk_of.npy` (chunk id per global node), `manifest.json`, and per chunk k
`chunk-<k>/{nodes,intra,bridge,x,y,masks,in_degree}.npy`. Every edge (src, dst) is stored once,
at chunk_of[dst]: in `intra` when src is in the same chunk, else in `bridge`.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm import tqdm

from grappa.chunks.assign import assign_chunks
from grappa.chunks.errors import ChunkStoreError
from grappa.chunks.manifest import (
    CHUNK_FILES, CHUNK_OF, MANIFEST, chunk_dir, file_digest, identity, is_prepared, read_manifest,
)


def prepare(data: Data, out_dir: str | Path, num_chunks: int, seed: int, source: dict,
            progress: bool = True) -> dict[str, Any]:
    """Write the store for `data` (a `load_dataset` result) and return its manifest. Idempotent:
    an existing matching store is returned untouched; a different one raises ChunkStoreError.

    Crash-safe: files go to `out_dir/.staging-*` first and `manifest.json`, the completion
    marker, is moved in last, so an interrupted prepare never looks complete.
    """
    out_dir = Path(out_dir)
    if is_prepared(out_dir, source, num_chunks, seed):
        return read_manifest(out_dir)
    _clear_leftovers(out_dir)
    n = int(data.num_nodes)
    chunk_of = assign_chunks(n, num_chunks, seed)
    staging = out_dir / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        manifest = identity(source, num_chunks, seed)
        manifest.update(_write_chunks(data, chunk_of, staging, progress))
        np.save(staging / CHUNK_OF, chunk_of.numpy())
        manifest["chunk_of"] = {"file": CHUNK_OF, **file_digest(staging / CHUNK_OF)}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        for entry in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):  # manifest last
            os.replace(entry, out_dir / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _write_chunks(data: Data, chunk_of: torch.Tensor, staging: Path, progress: bool) -> dict[str, Any]:
    n, k_total = chunk_of.numel(), int(chunk_of.max()) + 1
    src, dst = data.edge_index
    in_degree = torch.bincount(dst[src != dst], minlength=n)  # global, self-loops excluded
    # One stable sort groups the edges by (destination chunk, is-bridge): no loop over edges.
    dst_chunk = chunk_of[dst]
    key = dst_chunk * 2 + (chunk_of[src] != dst_chunk)
    del dst_chunk
    edge_count = torch.bincount(key, minlength=2 * k_total)
    edge_start = (torch.cumsum(edge_count, 0) - edge_count).tolist()
    edge_perm = torch.sort(key, stable=True).indices
    del key
    node_perm = torch.sort(chunk_of, stable=True).indices  # ids ascending inside each chunk
    node_count = torch.bincount(chunk_of, minlength=k_total)
    node_start = (torch.cumsum(node_count, 0) - node_count).tolist()
    masks = torch.stack([data.train_mask, data.val_mask, data.test_mask])

    chunks = []
    for k in tqdm(range(k_total), desc="prepare chunks", unit="chunk", disable=not progress):
        nodes = node_perm[node_start[k]:node_start[k] + int(node_count[k])]
        i0, b0 = edge_start[2 * k], edge_start[2 * k + 1]
        intra = data.edge_index[:, edge_perm[i0:i0 + int(edge_count[2 * k])]]
        bridge = data.edge_index[:, edge_perm[b0:b0 + int(edge_count[2 * k + 1])]]
        m = masks[:, nodes]
        arrays = {"nodes.npy": nodes, "intra.npy": intra, "bridge.npy": bridge,
                  "x.npy": data.x[nodes], "y.npy": data.y[nodes], "masks.npy": m,
                  "in_degree.npy": in_degree[nodes]}
        folder = staging / chunk_dir(k)
        folder.mkdir()
        files = {}
        for name in CHUNK_FILES:
            np.save(folder / name, arrays[name].contiguous().numpy())
            files[name] = file_digest(folder / name)
        chunks.append({"nodes": nodes.numel(), "intra_edges": intra.size(1),
                       "bridge_edges": bridge.size(1), "train": int(m[0].sum()),
                       "val": int(m[1].sum()), "test": int(m[2].sum()), "files": files})
    return {"num_nodes": n, "num_edges": int(data.edge_index.size(1)),
            "num_features": int(data.x.size(1)),
            "num_classes": int(getattr(data, "num_classes", None) or int(data.y.max()) + 1),
            "chunks": chunks}


def _clear_leftovers(out_dir: Path) -> None:
    """Remove what an interrupted prepare left (no manifest): only names this module writes."""
    if not out_dir.exists():
        return
    ours = [p for p in out_dir.iterdir()
            if p.name == CHUNK_OF or p.name.startswith(("chunk-", ".staging-"))]
    others = [p.name for p in out_dir.iterdir() if p not in ours]
    if others:
        raise ChunkStoreError(
            f"storeDir {out_dir} is not empty and has no {MANIFEST} (found {', '.join(sorted(others)[:5])}); "
            "use another storeDir or empty it")
    for p in ours:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
