"""R-MAT with a planted labelling, generated whole in memory (`grappa.data.sources.rmat` defines it;
the streaming prepare writes the same graph block by block, which the tests check)."""
from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

from grappa.config import SyntheticConfig
from grappa.data.datasets.graph import symmetric_from_pairs
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.sources.rmat import NODE_UNIT, Rmat


def rmat(cfg: SyntheticConfig, split_seed: int = 0) -> Data:
    """2^scale nodes, 2^(scale+4) directed R-MAT draws, then deduplicated, symmetrised and
    stripped of self-loops (edge_index columns, seed 0, against 2 x 2^(scale+4) draws: roughly
    64% at scale 10, 81% at 14, 94% at 20); features, labels and split as grappa.data.sources.rmat says.
    """
    g = Rmat(cfg.scale, cfg.num_features, cfg.num_classes, cfg.seed, split_seed)
    n = g.num_nodes
    pairs = [g.pairs(u) for u in range(g.num_units)]
    src = torch.from_numpy(np.concatenate([p[0] for p in pairs]))
    dst = torch.from_numpy(np.concatenate([p[1] for p in pairs]))
    del pairs
    edge_index = symmetric_from_pairs(src, dst, n)
    del src, dst
    x = torch.from_numpy(np.concatenate([g.features(u) for u in range(-(-n // NODE_UNIT))]))
    ids = np.arange(n)
    z = torch.from_numpy(g.latent(ids))
    sums = z.clone().index_add_(0, edge_index[1], z[edge_index[0]])  # closed in-neighbourhood
    y = torch.from_numpy(g.labels_from_sums(sums.numpy()))
    split = torch.from_numpy(g.split(ids))
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=n)
    data.train_mask, data.val_mask, data.test_mask = split == SPLIT_TRAIN, split == SPLIT_VAL, split == SPLIT_TEST
    return data
