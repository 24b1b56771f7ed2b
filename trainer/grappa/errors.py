"""Errors that mean "this job cannot run with this data" (exit code 3), as opposed to crashes."""
from .chunks import ChunkStoreError
from .outdirs import OutputDirError
from .sources.errors import DatasetError

CANNOT_RUN = (ChunkStoreError, DatasetError, OutputDirError)
