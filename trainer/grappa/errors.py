"""Errors that end a run with one `grappa: error:` line instead of a traceback.

CANNOT_RUN: this job cannot run with this data or these folders (exit code 3, permanent).
GROUP_FAILED: another rank died, froze or diverged (exit code 1: a restart resumes the job).
"""
from grappa.chunks import ChunkStoreError
from grappa.outdirs import OutputDirError
from grappa.runtime.group import GroupFailure
from grappa.runtime.replica import ReplicaDiverged
from grappa.sources.errors import DatasetError

CANNOT_RUN = (ChunkStoreError, DatasetError, OutputDirError)
GROUP_FAILED = (GroupFailure, ReplicaDiverged)
