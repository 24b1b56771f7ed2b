"""Training's exact evaluation on the inference pass: each worker computes its base chunks' rows
layer by layer into row files on the shared volume (the run directory), and after a barrier
through the aggregator reads its halo rows from the other workers' files. Only a one-element
message per layer crosses the network; no process holds a num_nodes x width tensor.

The files are rewritten at every evaluation: each is replaced by rename, and a pass opens fresh
maps, so it never reads the previous evaluation's rows.

With a run home in the bucket (storage.s3.runPrefix, `home`), there is no shared volume: each
worker writes its rows into its own folder, uploads each file before the layer's barrier, and
downloads the other workers' files as it reads them (data/s3/run_home.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from grappa.data.rowfiles import LayerRows, layer_file
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.chunk_store import ChunkStore
from grappa.models import GNN
from grappa.models.layerwise import DEFAULT_BLOCK_EDGES, StoreGraph, compute_chunk, write_chunk


class LayerwiseEvaluation:
    def __init__(self, store: ChunkStore, chunks: list[int], scratch: Path,
                 block_edges: int = DEFAULT_BLOCK_EDGES, home=None) -> None:
        self.g = StoreGraph(store)
        self.chunks, self.scratch, self.block_edges = list(chunks), Path(scratch), block_edges
        self.home = home

    def rows(self, layer: int) -> LayerRows:
        """Layer `layer`'s rows of every chunk, for one pass."""
        return LayerRows(self.scratch, layer, self.home, self.chunks)

    def _source(self, layer: int):
        return self.g if layer == 0 else self.rows(layer)

    @torch.no_grad()
    def write_layer(self, model: GNN, layer: int) -> None:
        """This worker's rows of layer `layer` + 1 (`layer` 0-based), each file uploaded (with a
        run home) before this returns, hence before the layer's barrier."""
        source = self._source(layer)
        for k in self.chunks:
            path = layer_file(self.scratch, layer + 1, k)
            write_chunk(model, layer, self.g, source, k, path, self.block_edges)
            if self.home is not None:
                self.home.put_rows(path, layer + 1, k)

    @torch.no_grad()
    def last_layer_stats(self, model: GNN) -> Tensor:
        """The evaluation stats message (protocol.py) over this worker's nodes: the logits are
        scored block by block and never written."""
        from grappa.tasks.node_classification import split_stats
        layer = model.passes - 1
        source = self._source(layer)
        stats = torch.zeros(9, dtype=torch.float64)
        codes = (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST)
        for k in self.chunks:
            y_map, split_map = self.g.store.chunk_file(k, "y.npy"), self.g.store.chunk_file(k, "split.npy")

            def score(a: int, b: int, logits: Tensor) -> None:
                nonlocal stats
                y = torch.from_numpy(np.asarray(y_map[a:b], dtype=np.int64))
                split = torch.from_numpy(np.asarray(split_map[a:b]))
                stats += split_stats(logits, y, tuple(split == c for c in codes))
            compute_chunk(model, layer, self.g, source, k, self.block_edges, score)
        return stats
