"""Contextual stochastic block model (CSBM): a synthetic graph with a learnable signal."""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from grappa.config import SyntheticConfig
from grappa.data.datasets.graph import symmetric_from_pairs
from grappa.data.errors import DatasetError


def csbm(cfg: SyntheticConfig) -> Data:
    """n nodes in c balanced classes; undirected edges with expected degree `avg_degree`,
    a share `homophily` of them inside the class; features x_i = signal * u_{y_i} + N(0, I)
    with u_k random unit directions. Deterministic in `cfg.seed`; no split (the loader adds one).

    Edges: m = n * avg_degree / 2 unordered pairs, each endpoint u uniform, the partner uniform in
    u's class with probability `homophily`, else uniform in one of the other classes; symmetrised,
    so every node has expected degree ~avg_degree (duplicates and self-loops, rare, are dropped).
    """
    n, c, f = cfg.num_nodes, cfg.num_classes, cfg.num_features
    if c > n:
        raise DatasetError(f"dataset.synthetic.numClasses ({c}) must not exceed numNodes ({n})")
    g = torch.Generator().manual_seed(cfg.seed)
    y = torch.randperm(n, generator=g) % c                  # balanced: sizes differ by <= 1
    by_class = torch.sort(y, stable=True).indices           # node ids grouped by class
    size = torch.bincount(y, minlength=c)
    start = torch.cumsum(size, 0) - size

    m = int(round(n * cfg.avg_degree / 2))
    src = torch.randint(n, (m,), generator=g)
    intra = torch.rand(m, generator=g) < cfg.homophily
    # other class: shift by 1..c-1 so it is never the own class
    shift = torch.randint(1, c, (m,), generator=g) if c > 1 else torch.zeros(m, dtype=torch.long)
    k = torch.where(intra, y[src], (y[src] + shift) % c)
    pos = (torch.rand(m, generator=g) * size[k]).long().clamp_max_(size[k] - 1)
    dst = by_class[start[k] + pos]
    del intra, shift, k, pos
    edge_index = symmetric_from_pairs(src, dst, n)

    means = torch.randn(c, f, generator=g)
    means = means / means.norm(dim=1, keepdim=True) * cfg.feature_signal
    x = means[y] + torch.randn(n, f, generator=g)
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=n)
