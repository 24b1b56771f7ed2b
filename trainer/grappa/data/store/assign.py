"""Seeded uniform random node-to-chunk assignment (method §3), computed per id.

chunk_of(v) = pi(v) mod K for a seeded bijection pi of [0, n) (grappa.data.idhash): every process
computes any node's chunk without a table, and since pi is a bijection the chunks hold
exactly floor(n / K) or ceil(n / K) nodes, none empty. Inside a chunk, nodes keep ascending id.
"""
from __future__ import annotations

import numpy as np

from grappa.data.errors import ChunkStoreError
from grappa.data.idhash import IdPermutation

_PURPOSE = 0x43484B  # "CHK": keeps this bijection apart from others drawn from the same seed


class ChunkAssignment:
    def __init__(self, num_nodes: int, num_chunks: int, seed: int) -> None:
        if num_chunks < 1 or num_nodes < num_chunks:
            raise ChunkStoreError(
                f"cannot split {num_nodes} nodes into {num_chunks} chunks: partitions / grappa.chunks "
                f"must be between 1 and the number of nodes ({num_nodes})")
        self.num_nodes, self.num_chunks, self.seed = num_nodes, num_chunks, seed
        self._perm = IdPermutation(num_nodes, seed, _PURPOSE)

    def chunk_of(self, ids: np.ndarray) -> np.ndarray:
        """Chunk id (int64) of each node id."""
        return self._perm(ids) % self.num_chunks

    def size(self, k: int) -> int:
        return self.num_nodes // self.num_chunks + (1 if k < self.num_nodes % self.num_chunks else 0)

    @property
    def dtype(self) -> np.dtype:
        """The smallest signed integer that holds a chunk id (chunk_of.npy)."""
        return np.dtype(np.int16 if self.num_chunks <= np.iinfo(np.int16).max + 1 else np.int32)


def assign_chunks(num_nodes: int, num_chunks: int, seed: int) -> np.ndarray:
    """Chunk id of every node, int64 [num_nodes] (for small graphs and tests)."""
    return ChunkAssignment(num_nodes, num_chunks, seed).chunk_of(np.arange(num_nodes))


def base_chunks(rank: int, num_workers: int, num_chunks: int) -> list[int]:
    """The chunks worker `rank` (0-based) owns for the whole job: k mod P == rank."""
    return [k for k in range(num_chunks) if k % num_workers == rank]
