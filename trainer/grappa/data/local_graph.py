"""A worker's local subgraph for one round: owned nodes (base chunks, then the variable chunk)
with every in-edge, plus their 1-hop halo, built from the memory-mapped store as CSR by
destination with int32 local ids.

Owned nodes are *complete* (every in-edge present); halo nodes have global degrees and feature
rows but no in-edges, so message passing stops at them. Local ids: owned first (base chunks
first, each chunk in its row order), then the halo in ascending global id. Memory: 4 bytes per
local edge, about 20 per local node; features stay in the store's memory maps (`FeatureRows`).
Building it holds a few slabs on top, never a second per-edge array.

Store reads are counted per round (`store_reads`): the structure the build reads (the owned
chunks' nodes, indptr, y and split once and their indices twice, one pass to find the distinct
sources and one to relabel them; for every other chunk the halo reaches, its nodes array, searched
for the halo's rows, and the halo rows' two indptr entries, their degree), then the feature rows
the round's steps read (`FeatureRows`: owned and halo rows, every read and the distinct rows);
and apart, `verify`: the whole files the build opened for the first time in this process, read
once to check them against the manifest's sha256 (chunk_store.py), every file of every chunk the
round touches, features included. A round fetched into worker-local storage (storage.fetch,
local_copy.py) is built from that copy the same way: the counts are then local reads, and what
the round cost the store is `fetched` (FETCH_COUNTS).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from grappa.data.distinct import MAP_BLOCK, distinct
from grappa.data.feature_rows import FeatureRows
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.chunk_store import ChunkStore

# What a fetched round adds to its reads (prefetch.RoundFetcher.counts; zero when the round reads
# the store directly): store bytes fetched for the round, of them fetched ahead (during the round
# before), of them the halo's feature rows, and of those the rows fetched as the steps read them
# (a mini-batch round's, halo_rows.py); the halo's row bytes taken from the worker-local folder
# instead of the store (data/held_runs.py, not in the first); and what that folder holds: all of it, of that
# the next round's, and the peak bytes of the buffers the background fetch held (those two: or, if
# more, what a fetch ahead held when it completed since the previous report; prefetch.RoundFetcher).
FETCH_COUNTS = ("fetched", "fetched_ahead", "fetched_rows", "fetched_on_demand", "fetched_reused", "local_disk",
                "prefetch_disk", "prefetch_memory")


@dataclass
class LocalGraph:
    global_ids: Tensor  # int64 [num_nodes]: local -> global id
    num_base: int
    num_owned: int
    indptr: Tensor      # int64 [num_nodes + 1]: CSR by destination; halo rows are empty
    indices: Tensor     # int32 [E] local source ids
    deg: Tensor         # int32 [num_nodes] global in-degree, self-loops excluded
    y: Tensor           # int64 [num_owned]
    split: Tensor       # uint8 [num_owned] split codes
    features: FeatureRows
    structure_bytes: int = 0           # store bytes the build read, every pass counted
    structure_distinct_bytes: int = 0  # the same bytes, each counted once
    verify_bytes: int = 0              # whole files the build read to check their sha256
    fetch_counts: Optional[Callable[[], dict[str, int]]] = None  # a fetched round's FETCH_COUNTS, live
    # tensors a strategy derived from the graph alone, perhaps before its round (Strategy.round_graph)
    ahead: dict[str, Tensor] = field(default_factory=dict)

    def store_reads(self) -> dict[str, int]:
        """Bytes read from where the round's data lives in this round so far: the build's
        structure and the feature rows, owned and halo; each as every read (the total) and as the
        distinct bytes read. When the round was fetched into worker-local storage those are local
        reads, and what came from the store is `fetched` (FETCH_COUNTS, zero otherwise)."""
        own, halo = self.features.distinct_bytes()
        fetch = self.fetch_counts() if self.fetch_counts is not None else dict.fromkeys(FETCH_COUNTS, 0)
        return {**fetch, "verify": self.verify_bytes, "verify_distinct": self.verify_bytes,
                "structure": self.structure_bytes, "structure_distinct": self.structure_distinct_bytes,
                "own_features": self.features.own_bytes_read, "own_features_distinct": own,
                "halo_features": self.features.halo_bytes_read, "halo_features_distinct": halo}

    @property
    def num_nodes(self) -> int:
        return int(self.global_ids.numel())

    @property
    def num_halo(self) -> int:
        return self.num_nodes - self.num_owned

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    def _base_mask(self, code: int) -> Tensor:
        m = self.split[:self.num_base] == code
        return torch.cat([m, torch.zeros(self.num_nodes - self.num_base, dtype=torch.bool)])

    @property
    def train_mask(self) -> Tensor:
        """Base training nodes (the seeds) over all local rows."""
        return self._base_mask(SPLIT_TRAIN)

    @property
    def val_mask(self) -> Tensor:
        return self._base_mask(SPLIT_VAL)

    @property
    def test_mask(self) -> Tensor:
        return self._base_mask(SPLIT_TEST)

    @property
    def seeds(self) -> Tensor:
        return torch.nonzero(self.split[:self.num_base] == SPLIT_TRAIN).view(-1)

    @property
    def complete(self) -> Tensor:
        return torch.arange(self.num_nodes) < self.num_owned

    @property
    def edge_index(self) -> Tensor:
        """int64 [2, E] local (src, dst): for the reference paths and tests, not the hot loop."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), self.indptr[1:] - self.indptr[:-1])
        return torch.stack([self.indices.long(), dst])

    def nbytes(self) -> int:
        """Bytes this object holds (features excluded: they are memory-mapped)."""
        return sum(t.numel() * t.element_size() for t in
                   (self.global_ids, self.indptr, self.indices, self.deg, self.y, self.split,
                    *self.ahead.values())) + \
            self.features.halo_chunk.nbytes + self.features.halo_row.nbytes


