"""Datasets: built-in PyG graphs, synthetic generators (CSBM, R-MAT) and user files."""
from grappa.data.describe import describe
from grappa.data.errors import DatasetError
from grappa.data.loader import load_dataset
from grappa.data.open import open_dataset

__all__ = ["load_dataset", "open_dataset", "describe", "DatasetError"]
