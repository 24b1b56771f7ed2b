"""A streamed source read whole into a PyG Data, for the single-process baseline and tests on
graphs that fit in memory (the same checks as the streaming prepare)."""
from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

from grappa.data.datasets.graph import clean_edges
from grappa.data.errors import DatasetError
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, GraphSource
from grappa.data.sources.checks import check_edge_ids, check_label_gaps, check_labels, checked_features
from grappa.data.store.feature_codec import Codec

_BLOCK = 1 << 22


def read_whole(source: GraphSource) -> Data:
    xs, ys, splits, max_label = [], [], [], -1
    for b in source.node_blocks(_BLOCK):
        xs.append(checked_features(b.x, Codec("float32", source.num_features), source, b.start))
        splits.append(b.split)
        if b.y is not None:
            max_label = max(max_label, check_labels(b.y, b.split, source, b.start))
            ys.append(b.y)
    if source.labeller is not None:
        raise DatasetError(f"{source.name} labels nodes from the graph: load it with its own generator")
    src, dst = [], []
    for part in source.edge_parts(1):
        for block in part.blocks(_BLOCK):
            check_edge_ids(block, source.num_nodes)
            src.append(torch.from_numpy(block.src.astype(np.int64)))
            dst.append(torch.from_numpy(block.dst.astype(np.int64)))
    edge_index = torch.stack([torch.cat(src), torch.cat(dst)])
    if source.add_inverse_edges:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    y = torch.from_numpy(np.concatenate(ys))
    if source.num_classes is None:
        check_label_gaps(torch.unique(y[y >= 0]).tolist(), source)
    split = torch.from_numpy(np.concatenate(splits))
    data = Data(x=torch.from_numpy(np.concatenate(xs)), y=y,
                edge_index=clean_edges(edge_index, source.num_nodes), num_nodes=source.num_nodes)
    data.train_mask, data.val_mask, data.test_mask = split == SPLIT_TRAIN, split == SPLIT_VAL, split == SPLIT_TEST
    data.num_classes = int(source.num_classes or max_label + 1)
    return data
