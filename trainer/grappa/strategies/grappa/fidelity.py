"""Gradient fidelity: how close each reducer's aggregated gradient is to the exact one.

At fixed parameters, compare G (the reducer's output over P isolated shards, full-graph steps,
dropout off) with G* (the single-process full-graph gradient): relative error ||G - G*|| / ||G*||
and cosine similarity, averaged over partition seeds and rounds. Deterministic given the seeds.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
import torch.nn.functional as F

from grappa.config import TrainConfig
from grappa.data.blocks import full_blocks, seed_blocks
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.strategies import make_strategy
from grappa.strategies.contribution import contribution
from grappa.strategies.grappa.reducer import combine
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.tasks.node_classification import full_graph_gradient

# (label, correction, lambda)
DEFAULT_REDUCERS = (("UW", "none", 1.0), ("batch", "batch", 1.0), ("node l=0.25", "node", 0.25),
                    ("node l=0.5", "node", 0.5), ("node l=1", "node", 1.0))


@dataclass
class FidelityRow:
    reducer: str
    rel_error: float
    cosine: float
    samples: int


def _train_params(model: GNN, data, epochs: int, lr: float) -> None:
    """Move away from initialisation with plain full-graph training (the 'trained' setting)."""
    blocks = full_blocks(data.edge_index, data.num_nodes, len(model.layers))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(data.x, blocks)[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()


def gradient_fidelity(cfg: TrainConfig, data, partition_seeds: Iterable[int], rounds: int = 2,
                      reducers=DEFAULT_REDUCERS, train_epochs: int = 0, degrees: str = "global",
                      work_dir: Optional[str] = None) -> list[FidelityRow]:
    if cfg.task != "node-classification":
        raise ValueError(f"the gradient-fidelity harness measures node classification only so far, "
                         f"not task {cfg.task!r}")
    cfg = cfg.model_copy(deep=True)
    cfg.model.dropout = 0.0
    cfg.training.mode = "full-graph"
    torch.manual_seed(cfg.training.seed)
    model = GNN(cfg.model, data.num_features, int(data.num_classes))
    if train_epochs:
        _train_params(model, data, train_epochs, cfg.training.lr)
    exact = full_graph_gradient(model, data)
    sums = {label: [0.0, 0.0, 0] for label, _, _ in reducers}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for ps in partition_seeds:
            cfg.grappa.partition_seed = ps
            cfg.store_dir = f"{tmp}/store-{ps}"
            prepare_store(cfg, progress=False)
            store = ChunkStore(cfg.store_path)
            shards = [make_strategy(cfg, r, store, model) for r in range(1, cfg.partitions + 1)]
            for t in range(rounds):
                decision = RoundDecision(t, round_seed(ps, t), 0)
                stats = [s.setup_round(decision) for s in shards]
                wbar = sum(st.coverage_sum for st in stats) / max(1, sum(st.seeds for st in stats))
                for s in shards:
                    if degrees == "local":  # ablation: what the method doc warns against
                        g = s.graph
                        local = g.indptr[1:] - g.indptr[:-1]
                        _, s.blocks = seed_blocks(g.indptr, g.indices, local, g.seeds, len(model.layers))
                for label, correction, lam in reducers:
                    grads, wsums = [], []
                    for s in shards:
                        seeds = s.graph.seeds
                        c = contribution(model, s.x, s.blocks, s.cov[seeds], s.graph.y[seeds],
                                         correction, lam, wbar)
                        grads.append(c.grad_sum)
                        wsums.append(c.weight_sum)
                    g_hat = combine(grads, wsums)
                    acc = sums[label]
                    acc[0] += float((g_hat - exact).norm() / exact.norm())
                    acc[1] += float(F.cosine_similarity(g_hat, exact, dim=0))
                    acc[2] += 1
    return [FidelityRow(label, v[0] / v[2], v[1] / v[2], v[2]) for label, v in sums.items()]
