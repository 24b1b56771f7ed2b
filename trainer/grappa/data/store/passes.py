"""The two streaming passes over a source, each runnable in a worker process.

- Node pass: node rows in id order -> each chunk's x, y and split files (appends stay in
  ascending id order), with every value checked as it passes.
- Edge pass: one edge part -> validated, self-loops dropped, reverse edges added when the source
  says so -> the destination-range spill files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import EdgePart, GraphSource
from grappa.data.sources.checks import check_edge_ids, check_labels, checked_features
from grappa.data.store.assign import ChunkAssignment
from grappa.data.store.feature_codec import SPARSE, Codec, sparse_width
from grappa.data.store.manifest import chunk_dir
from grappa.data.store.npywriter import NpyWriter
from grappa.data.store.prepare_progress import Counters
from grappa.data.store.spill import RangeSpill


def block_rows(block_edges: int) -> int:
    """Node rows per block: a node row costs about as much as 16 spilled edges."""
    return max(1024, block_edges // 16)


@dataclass
class Plan:
    """What every pass needs to agree on (pickled to the worker processes)."""

    num_nodes: int
    num_chunks: int
    seed: int
    id_dtype: np.dtype
    feature_dtype: str  # a feature_codec encoding (auto already resolved)
    range_bits: int
    block_edges: int
    staging: Path
    spill: Path
    sparse_width: int = 0  # sparse: found already when auto chose it (0: node_pass finds it)

    @property
    def assignment(self) -> ChunkAssignment:
        return ChunkAssignment(self.num_nodes, self.num_chunks, self.seed)

    @property
    def block_rows(self) -> int:
        return block_rows(self.block_edges)


def node_pass(source: GraphSource, plan: Plan, counters: Counters) -> dict[str, Any]:
    """Write x.npy, split.npy (and y.npy unless the graph labels itself) of every chunk."""
    assign = plan.assignment
    f = source.num_features
    # sparse rows are as wide as the fullest row: one more read of the features finds it
    width = 0
    if plan.feature_dtype == SPARSE:
        width = plan.sparse_width or sparse_width(b.x for b in source.node_blocks(plan.block_rows))
    codec = Codec(plan.feature_dtype, f, width)
    writers: dict[str, list[NpyWriter]] = {"x.npy": [], "split.npy": [], "y.npy": []}
    for k in range(plan.num_chunks):
        folder = plan.staging / chunk_dir(k)
        folder.mkdir(exist_ok=True)
        rows = assign.size(k)
        writers["x.npy"].append(NpyWriter(folder / "x.npy", codec.dtype, (codec.columns,), rows))
        writers["split.npy"].append(NpyWriter(folder / "split.npy", np.uint8, (), rows))
        if source.labeller is None:
            writers["y.npy"].append(NpyWriter(folder / "y.npy", np.int32, (), rows))
    split_counts = np.zeros((plan.num_chunks, 4), dtype=np.int64)
    max_label, seen = -1, 0
    used: set[int] = set()  # label ids present, when the class count is left to the data
    for block in source.node_blocks(plan.block_rows):
        m = block.x.shape[0]
        if block.start != seen or block.x.shape[1:] != (f,):
            raise DatasetError(f"{source.feature_origin}: rows from {block.start} have shape "
                               f"{block.x.shape[1:]}, expected ({f},)")
        x = checked_features(block.x, codec, source, block.start)
        if block.y is not None:
            max_label = max(max_label, check_labels(block.y, block.split, source, block.start))
            if source.num_classes is None:
                used.update(np.unique(block.y[block.y >= 0]).tolist())
        chunk = assign.chunk_of(np.arange(block.start, block.start + m))
        order = np.argsort(chunk.astype(assign.dtype), kind="stable")
        bounds = np.searchsorted(chunk[order], np.arange(plan.num_chunks + 1))
        for k in range(plan.num_chunks):
            sel = order[bounds[k]:bounds[k + 1]]
            if not sel.size:
                continue
            writers["x.npy"][k].append(x[sel])
            writers["split.npy"][k].append(block.split[sel])
            if block.y is not None:
                writers["y.npy"][k].append(block.y[sel])
            split_counts[k] += np.bincount(block.split[sel], minlength=4)[:4]
        seen += m
        counters.add(nodes=m)
    if seen != source.num_nodes:
        raise DatasetError(f"{source.feature_origin} has {seen} rows but the graph has "
                           f"{source.num_nodes} nodes")
    files = {name: [w.close() for w in ws] for name, ws in writers.items() if ws}
    return {"files": files, "split_counts": split_counts.tolist(), "max_label": max_label,
            "labels_used": sorted(used), "codec": codec.manifest_fields()}


def edge_pass(part: EdgePart, source_nodes: int, add_inverse: bool, plan: Plan,
              counters: Counters, tag: Optional[str] = None) -> int:
    """Spill one part's edges; returns the number of edges read."""
    n = source_nodes
    # a block's two directions are written one at a time: holding both doubles a flush's buffers
    spill = RangeSpill(plan.spill, plan.range_bits, plan.id_dtype, tag or f"p{os.getpid()}",
                       flush_edges=max(1, plan.block_edges // 2))
    read = 0
    for block in part.blocks(plan.block_edges):
        check_edge_ids(block, n)
        # in range now, so the store's id dtype holds them: int32 ids halve the pass's buffers
        src, dst = block.src.astype(plan.id_dtype, copy=False), block.dst.astype(plan.id_dtype, copy=False)
        keep = src != dst
        if not keep.all():
            src, dst = src[keep], dst[keep]
        spill.add(src, dst)
        if add_inverse:
            spill.add(dst, src)
        read += block.src.size
        counters.add(edges=block.src.size)
    spill.flush()
    return read
