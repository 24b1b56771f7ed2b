"""The chunk store: seeded random chunks of a graph on shared storage (method §3)."""
from grappa.chunks.assign import assign_chunks
from grappa.chunks.errors import ChunkStoreError
from grappa.chunks.manifest import is_prepared, read_manifest
from grappa.chunks.writer import prepare
from grappa.chunks.store import Chunk, ChunkStore

__all__ = ["assign_chunks", "prepare", "is_prepared", "read_manifest", "ChunkStore", "Chunk",
           "ChunkStoreError"]
