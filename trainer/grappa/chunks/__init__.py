"""The chunk store: seeded random chunks of a graph on shared storage (method §3).

Writing (`prepare`) is torch-free so preparation workers stay light; the reader
(`grappa.chunks.store.ChunkStore`) gives torch tensors to the trainer.
"""
from grappa.chunks.assign import ChunkAssignment, assign_chunks
from grappa.chunks.errors import ChunkStoreError
from grappa.chunks.manifest import is_prepared, read_manifest
from grappa.chunks.writer import prepare

__all__ = ["ChunkAssignment", "assign_chunks", "prepare", "is_prepared", "read_manifest",
           "ChunkStoreError"]
