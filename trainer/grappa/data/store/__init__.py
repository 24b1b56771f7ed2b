"""The chunk store: seeded random chunks of a graph on shared storage (method §3).

`preparation.prepare_store` makes a job's store once per (dataset, K, seed) and version of the
user's files (`fingerprint.py`); writing (`writer.prepare`: `passes.py`, `spill.py`,
`finalise.py`) is torch-free so preparation workers stay light; the reader
(`chunk_store.ChunkStore`) gives torch tensors to the trainer. Layout: `manifest.py`.
"""
from grappa.data.errors import ChunkStoreError
from grappa.data.store.assign import ChunkAssignment, assign_chunks
from grappa.data.store.manifest import is_prepared, read_manifest
from grappa.data.store.writer import prepare

__all__ = ["ChunkAssignment", "assign_chunks", "prepare", "is_prepared", "read_manifest",
           "ChunkStoreError"]
