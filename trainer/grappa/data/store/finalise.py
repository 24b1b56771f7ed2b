"""Finalise one destination range: sort its spilled edges by (destination, source), drop
duplicates, and cut the result into the per-chunk CSR pieces the parent appends to the store.

A range that came out larger than `max_edges` (skewed in-degrees) is spilled again into 8
narrower sub-ranges first, recursively, so memory stays bounded by the block size; only a single
node with more than `max_edges` distinct in-edges is sorted whole.
"""
from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from grappa.data.sources.base import GraphLabeller
from grappa.data.store.assign import ChunkAssignment
from grappa.data.store.spill import read_records, respill

_SPLIT_FACTOR_BITS = 3


@dataclass
class ChunkPiece:
    """A chunk's nodes inside one range, with their in-edges."""

    nodes: np.ndarray            # global ids, ascending
    degree: np.ndarray           # int64 in-degree per node
    src: np.ndarray              # source ids, by (destination, source)
    labels: Optional[np.ndarray] = None


@dataclass
class RangeResult:
    lo: int
    hi: int
    chunk_of: np.ndarray                         # chunk id of nodes lo..hi-1
    pieces: dict[int, ChunkPiece] = field(default_factory=dict)
    records: int = 0                             # spilled edges read (duplicates included)


@dataclass
class RangeTask:
    lo: int
    hi: int
    files: list[Path]
    range_bits: int
    assignment: ChunkAssignment
    id_dtype: np.dtype
    max_edges: int
    labeller: Optional[GraphLabeller] = None


def finalise_range(task: RangeTask) -> RangeResult:
    size = sum(p.stat().st_size for p in task.files) // (2 * task.id_dtype.itemsize)
    if size > task.max_edges and task.hi - task.lo > 1 and task.range_bits > 0:
        result = _finalise_split(task)
    else:
        result = _finalise_in_memory(task, read_records(task.files, task.id_dtype) if task.files
                                     else np.empty((0, 2), task.id_dtype))
    for p in task.files:
        p.unlink()
    return result


def _finalise_split(task: RangeTask) -> RangeResult:
    """Re-spill into 2^3 narrower ranges, finalise each, and join the pieces in order."""
    bits = max(0, task.range_bits - _SPLIT_FACTOR_BITS)
    folder = task.files[0].parent / f"split-{task.lo}-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    try:
        files = respill(task.files, folder, bits, task.id_dtype, task.lo, task.max_edges)
        parts = []
        for lo in range(task.lo, task.hi, 1 << bits):
            hi = min(lo + (1 << bits), task.hi)
            sub = RangeTask(lo, hi, files.get((lo - task.lo) >> bits, []), bits, task.assignment,
                            task.id_dtype, task.max_edges, task.labeller)
            parts.append(finalise_range(sub))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _join(task, parts)


def _join(task: RangeTask, parts: list[RangeResult]) -> RangeResult:
    out = RangeResult(task.lo, task.hi, np.concatenate([p.chunk_of for p in parts]),
                      records=sum(p.records for p in parts))
    for k in sorted({k for p in parts for k in p.pieces}):
        got = [p.pieces[k] for p in parts if k in p.pieces]
        labels = [g.labels for g in got]
        out.pieces[k] = ChunkPiece(
            np.concatenate([g.nodes for g in got]), np.concatenate([g.degree for g in got]),
            np.concatenate([g.src for g in got]),
            np.concatenate(labels) if labels[0] is not None else None)
    return out


def _finalise_in_memory(task: RangeTask, rec: np.ndarray) -> RangeResult:
    width = task.hi - task.lo
    src_bits = max(1, (task.assignment.num_nodes - 1).bit_length())
    # One 64-bit key per edge sorts by (destination, source); equal keys are duplicates.
    key = (rec[:, 0].astype(np.int64) - task.lo) << src_bits
    key |= rec[:, 1]
    records = rec.shape[0]
    del rec
    key.sort()
    if key.size:
        key = key[np.r_[True, key[1:] != key[:-1]]]
    dst_off = key >> src_bits
    src = (key & ((1 << src_bits) - 1)).astype(task.id_dtype)
    del key

    chunk = task.assignment.chunk_of(np.arange(task.lo, task.hi))
    node_order = np.argsort(chunk.astype(task.assignment.dtype), kind="stable")
    node_bounds = np.searchsorted(chunk[node_order], np.arange(task.assignment.num_chunks + 1))
    rank = np.empty(width, dtype=np.int64)  # position of each node among its chunk's nodes here
    rank[node_order] = np.arange(width) - node_bounds[chunk[node_order]]
    edge_chunk = chunk[dst_off]
    edge_order = np.argsort(edge_chunk.astype(task.assignment.dtype), kind="stable")
    edge_bounds = np.searchsorted(edge_chunk[edge_order], np.arange(task.assignment.num_chunks + 1))

    out = RangeResult(task.lo, task.hi, chunk.astype(task.assignment.dtype), records=records)
    for k in np.flatnonzero(np.diff(node_bounds)).tolist():
        nodes = task.lo + node_order[node_bounds[k]:node_bounds[k + 1]]
        sel = edge_order[edge_bounds[k]:edge_bounds[k + 1]]  # ascending: keeps (dst, src) order
        degree = np.bincount(rank[dst_off[sel]], minlength=nodes.size).astype(np.int64)
        piece = ChunkPiece(nodes.astype(task.id_dtype), degree, src[sel])
        if task.labeller is not None:
            indptr = np.concatenate([[0], np.cumsum(degree)])
            piece.labels = task.labeller.labels(nodes, indptr, piece.src)
        out.pieces[k] = piece
    return out
