"""A graph already in memory (small built-ins, CSBM, a saved PyG Data) as a source."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import (
    SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, EdgeBlock, EdgePart, GraphSource, NodeBlock
)


class MemoryEdges(EdgePart):
    def __init__(self, src: np.ndarray, dst: np.ndarray) -> None:
        self.src, self.dst = src, dst
        self.num_edges = int(src.size)

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        for lo in range(0, self.num_edges, block_edges):
            yield EdgeBlock(self.src[lo:lo + block_edges], self.dst[lo:lo + block_edges], "edge_index", lo)


class MemorySource(GraphSource):
    """Arrays as numpy: edge_index [2, E], x [n, f], y [n] (-1 unlabelled), bool masks [n]."""

    in_memory = True

    def __init__(self, name: str, edge_index: np.ndarray, x: np.ndarray, y: np.ndarray,
                 masks: tuple[np.ndarray, np.ndarray, np.ndarray], num_classes: int) -> None:
        self.name = name
        self.edge_index, self.x, self.y = edge_index, x, y
        self.num_nodes, self.num_features = x.shape
        self.num_edges = int(edge_index.shape[1])
        self.num_classes = num_classes
        self.add_inverse_edges = False
        self.feature_origin, self.label_origin = f"{name} x", f"{name} y"
        self.split_origin = {SPLIT_TRAIN: "train_mask", SPLIT_VAL: "val_mask", SPLIT_TEST: "test_mask"}
        overlap = np.flatnonzero(np.sum(masks, axis=0) > 1)
        if overlap.size:
            raise DatasetError(f"{name}: node {overlap[0]} is in more than one of train_mask, "
                               "val_mask and test_mask; a node may be in one split only")
        self.codes = np.full(self.num_nodes, SPLIT_NONE, dtype=np.uint8)
        for code, mask in zip((SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST), masks):
            self.codes[mask] = code

    def edge_parts(self, parts: int) -> list[EdgePart]:
        return [MemoryEdges(self.edge_index[0], self.edge_index[1])]

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        for lo in range(0, self.num_nodes, block_rows):
            hi = min(lo + block_rows, self.num_nodes)
            yield NodeBlock(lo, self.x[lo:hi], self.y[lo:hi], self.codes[lo:hi])


def from_data(name: str, data) -> MemorySource:
    """A `load_dataset` result (a PyG Data with masks and num_classes) as a source."""
    masks = tuple(getattr(data, m).numpy() for m in ("train_mask", "val_mask", "test_mask"))
    return MemorySource(name, data.edge_index.numpy(), data.x.numpy(), data.y.numpy(), masks,
                        int(data.num_classes))
