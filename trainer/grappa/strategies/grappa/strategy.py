"""Grappa (method doc): isolated partitions, gradients only, repartition rounds, corrected reducer.

Round: the worker holds its base chunks plus a variable chunk that moves every round
(rounds.variable_chunk), and its halo (features and degrees, no in-edges). A seed's coverage
c_v = (D^-1 (A + I))^(L-1) 1_owned measures how much of its computation graph is local.
Step: forward on the local graph only, loss sum_v w_v l_v with w_v = lambda c_v + (1 - lambda) wbar
(grappa.correction; reducer.py), backward, send the gradient and sum_v w_v. Nothing else crosses
the network. Full-graph mode computes only the rows the seeds need (blocks.seed_blocks); mini-batch
mode samples each batch's L-hop neighbourhood on the local CSR and reads only those feature rows.

Link prediction (`task: link-prediction`): the examples are the training edges
whose destination lies in the worker's base chunks and whose source it owns (base or variable
chunk: data/link_split.supervision_in), so each edge is trained by one worker, and a round whose
variable chunk holds the source of a cross-chunk edge exposes it there. A step computes every
owned node's embedding on the local graph (mini-batch mode: the sampled L-hop neighbourhood of the
batch's endpoints), draws each positive's negatives uniformly from the owned nodes, and weighs the positive's loss by its edge coverage c_e = (c_u + c_v) / 2
(tasks/link_prediction.py says why).

Halo rows are cut (only their self-loop), or estimated from copies of the node itself (`self`:
the blocks carry the round's estimate to the layers) or from its in-neighbours the worker owns
(`neighbours`: the rounds run on a CSR with those in-edges added): `grappa.halo`, halo.py.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from grappa.data.blocks import Block, seed_blocks
from grappa.data.local_graph import LocalGraph, build_local_graph
from grappa.data.sampling.reach import reachable
from grappa.data.sampling import NeighborSampler
from grappa.strategies.base import Strategy
from grappa.strategies.contribution import Contribution, contribution_from, link_contribution
from grappa.strategies.grappa.coverage import coverage
from grappa.strategies.grappa.halo import cut_estimate, estimate_cut_rows, with_owned_in_edges
from grappa.strategies.grappa.rounds import RoundDecision, variable_chunk


def full_graph_blocks(g: LocalGraph, seeds: Tensor, model, csr=None) -> tuple[list[Block], Tensor, Tensor]:
    """(blocks, input rows, the seeds' rows in the last layer's output) for one full-graph step.
    Only the rows the seeds need, unless a layer's output depends on which rows it computes
    (BatchNorm): then every local row, as a single process computes every node. `csr`: (indptr,
    indices, in-edges kept per row) to run on instead of the local graph's (halo.py), its rows
    scaled by deg / kept as sampled rows are."""
    layers = model.num_layers
    indptr, indices, kept = csr if csr is not None else (g.indptr, g.indices, None)
    if model.rows_independent:
        rows, blocks = seed_blocks(indptr, indices, g.deg, seeds, layers)
        if kept is not None:
            for b in blocks:  # a block holds every in-edge of its rows that the CSR has
                b.kept = b.local_in_degree()
        return blocks, rows, torch.arange(seeds.numel())
    every = Block(indptr, indices, g.num_nodes, g.deg, kept)
    return [every] * layers, torch.arange(g.num_nodes), seeds


class GrappaStrategy(Strategy):
    name = "grappa"
    repartitions = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.link = self.cut = self.csr = None
        if self.cfg.task == "link-prediction":
            from grappa.data.link_split import LinkEdges
            self.link = LinkEdges(self.store.path, self.store.manifest)

    def variable_chunk(self, decision: RoundDecision):
        return variable_chunk(self.index, self.cfg.partitions, self.cfg.num_chunks, decision,
                              self.cfg.grappa.rounds.pairing)

    def end_round(self) -> None:
        super().end_round()
        self.cov = self.blocks = self.x = self.seed_rows = self.sampler = self.cut = self.csr = None
        self.pos = self.cov_e = self.negatives = None

    def round_graph(self, source, var) -> LocalGraph:
        g = super().round_graph(source, var)
        g.ahead["coverage"] = coverage(g.indptr, g.indices, g.complete, self.cfg.model.layers).to(torch.float32)
        return g

    def prepare_round(self, g: LocalGraph) -> float:
        self.cov = g.ahead.pop("coverage")
        halo = self.halo_mode()
        self.cut = cut_estimate(g) if halo == "self" else None
        self.csr = with_owned_in_edges(g) if halo == "neighbours" else None
        if self.link is not None:
            return self.prepare_link_round(g)
        seeds = g.seeds
        if self.cfg.training.mode == "full-graph":
            # One step per epoch over every seed: the blocks and input rows are the round's.
            self.blocks, rows, self.seed_rows = full_graph_blocks(g, seeds, self.model, self.csr)
            estimate_cut_rows(self.blocks, self.cut)
            self.x = self.model.prepare_input(g.features.gather(rows))
        else:
            self.sampler = self.local_sampler(g)
        return float(self.cov[seeds].sum())

    def prepare_link_round(self, g: LocalGraph) -> float:
        """The round's positives (local ids), their edge coverage, and the blocks and input rows
        that compute every owned node's embedding; returns the sum of c_e."""
        from grappa.data.link_split import supervision_in
        from grappa.tasks.link_prediction import edge_coverage
        pos = supervision_in(self.link["train"], g.global_ids.numpy(), g.num_base, g.num_owned)
        self.pos = torch.from_numpy(pos).to(torch.int64)
        if self.cfg.training.mode == "full-graph":
            self.blocks, rows, self.seed_rows = full_graph_blocks(g, torch.arange(g.num_owned), self.model, self.csr)
            estimate_cut_rows(self.blocks, self.cut)
            self.x = self.model.prepare_input(g.features.gather(rows))
        else:
            self.sampler = self.local_sampler(g)
        self.cov_e = edge_coverage(self.cov, self.pos)
        return float(self.cov_e.sum())

    def halo_mode(self) -> str:
        """grappa.halo for this round's graph: `neighbours` needs an undirected one (a link store
        records it); by default a directed graph's halo stays cut."""
        mode = self.cfg.halo_mode
        if mode == "neighbours" and not (self.link is not None and self.link.undirected):
            if self.cfg.grappa.halo == "neighbours":
                raise ValueError("grappa.halo neighbours takes a halo node's in-edges from the reverse "
                                 "of its local out-edges, which only an undirected graph has, and this "
                                 "one is directed: set grappa.halo to self or cut")
            return "cut"
        return mode

    def reach(self, view, owned) -> Optional[np.ndarray]:
        """Node classification in mini-batches: the L-hop in-neighbourhood of the round's seeds on
        the CSR its sampler expands (data/sampling/reach.py). Link prediction's steps start from
        every owned node (negatives are drawn from all of them): None."""
        if self.link is not None or self.cfg.training.mode == "full-graph":
            return None
        var = [k for k in owned if k not in self.base]
        g = build_local_graph(view, self.base, var[0] if var else None)
        csr = with_owned_in_edges(g) if self.halo_mode() == "neighbours" else (g.indptr, g.indices)
        mask = reachable(csr[0].numpy(), csr[1].numpy(), g.seeds.numpy(), self.cfg.model.layers)
        return g.global_ids.numpy()[mask]

    def local_sampler(self, g: LocalGraph) -> NeighborSampler:
        indptr, indices = (self.csr[0], self.csr[1]) if self.csr is not None else (g.indptr, g.indices)
        return NeighborSampler(indptr, indices, self.cfg.fanouts)

    def examples(self) -> Tensor:
        if self.link is not None:  # the round's positive edges, by column of self.pos
            return torch.arange(self.pos.shape[1])
        return super().examples()

    def prepare(self, batch: Tensor) -> Optional[tuple[list[Block], Tensor]]:
        """Mini-batch: the batch's sampled blocks and input feature rows."""
        if self.cfg.training.mode == "full-graph":
            return None
        if self.link is not None:
            return self.prepare_link(batch)
        g = self.graph
        sub = self.sampler.sample(batch, self.gen)
        return estimate_cut_rows(sub.blocks(g.deg.index_select(0, sub.n_id)), self.cut), g.features.gather(sub.n_id)

    def contribute(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        g, gc = self.graph, self.cfg.grappa
        if self.link is not None:
            return self.contribute_link(batch, wbar, prepared)
        if self.cfg.training.mode == "full-graph":  # batch is every seed
            forward = lambda: self.model(self.x, self.blocks).index_select(0, self.seed_rows)  # noqa: E731
        else:
            blocks, x = prepared if prepared is not None else self.prepare(batch)
            forward = lambda: self.model(x, blocks)  # noqa: E731
        return contribution_from(self.model, forward, torch.arange(batch.numel()), self.cov[batch],
                                 g.y[batch], gc.correction, gc.shrinkage, wbar)

    def contribute_link(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        """The positives `batch` (columns of self.pos), each with link.negatives uniform negatives
        from the owned nodes, drawn from the epoch's generator; in mini-batch mode on the sampled
        neighbourhood `prepared` (prepare_link's)."""
        from grappa.tasks.link_prediction import sample_negatives
        gc = self.cfg.grappa
        if self.cfg.training.mode != "full-graph":
            blocks, x, pos, neg, self.negatives = prepared if prepared is not None else self.prepare_link(batch)
            forward = lambda: self.model(x, blocks)  # noqa: E731
            return link_contribution(self.model, forward, pos, neg, self.cov_e[batch], gc.correction,
                                     gc.shrinkage, wbar)
        pos = self.pos[:, batch]
        self.negatives = neg = sample_negatives(pos[0], self.graph.num_owned, self.cfg.link.negatives, self.gen)
        forward = lambda: self.model(self.x, self.blocks).index_select(0, self.seed_rows)  # noqa: E731
        return link_contribution(self.model, forward, pos, neg, self.cov_e[batch], gc.correction,
                                 gc.shrinkage, wbar)

    def prepare_link(self, batch: Tensor):
        """Mini-batch link step: the positives `batch`, their negatives (drawn here, from the
        sampling stream, so prefetching keeps the order), and the sampled L-hop neighbourhood of
        every node they touch. Returns (blocks, input rows, positives and negatives as rows of the
        blocks' output, the negatives in local ids)."""
        from grappa.tasks.link_prediction import sample_negatives
        g = self.graph
        pos = self.pos[:, batch]
        neg = sample_negatives(pos[0], g.num_owned, self.cfg.link.negatives, self.gen)
        nodes, inv = torch.unique(torch.cat([pos.reshape(-1), neg.reshape(-1)]), return_inverse=True)
        sub = self.sampler.sample(nodes, self.gen)
        e = pos.shape[1]
        return (estimate_cut_rows(sub.blocks(g.deg.index_select(0, sub.n_id)), self.cut), g.features.gather(sub.n_id),
                inv[:2 * e].view(2, e), inv[2 * e:].view(neg.shape), neg)
