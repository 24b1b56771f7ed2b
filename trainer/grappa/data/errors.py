"""The data path's two error types (torch-free, so preparation workers stay light). Both end a
command with exit code 3: this job cannot run with this data."""


class DatasetError(ValueError):
    """A dataset cannot be read as configured; the message names the file or field and the fix."""


class ChunkStoreError(RuntimeError):
    """The chunk store cannot be built or read; the message names the file or field and the fix."""
