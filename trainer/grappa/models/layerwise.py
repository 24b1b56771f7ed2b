"""One layer of exact inference over a chunk's rows, a bounded block of rows at a time.

(A model that does not expose its layers, custom.py, has one pass instead: the whole model on
the full L-hop in-neighbourhood of each block of rows, `khop_inputs`, whose edges grow as the
mean degree to the power L - 1: the blocks are that much smaller.)

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
from grappa.data.store.feature_codec import rows_view
from grappa.models import GNN

DEFAULT_BLOCK_EDGES = 1 << 19  # ~ a few tens of MB per block at width 128
REFERENCE_WIDTH = 128  # the input width `block_edges` is given for


def edges_at(block_edges: int, width: int) -> int:
    """A block's edges at input `width`: `block_edges` scaled by 128 / width when wider (Physics'
    8,415 features: 7,974 of the default 524,288), so its rows x width stay the same bytes."""
    return max(1, block_edges * REFERENCE_WIDTH // max(width, REFERENCE_WIDTH))


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
        return rows_view(self.store.manifest, self.array(k, "x.npy"))

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


def khop_inputs(g: StoreGraph, sampler, ids: np.ndarray) -> tuple[Tensor, list[Block]]:
    """(input rows, blocks) of the whole L-hop in-neighbourhood of the global `ids`: every
    in-edge of every hop (sampler: a StoreSampler with fanouts -1)."""
    sub = sampler.sample(torch.from_numpy(ids.astype(np.int64)), torch.Generator())
    n_id = sub.n_id.numpy()
    order = np.argsort(n_id, kind="stable")
    h, deg = np.empty((n_id.size, g.width), dtype=np.float32), np.empty(n_id.size, dtype=np.int64)
    hs, ds = np.empty_like(h), np.empty_like(deg)
    gather(g, g, n_id[order], hs, ds)
    h[order], deg[order] = hs, ds
    g.bytes_read += sub.edge_index.shape[1] * 8
    return torch.from_numpy(h), sub.blocks(torch.from_numpy(deg))


def khop_rows(g: StoreGraph, layers: int, block_edges: int) -> int:
    """In-edges per block of rows such that the L-hop neighbourhood holds about `block_edges`
    edges at the graph's mean in-degree (a hub's neighbourhood can hold more)."""
    man = g.store.manifest
    mean = max(1.0, float(man["num_edges"]) / max(1, int(man["num_nodes"])))
    return max(1, int(block_edges / mean ** (layers - 1)))


@torch.no_grad()
def compute_chunk(model: GNN, layer: int, g: StoreGraph, source: RowSource, k: int,
                  block_edges: int, sink: Callable[[int, int, Tensor], None]) -> None:
    """Pass `layer` (0-based) of every row of chunk k, block by block, handed to `sink(a, b, out)`:
    one layer of a layer-wise model, or the whole of another (its only pass, on each block's
    full L-hop in-neighbourhood)."""
    if not model.layerwise:
        from grappa.data.sampling.store_sampler import StoreSampler
        sampler = StoreSampler(g.store, [-1] * model.num_layers)
        nodes, indptr = g.array(k, "nodes.npy"), g.array(k, "indptr.npy")
        for a, b in row_blocks(indptr, khop_rows(g, model.num_layers, edges_at(block_edges, g.width))):
            h, blocks = khop_inputs(g, sampler, np.asarray(nodes[a:b]))
            sink(a, b, model(h, blocks))
            del h, blocks
            g.release()
        return
    width = g.width if layer == 0 else model.widths[layer - 1]
    indptr = g.array(k, "indptr.npy")
    for a, b in row_blocks(indptr, edges_at(block_edges, width)):
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
