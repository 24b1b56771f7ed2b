"""The one error type of the chunk store."""


class ChunkStoreError(RuntimeError):
    """The chunk store cannot be built or read; the message names the file or field and the fix."""
