"""Gradient fidelity: how close each reducer's aggregated gradient is to the exact one.

At fixed parameters, compare G (the reducer's output over P isolated shards, full-graph steps,
dropout off) with G* (the single-process full-graph gradient): relative error ||G - G*|| / ||G*||
and cosine similarity, averaged over partition seeds and rounds. Deterministic given the seeds.

Link prediction: G* is the gradient of the mean expected loss over every training edge, on the
message-passing graph (the training edges), negatives uniform over every node; a shard's term is
the same over its round's positives, negatives uniform over its owned nodes, each edge weighted
by the reducer (tasks/link_prediction.expected_example_losses: expectations, so no draw of
negatives adds noise to either side). The gap is then what isolation costs: truncated
neighbourhoods (grappa.halo), edges no worker holds this round, a worker's own negatives.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from grappa.config import TrainConfig
from grappa.data.blocks import full_blocks, seed_blocks
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.models.params import flat_grads
from grappa.strategies import make_strategy
from grappa.strategies.contribution import contribution
from grappa.strategies.grappa.reducer import combine, seed_weights, weighted_loss_sum
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.tasks import build_task_model
from grappa.tasks import link_prediction as lp

# (label, correction, lambda)
DEFAULT_REDUCERS = (("UW", "none", 1.0), ("batch", "batch", 1.0), ("node l=0.25", "node", 0.25),
                    ("node l=0.5", "node", 0.5), ("node l=1", "node", 1.0))


@dataclass
class FidelityRow:
    reducer: str
    rel_error: float
    cosine: float
    samples: int


def _train_params(model, objective, epochs: int, lr: float) -> None:
    """Move away from initialisation with plain full-graph training (the 'trained' setting)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        objective(model).backward()
        opt.step()


def _node_objective(data, layers: int):
    """The mean cross-entropy over the training nodes, on the whole graph."""
    blocks = full_blocks(data.edge_index, data.num_nodes, layers)
    return lambda model: F.cross_entropy(model(data.x, blocks)[data.train_mask], data.y[data.train_mask])


def _link_objective(data, store: ChunkStore, k: int, layers: int):
    """The mean expected loss over every training edge, on the store's message-passing graph."""
    from grappa.data.link_split import LinkEdges
    edges = torch.cat([store.load_chunk(c).edge_index for c in range(store.num_chunks)], 1)
    pos = torch.from_numpy(np.array(LinkEdges(store.path, store.manifest)["train"], dtype=np.int64))
    blocks = full_blocks(edges, data.num_nodes, layers)
    return lambda model: lp.expected_example_losses(model.decoder, model(data.x, blocks), pos, k).mean()


def _exact(model, objective) -> Tensor:
    model.zero_grad(set_to_none=True)
    objective(model).backward()
    return flat_grads(model)


def _link_shard_terms(model, s, correction: str, lam: float, wbar: float, k: int) -> tuple[Tensor, float]:
    """(gradient of sum_e w_e E[l_e], sum_e w_e) over the shard's round positives."""
    model.train()
    model.zero_grad(set_to_none=True)
    emb = model(s.x, s.blocks).index_select(0, s.seed_rows)  # every owned node: the candidates
    losses = lp.expected_example_losses(model.decoder, emb, s.pos, k)
    loss, wsum = weighted_loss_sum(losses, seed_weights(s.cov_e, correction, lam, wbar))
    loss.backward()
    return flat_grads(model), wsum


def gradient_fidelity(cfg: TrainConfig, data, partition_seeds: Iterable[int], rounds: int = 2,
                      reducers=DEFAULT_REDUCERS, train_epochs: int = 0, degrees: str = "global",
                      work_dir: Optional[str] = None) -> list[FidelityRow]:
    """Node classification or link prediction (cfg.task); `data` the dataset of cfg.dataset.
    degrees="local" (node classification only) is the ablation the method doc warns against."""
    link = cfg.task == "link-prediction"
    if cfg.task not in ("node-classification", "link-prediction"):
        raise ValueError(f"the gradient-fidelity harness measures node-classification and "
                         f"link-prediction, not task {cfg.task!r}")
    if link and degrees != "global":
        raise ValueError("degrees='local' is a node-classification ablation; use degrees='global'")
    cfg = cfg.model_copy(deep=True)
    cfg.model.dropout = 0.0
    cfg.training.mode = "full-graph"
    k = cfg.link.negatives
    sums = {label: [0.0, 0.0, 0] for label, _, _ in reducers}
    model = exact = None
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for ps in partition_seeds:
            cfg.grappa.partition_seed = ps
            cfg.store_dir = f"{tmp}/store-{ps}"
            prepare_store(cfg, progress=False)
            store = ChunkStore(cfg.store_path)
            if exact is None:  # the link objective needs a store's message-passing graph
                torch.manual_seed(cfg.training.seed)
                if link:
                    model = build_task_model(cfg, data.num_features, int(data.num_classes))
                    objective = _link_objective(data, store, k, cfg.model.layers)
                else:
                    model = GNN(cfg.model, data.num_features, int(data.num_classes))
                    objective = _node_objective(data, cfg.model.layers)
                if train_epochs:
                    _train_params(model, objective, train_epochs, cfg.training.lr)
                exact = _exact(model, objective)
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
                        if link:
                            grad, wsum = _link_shard_terms(model, s, correction, lam, wbar, k)
                        else:
                            seeds = s.graph.seeds
                            c = contribution(model, s.x, s.blocks, s.cov[seeds], s.graph.y[seeds],
                                             correction, lam, wbar)
                            grad, wsum = c.grad_sum, c.weight_sum
                        grads.append(grad)
                        wsums.append(wsum)
                    g_hat = combine(grads, wsums)
                    acc = sums[label]
                    acc[0] += float((g_hat - exact).norm() / exact.norm())
                    acc[1] += float(F.cosine_similarity(g_hat, exact, dim=0))
                    acc[2] += 1
    return [FidelityRow(label, v[0] / v[2], v[1] / v[2], v[2]) for label, v in sums.items()]
