"""Feature rows of a worker's local nodes, read from the store's memory-mapped x.npy files.

Nothing is copied up front: `gather` reads just the rows asked for (a mini-batch's sampled
nodes, or once per round the rows full-graph training needs), grouped by chunk and in ascending
row order so the page cache reads sequentially. The mapped pages are shared by every process on
the machine that reads the same store (counted once in PSS).

What is read is counted, split into the owned chunks' rows and the halo's: `own_bytes_read` and
`halo_bytes_read` add every row each time it is read (the total), and a map of one byte per local
row remembers which rows were ever read, so `distinct_bytes()` is what the store holds for the rows
this object has read. One object serves one round (`local_graph.build_local_graph` makes a new one),
so the counts are per round; `serial` tells rounds apart.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import Tensor


_SERIAL = itertools.count(1)


class FeatureRows:
    """Rows of `num_owned` owned nodes (chunk `owned_chunks[i]` holds local ids
    owned_offsets[i] .. owned_offsets[i+1] in its row order) and of halo nodes (local id
    num_owned + j lives in chunk halo_chunk[j], row halo_row[j])."""

    def __init__(self, maps: dict[int, np.ndarray], owned_chunks: list[int], owned_offsets: np.ndarray,
                 halo_chunk: np.ndarray, halo_row: np.ndarray, num_features: int) -> None:
        self.maps = maps                      # chunk -> x.npy rows as float32 [n_k, f] (feature_codec.rows_view)
        self.owned_chunks = np.asarray(owned_chunks, dtype=np.int64)
        self.owned_offsets = owned_offsets    # int64 [len(owned_chunks) + 1]
        self.halo_chunk, self.halo_row = halo_chunk, halo_row
        self.num_owned = int(owned_offsets[-1])
        self.num_features = num_features
        first = next(iter(maps.values()), None)
        self.row_bytes = first.strides[0] if first is not None else 4 * num_features  # as stored
        self.own_bytes_read = 0   # every owned row each time it is read
        self.halo_bytes_read = 0  # every halo row each time it is read
        # which local rows were ever read: one byte per local row (the local graph holds ~20 per node)
        self._seen = np.zeros(self.num_owned + int(np.asarray(halo_chunk).size), dtype=bool)
        self.serial = next(_SERIAL)

    @property
    def bytes_read(self) -> int:
        """Feature bytes read from the store, owned and halo rows, every read counted."""
        return self.own_bytes_read + self.halo_bytes_read

    def distinct_bytes(self) -> tuple[int, int]:
        """(owned, halo) bytes of the distinct rows read so far: what the store holds for them."""
        own = int(np.count_nonzero(self._seen[:self.num_owned]))
        halo = int(np.count_nonzero(self._seen[self.num_owned:]))
        return own * self.row_bytes, halo * self.row_bytes

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chunk, row in that chunk's x.npy) of every local id."""
        chunk = np.empty(ids.size, dtype=np.int64)
        row = np.empty(ids.size, dtype=np.int64)
        owned = ids < self.num_owned
        o = ids[owned]
        which = np.searchsorted(self.owned_offsets, o, side="right") - 1
        chunk[owned] = self.owned_chunks[which]
        row[owned] = o - self.owned_offsets[which]
        h = ids[~owned] - self.num_owned
        chunk[~owned] = self.halo_chunk[h]
        row[~owned] = self.halo_row[h]
        return chunk, row

    def gather(self, local_ids: Tensor | np.ndarray) -> Tensor:
        """float32 [m, f] rows of `local_ids`, in the order given."""
        ids = np.asarray(local_ids, dtype=np.int64).reshape(-1)
        out = np.empty((ids.size, self.num_features), dtype=np.float32)
        if not ids.size:
            return torch.from_numpy(out)
        chunk, row = self._locate(ids)
        self._seen[ids] = True
        order = np.lexsort((row, chunk))  # by chunk, then ascending row: sequential reads
        chunk_sorted = chunk[order]
        bounds = np.flatnonzero(np.r_[True, chunk_sorted[1:] != chunk_sorted[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:]):
            sel = order[a:b]
            x_map = self.maps[int(chunk_sorted[a])]
            out[sel] = x_map[row[sel]]
            read = int(b - a) * x_map.strides[0]
            if ids[sel[0]] < self.num_owned:  # a chunk is owned or holds halo rows, never both
                self.own_bytes_read += read
            else:
                self.halo_bytes_read += read
        return torch.from_numpy(out)
