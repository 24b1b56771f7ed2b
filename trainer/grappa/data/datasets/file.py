"""A user's own graph: a torch.save'd torch_geometric.data.Data."""
from __future__ import annotations

from pathlib import Path

import torch
from torch_geometric.data import Data

from grappa.config import DatasetConfig
from grappa.data.errors import DatasetError


def load_file(cfg: DatasetConfig) -> Data:
    """Load dataset.path; it must be a Data with x, y and edge_index (masks are optional)."""
    path = Path(cfg.path or "")
    if not path.is_file():
        raise DatasetError(f"dataset.path: file '{path}' does not exist")
    try:
        data = torch.load(path, weights_only=False)  # a Data is a pickle: trusted user input
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise DatasetError(f"dataset.path: cannot load '{path}' with torch.load: {err}") from None
    if not isinstance(data, Data):
        raise DatasetError(
            f"dataset.path: '{path}' holds a {type(data).__name__}, expected torch_geometric.data.Data")
    for attr in ("x", "y", "edge_index"):
        if getattr(data, attr, None) is None:
            raise DatasetError(f"dataset.path: '{path}' has no '{attr}' attribute (need x, y, edge_index)")
    return data
