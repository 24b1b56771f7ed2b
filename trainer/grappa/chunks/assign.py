"""Seeded uniform random node-to-chunk assignment (method §3)."""
from __future__ import annotations

import torch

from grappa.chunks.errors import ChunkStoreError


def assign_chunks(num_nodes: int, num_chunks: int, seed: int) -> torch.Tensor:
    """Chunk id per node, uniform at random and reproducible: chunk_of[perm[i]] = i mod K, so
    chunk sizes differ by at most one and every chunk is non-empty."""
    if num_chunks < 1 or num_nodes < num_chunks:
        raise ChunkStoreError(
            f"cannot split {num_nodes} nodes into {num_chunks} chunks: partitions / grappa.chunks "
            f"must be between 1 and the number of nodes ({num_nodes})")
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    chunk_of = torch.empty(num_nodes, dtype=torch.long)
    chunk_of[perm] = torch.arange(num_nodes) % num_chunks
    return chunk_of
