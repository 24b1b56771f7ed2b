"""Seeded train/val/test splits for datasets that ship none."""
from __future__ import annotations

import torch


def random_split(num_nodes: int, seed: int, train: float = 0.2, val: float = 0.2
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uniform random split: `train` share, `val` share, rest test."""
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    n_tr, n_va = int(round(train * num_nodes)), int(round(val * num_nodes))
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_tr]] = True
    masks[1][perm[n_tr:n_tr + n_va]] = True
    masks[2][perm[n_tr + n_va:]] = True
    return masks[0], masks[1], masks[2]


def per_class_split(y: torch.Tensor, seed: int, train_per_class: int = 20, val_per_class: int = 30
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shchur et al. convention: `train_per_class` random nodes of each class for training,
    `val_per_class` for validation, the rest test. Vectorised: shuffle, stable-sort by class,
    and take each node's rank inside its class."""
    n = y.numel()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    order = perm[torch.sort(y[perm], stable=True).indices]  # grouped by class, random inside
    counts = torch.bincount(y, minlength=int(y.max()) + 1)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = torch.arange(n) - starts[y[order]]
    train = rank < train_per_class
    val = (rank >= train_per_class) & (rank < train_per_class + val_per_class)
    return train, val, ~(train | val)