def relabel(global_ids: Tensor, query: Tensor) -> Tensor:
    """Positions of `query` ids inside `global_ids` (all must be present)."""
    order = torch.argsort(global_ids)
    pos = torch.searchsorted(global_ids[order], query)
    return order[pos]


# A table by global id is used to relabel sources when it is at most this share of the int32
# result (4 bytes a local edge); else each source is searched for among the distinct ones.
TABLE_SHARE = 0.25


def relabel_sources(maps: dict, chunks: list[int], edge_offsets: np.ndarray, uniq: np.ndarray,
                    local_u: np.ndarray, num_nodes: int, out: np.ndarray) -> None:
    """out[e]: the local id of edge e's source, local_u[i] being the local id of global id uniq[i].
    A lookup in a table of every global id is one read an edge; a search among the distinct
    sources is log2(distinct) of them (half of a round's build on RMAT-17 at P = 8), so the search
    is kept for graphs whose table would not be small beside the result."""
    if num_nodes <= TABLE_SHARE * out.size:
        table = np.empty(num_nodes, dtype=np.int32)  # read only at the sources' ids, all set here
        table[uniq] = local_u
        for i, k in enumerate(chunks):
            src = maps[k]["indices"]  # global ids, memory-mapped
            for lo in range(0, src.shape[0], MAP_BLOCK):
                part = src[lo:lo + MAP_BLOCK]
                at = int(edge_offsets[i]) + lo
                np.take(table, part, out=out[at:at + part.shape[0]])
        return
    uniq_t = torch.from_numpy(uniq)
    for i, k in enumerate(chunks):
        src = maps[k]["indices"]
        for lo in range(0, src.shape[0], MAP_BLOCK):  # torch's searchsorted uses every thread
            part = torch.from_numpy(np.array(src[lo:lo + MAP_BLOCK]))  # a writable copy of one slab
            pos = torch.searchsorted(uniq_t, part).numpy()
            at = int(edge_offsets[i]) + lo
            out[at:at + pos.size] = local_u[pos]


