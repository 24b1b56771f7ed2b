"""Whole datasets in one process's memory, as a clean, split PyG Data: the built-in PyG graphs,
the synthetic generators (CSBM, R-MAT) and a saved Data file. The single-process baseline and the
simulation train on them; prepare reads the small ones through `grappa.data.open`."""
from grappa.data.datasets.describe import describe
from grappa.data.datasets.loader import load_dataset
from grappa.data.errors import DatasetError

__all__ = ["load_dataset", "describe", "DatasetError"]
