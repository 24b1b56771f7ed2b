"""The message-passing graph of a seeded split: its training edges, streamed from train.npy.

Message passing uses the training edges only (both directions when undirected): the store's
prepare reads them from the split's own file instead of the source's edge list, so no held-out
set is looked up (or sent to worker processes) and the source is not read twice. Node rows
still come from the source.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from grappa.data.link.columns import data_offset
from grappa.data.sources.base import EdgeBlock, EdgePart, GraphSource, NodeBlock


class ColumnsPart(EdgePart):
    """Columns [lo, hi) of a [2, E] int64 .npy (picklable: a path and numbers)."""

    def __init__(self, path: Path, offset: int, columns: int, lo: int, hi: int) -> None:
        self.path, self.offset, self.columns, self.lo, self.hi = str(path), offset, columns, lo, hi
        self.num_edges = hi - lo

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        for a in range(self.lo, self.hi, block_edges):
            m = min(block_edges, self.hi - a)
            src = np.fromfile(self.path, np.int64, count=m, offset=self.offset + 8 * a)
            dst = np.fromfile(self.path, np.int64, count=m, offset=self.offset + 8 * (self.columns + a))
            yield EdgeBlock(src, dst, self.path, a)


class TrainEdgesSource(GraphSource):
    """`source`'s nodes with the edges of `train` ([2, E] .npy), inverted too when undirected."""

    def __init__(self, source: GraphSource, train: Path, undirected: bool, attrs: tuple[str, ...]) -> None:
        for attr in attrs:
            setattr(self, attr, getattr(source, attr))
        self.source, self.train = source, Path(train)
        self.offset, shape = data_offset(self.train)
        self.num_edges = int(shape[1])
        self.add_inverse_edges = bool(undirected)

    def edge_parts(self, parts: int) -> list[EdgePart]:
        bounds = np.linspace(0, self.num_edges, max(1, parts) + 1).astype(np.int64)
        return [ColumnsPart(self.train, self.offset, self.num_edges, int(lo), int(hi))
                for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        return self.source.node_blocks(block_rows)
