"""The one error type of dataset loading (defined with the torch-free sources)."""
from grappa.sources.errors import DatasetError

__all__ = ["DatasetError"]
