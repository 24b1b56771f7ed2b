"""One-line-able summary of a dataset for logs."""
from __future__ import annotations

from torch_geometric.data import Data


def describe(data: Data) -> dict:
    return {
        "nodes": int(data.num_nodes),
        "edges": int(data.edge_index.size(1)),
        "features": int(data.x.size(1)),
        "classes": int(getattr(data, "num_classes", None) or int(data.y.max()) + 1),
        "train": int(data.train_mask.sum()),
        "val": int(data.val_mask.sum()),
        "test": int(data.test_mask.sum()),
    }
