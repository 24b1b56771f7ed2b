"""One layer of exact inference over a chunk's rows, a bounded block of rows at a time.

For rows a..b of chunk k the block's inputs are those rows and every in-neighbour (the store
holds all in-edges of a chunk's nodes), read from the previous layer's rows: the store's features
for the first layer, the per-chunk row files after that. Memory per block is its edges and input
rows (`block_edges` bounds both), whatever the graph's size; the memory maps' pages are handed
back after each block.
"""
from __future__ import annotations

from typing import Callable, Iterator, Protocol

import numpy as np
import torch
from torch import Tensor

from grappa.data.blocks import Block
from grappa.data.rowfiles import release
from grappa.data.store.chunk_store import ChunkStore
from grappa.models import GNN

DEFAULT_BLOCK_EDGES = 1 << 19  # ~ a few tens of MB per block at width 128


class RowSource(Protocol):
    def rows(self, k: int) -> np.ndarray: ...  # [n_k, width], chunk k's node order

    def release(self) -> None: ...


class StoreGraph:
    """The store's nodes, CSR and features of any chunk, as verified memory maps."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.assign = store.assignment
        self.width = int(store.manifest["num_features"])
        self.bytes_read = 0
        self._open: list[np.ndarray] = []

    def array(self, k: int, name: str) -> np.ndarray:
        arr = self.store.chunk_file(k, name)
        self._open.append(arr)
        return arr

    def rows(self, k: int) -> np.ndarray:
        """Chunk k's input features (the first layer's row source)."""
        return self.array(k, "x.npy")

    def release(self) -> None:
        for arr in self._open:
            release(arr)
        self._open.clear()


def row_blocks(indptr: np.ndarray, block_edges: int) -> Iterator[tuple[int, int]]:
    """(a, b) row ranges of a chunk holding about `block_edges` in-edges (at least one row) and
    at most `block_edges` rows."""
    n = indptr.shape[0] - 1
    a = 0
    while a < n:
        b = int(np.searchsorted(indptr, int(indptr[a]) + block_edges, side="right")) - 1
        b = min(max(b, a + 1), n, a + block_edges)
        yield a, b
        a = b


def gather(g: StoreGraph, source: RowSource, ids: np.ndarray, out: np.ndarray, deg: np.ndarray) -> None:
    """Rows of `source` and global in-degrees of the sorted global `ids`, grouped by chunk.

    Each chunk's pages are handed back as soon as its rows are copied: a block's in-neighbours
    are spread over every chunk, and the kernel maps 64 KB around each faulted row, so releasing
    only at the block's end left most of a layer's row files mapped in every worker (9.6 GB of
    RSS at RMAT-24). Now at most one chunk's files are mapped at a time, at no extra faults."""
    if not ids.size:
        return
    chunk = g.assign.chunk_of(ids)
    order = np.argsort(chunk, kind="stable")  # within a chunk ids stay ascending: rows ascending
    cs = chunk[order]
    bounds = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        c, sel = int(cs[lo]), order[lo:hi]
        rows = np.searchsorted(g.array(c, "nodes.npy"), ids[sel])
        src = source.rows(c)
        out[sel] = src[rows]
        indptr = g.array(c, "indptr.npy")
        deg[sel] = indptr[rows + 1] - indptr[rows]
        g.bytes_read += int(rows.size) * (src.strides[0] + 16)
        g.release()
        source.release()


def block_inputs(g: StoreGraph, source: RowSource, width: int, k: int, a: int, b: int
                 ) -> tuple[Tensor, Block]:
    """(input rows, block) computing rows a..b of chunk k: the rows first, then their other
    in-neighbours in ascending id."""
    ptr = np.asarray(g.array(k, "indptr.npy")[a:b + 1], dtype=np.int64)
    src = np.asarray(g.array(k, "indices.npy")[ptr[0]:ptr[-1]], dtype=np.int64)
    dst = np.asarray(g.array(k, "nodes.npy")[a:b], dtype=np.int64)
    nb = b - a
    # one sort of the sources (torch's is threaded): their distinct ids, and each edge's index
    uniq_t, inverse = torch.unique(torch.from_numpy(src), sorted=True, return_inverse=True)
    uniq = uniq_t.numpy()
    at = np.minimum(np.searchsorted(dst, uniq), max(nb - 1, 0))
    own = dst[at] == uniq  # an in-neighbour that is one of the block's own rows
    others = uniq[~own]
    local_u = np.where(own, at, 0)
    local_u[~own] = nb + np.arange(others.size)
    local = local_u[inverse.numpy()]
    h = np.empty((nb + others.size, width), dtype=np.float32)
    deg = np.empty(nb + others.size, dtype=np.int64)
    h[:nb] = source.rows(k)[a:b]
    deg[:nb] = np.diff(ptr)
    gather(g, source, others, h[nb:], deg[nb:])
    g.bytes_read += nb * (h.strides[0] + 16) + src.size * src.itemsize
    block = Block(torch.from_numpy(ptr - ptr[0]), torch.from_numpy(local.astype(np.int32)),
                  nb + others.size, torch.from_numpy(deg))
    return torch.from_numpy(h), block


@torch.no_grad()
def compute_chunk(model: GNN, layer: int, g: StoreGraph, source: RowSource, k: int,
                  block_edges: int, sink: Callable[[int, int, Tensor], None]) -> None:
    """Layer `layer` (0-based) of every row of chunk k, block by block, handed to `sink(a, b, out)`."""
    width = g.width if layer == 0 else model.widths[layer - 1]
    indptr = g.array(k, "indptr.npy")
    for a, b in row_blocks(indptr, block_edges):
        h, block = block_inputs(g, source, width, k, a, b)
        if layer == 0:
            h = model.prepare_input(h)
        sink(a, b, model.layer(layer, h, block))
        del h, block
        g.release()
        source.release()


def write_chunk(model: GNN, layer: int, g: StoreGraph, source: RowSource, k: int, path,
                block_edges: int, on_rows: Callable[[int], None] = lambda n: None) -> int:
    """Layer `layer` of chunk k into its row file (rowfiles.py), published when complete;
    returns the bytes written."""
    from grappa.data.rowfiles import RowFileWriter
    w = RowFileWriter(path, int(g.store.manifest["chunks"][k]["nodes"]), model.widths[layer])

    def sink(a: int, b: int, out: Tensor) -> None:
        w.append(out.numpy())
        on_rows(b - a)
    try:
        compute_chunk(model, layer, g, source, k, block_edges, sink)
    except BaseException:
        w.abort()
        raise
    w.close()
    return w.bytes
