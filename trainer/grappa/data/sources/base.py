"""What a graph source gives the streaming prepare: node rows in id order, edges in parts.

A source never hands over the whole graph. Node data comes as `NodeBlock`s in ascending id
order (features, labels, split); edges as `EdgePart`s, picklable slices that any process can
read on its own, block by block. Edges may be in any order, may repeat and may contain
self-loops: the store removes both.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

# Split codes, one byte per node in the store: a node is in at most one split.
SPLIT_NONE, SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST = 0, 1, 2, 3
SPLIT_NAMES = {SPLIT_TRAIN: "train", SPLIT_VAL: "val", SPLIT_TEST: "test"}


@dataclass
class NodeBlock:
    start: int                 # global id of the first row
    x: np.ndarray              # [m, f] floating point
    y: Optional[np.ndarray]    # [m] int64, -1 = unlabelled; None when labels come from the graph
    split: np.ndarray          # [m] uint8 split codes


@dataclass
class EdgeBlock:
    src: np.ndarray            # any integer dtype
    dst: np.ndarray
    origin: str                # the file (or generator) they come from, for error messages
    first_row: int             # position of src[0] in that origin


class EdgePart(ABC):
    """A slice of a source's edges that any process can read by itself (must pickle)."""

    num_edges: int

    @abstractmethod
    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        """The part's edges, at most `block_edges` per block."""


class GraphLabeller(ABC):
    """Labels that are a function of the graph (synthetic data), computed where a node's
    in-edges are complete: per destination range while the store is finalised (must pickle)."""

    @abstractmethod
    def labels(self, nodes: np.ndarray, indptr: np.ndarray, src: np.ndarray) -> np.ndarray:
        """int64 labels of `nodes` (global ids) given their deduplicated in-edges in CSR form."""


class GraphSource(ABC):
    """A graph, read in bounded memory. Subclasses set the attributes in __init__ from metadata
    only (file headers, counts): opening a source reads no bulk data."""

    name: str
    num_nodes: int
    num_features: int
    num_edges: int                      # edges as the source lists them (before inverse edges)
    add_inverse_edges: bool             # store (dst, src) as well as every (src, dst)
    num_classes: Optional[int] = None   # None: the largest label + 1, found by the node pass
    labels_required = True              # False: a graph without any label is fine (inference)
    labeller: Optional[GraphLabeller] = None
    in_memory = False                   # arrays already in this process: never sent to workers
    # Where values come from, for error messages: the features, labels and each split code.
    feature_origin = "features"
    label_origin = "labels"
    split_origin: dict[int, str] = {}
    num_classes_setting = "dataset.arrays.numClasses"  # named when labels leave classes out

    def stage(self, staging: Path, work: Path, block_edges: int) -> dict:
        """Run once by the store's prepare before its passes, in its staging folder (files for the
        store) with a work folder for temporary files: what a source must compute first (the
        tables' id map). Sets num_nodes and num_edges if opening could not; returns what goes
        into the manifest."""
        return {}

    @abstractmethod
    def edge_parts(self, parts: int) -> list[EdgePart]:
        """The edges as up to `parts` parts (fewer when the source is one sequential stream)."""

    @abstractmethod
    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        """Node rows in ascending id order, at most `block_rows` per block."""

    @property
    def stored_edges_estimate(self) -> int:
        """Directed edges the store will hold before deduplication (sizes the spill ranges)."""
        return self.num_edges * (2 if self.add_inverse_edges else 1)