def build_local_graph(store: ChunkStore, base: Sequence[int], variable: Optional[int] = None) -> LocalGraph:
    """The owned chunks' CSR and the halo they reach, mapped to local ids. `store` is the chunk
    store, or a round's worker-local copy of what it needs (local_copy.LocalView: the same
    chunk_maps, the halo's chunks cut to its rows), which gives the same graph and rows."""
    chunks = list(base) + ([variable] if variable is not None else [])
    hashed = store.bytes_hashed  # a file's first use in this process reads all of it, to check it
    maps = {k: store.chunk_maps(k) for k in chunks}
    sizes = [maps[k]["nodes"].shape[0] for k in chunks]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    num_owned = int(offsets[-1])
    num_base = int(offsets[len(base)])

    # Owned rows: concatenated CSR (indptr shifted by each chunk's edge offset).
    edge_counts = [int(maps[k]["indptr"][-1]) for k in chunks]
    edge_offsets = np.concatenate([[0], np.cumsum(edge_counts)]).astype(np.int64)
    indptr_owned = np.concatenate([[0]] + [np.asarray(maps[k]["indptr"][1:]) + edge_offsets[i]
                                           for i, k in enumerate(chunks)])

    # Every distinct source, then whether it is owned: its chunk is computed from its id. The only
    # array as long as the local edges is the int32 result.
    found = store.take_sources(chunks) if hasattr(store, "take_sources") else None  # a round's fetch found them
    if found is not None:
        uniq, chunk_u = found
    else:
        uniq = distinct([maps[k]["indices"] for k in chunks])
        assignment = store.assignment
        chunk_u = np.empty(uniq.size, dtype=assignment.dtype)
        for lo in range(0, uniq.size, MAP_BLOCK):  # the id hash makes int64 temporaries
            chunk_u[lo:lo + MAP_BLOCK] = assignment.chunk_of(uniq[lo:lo + MAP_BLOCK])
    local_u = np.empty(uniq.size, dtype=np.int64)
    owned_u = np.isin(chunk_u, chunks)
    for i, k in enumerate(chunks):
        sel = np.flatnonzero(chunk_u == k)
        local_u[sel] = offsets[i] + np.searchsorted(maps[k]["nodes"], uniq[sel])
    halo = uniq[~owned_u]
    local_u[~owned_u] = num_owned + np.arange(halo.size)
    indices = np.empty(int(edge_offsets[-1]), dtype=np.int32)
    relabel_sources(maps, chunks, edge_offsets, uniq, local_u, int(store.manifest["num_nodes"]), indices)
    del local_u

    # Halo: where each row lives in the store, and its global in-degree.
    halo_chunk = chunk_u[~owned_u].astype(np.int32)
    halo_row = np.empty(halo.size, dtype=np.int64)
    halo_deg = np.empty(halo.size, dtype=np.int64)
    x_maps = {k: maps[k]["x"] for k in chunks}
    # What the build reads from the store: the owned chunks' arrays (indices in two passes) ...
    structure = structure_distinct = 0
    for k in chunks:
        once = sum(maps[k][name].nbytes for name in ("nodes", "indptr", "indices", "y", "split"))
        structure += once + maps[k]["indices"].nbytes
        structure_distinct += once
    for k in np.flatnonzero(np.bincount(halo_chunk, minlength=store.num_chunks)).tolist():
        sel = np.flatnonzero(halo_chunk == k)
        m = store.chunk_maps(k)
        rows = np.searchsorted(m["nodes"], halo[sel])
        halo_row[sel] = rows
        halo_deg[sel] = m["indptr"][rows + 1] - m["indptr"][rows]
        x_maps[k] = m["x"]
        # ... and per chunk the halo reaches: its nodes (searched) and two indptr entries a row
        structure += m["nodes"].nbytes + 2 * rows.size * m["indptr"].itemsize
        # rows ascend without repeats (sorted ids in sorted nodes): entries r and r + 1 a row, a
        # shared one wherever two rows are consecutive
        entries = 2 * rows.size - int(np.count_nonzero(np.diff(rows) == 1))
        structure_distinct += m["nodes"].nbytes + entries * m["indptr"].itemsize

    owned_ids = np.concatenate([np.asarray(maps[k]["nodes"]) for k in chunks]).astype(np.int64)
    owned_deg = np.diff(indptr_owned)
    indptr = np.concatenate([indptr_owned, np.full(halo.size, indptr_owned[-1])])
    features = FeatureRows(x_maps, chunks, offsets, halo_chunk, halo_row.astype(np.int32),
                           int(store.manifest["num_features"]))
    return LocalGraph(
        global_ids=torch.from_numpy(np.concatenate([owned_ids, halo.astype(np.int64)])),
        num_base=num_base, num_owned=num_owned,
        indptr=torch.from_numpy(indptr.astype(np.int64)), indices=torch.from_numpy(indices),
        deg=torch.from_numpy(np.concatenate([owned_deg, halo_deg]).astype(np.int32)),
        y=torch.from_numpy(np.concatenate([np.asarray(maps[k]["y"]) for k in chunks]).astype(np.int64)),
        split=torch.from_numpy(np.concatenate([np.asarray(maps[k]["split"]) for k in chunks])),
        features=features, structure_bytes=int(structure), structure_distinct_bytes=int(structure_distinct),
        verify_bytes=int(store.bytes_hashed - hashed))
