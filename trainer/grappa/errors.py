"""Errors that mean "this job cannot run with this data" (exit code 3), as opposed to crashes."""
from .chunks import ChunkStoreError
from .data import DatasetError

CANNOT_RUN = (ChunkStoreError, DatasetError)
