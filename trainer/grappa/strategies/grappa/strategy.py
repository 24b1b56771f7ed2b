"""Grappa (method doc): isolated partitions, gradients only, repartition rounds, corrected reducer.

Round: the worker holds its base chunks plus a variable chunk that moves every round
(rounds.variable_chunk), and its halo (features and degrees, no in-edges). A seed's coverage
c_v = (D^-1 (A + I))^(L-1) 1_owned measures how much of its computation graph is local.
Step: forward on the local graph only, loss sum_v w_v l_v with w_v = lambda c_v + (1 - lambda) wbar
(grappa.correction; reducer.py), backward, send the gradient and sum_v w_v. Nothing else crosses
the network. Full-graph mode computes only the rows the seeds need (blocks.seed_blocks); mini-batch
mode samples each batch's L-hop neighbourhood on the local CSR and reads only those feature rows.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from grappa.data.blocks import Block, seed_blocks
from grappa.data.local_graph import LocalGraph
from grappa.data.sampling import NeighborSampler
from grappa.strategies.base import Strategy
from grappa.strategies.contribution import Contribution, contribution_from
from grappa.strategies.grappa.coverage import coverage
from grappa.strategies.grappa.rounds import RoundDecision, variable_chunk


def full_graph_blocks(g: LocalGraph, seeds: Tensor, model) -> tuple[list[Block], Tensor, Tensor]:
    """(blocks, input rows, the seeds' rows in the last layer's output) for one full-graph step.
    Only the rows the seeds need, unless a layer's output depends on which rows it computes
    (BatchNorm): then every local row, as a single process computes every node."""
    layers = model.num_layers
    if model.rows_independent:
        rows, blocks = seed_blocks(g.indptr, g.indices, g.deg, seeds, layers)
        return blocks, rows, torch.arange(seeds.numel())
    every = Block(g.indptr, g.indices, g.num_nodes, g.deg)
    return [every] * layers, torch.arange(g.num_nodes), seeds


class GrappaStrategy(Strategy):
    name = "grappa"
    repartitions = True

    def variable_chunk(self, decision: RoundDecision):
        return variable_chunk(self.index, self.cfg.partitions, self.cfg.num_chunks, decision,
                              self.cfg.grappa.rounds.pairing)

    def end_round(self) -> None:
        super().end_round()
        self.cov = self.blocks = self.x = self.seed_rows = self.sampler = None

    def prepare_round(self, g: LocalGraph) -> float:
        self.cov = coverage(g.indptr, g.indices, g.complete, self.cfg.model.layers).to(torch.float32)
        seeds = g.seeds
        if self.cfg.training.mode == "full-graph":
            # One step per epoch over every seed: the blocks and input rows are the round's.
            self.blocks, rows, self.seed_rows = full_graph_blocks(g, seeds, self.model)
            self.x = self.model.prepare_input(g.features.gather(rows))
        else:
            self.sampler = NeighborSampler(g.indptr, g.indices, self.cfg.fanouts)
        return float(self.cov[seeds].sum())

    def prepare(self, batch: Tensor) -> Optional[tuple[list[Block], Tensor]]:
        """Mini-batch: the batch's sampled blocks and input feature rows."""
        if self.cfg.training.mode == "full-graph":
            return None
        g = self.graph
        sub = self.sampler.sample(batch, self.gen)
        return sub.blocks(g.deg.index_select(0, sub.n_id)), g.features.gather(sub.n_id)

    def contribute(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        g, gc = self.graph, self.cfg.grappa
        if self.cfg.training.mode == "full-graph":  # batch is every seed
            forward = lambda: self.model(self.x, self.blocks).index_select(0, self.seed_rows)  # noqa: E731
        else:
            blocks, x = prepared if prepared is not None else self.prepare(batch)
            forward = lambda: self.model(x, blocks)  # noqa: E731
        return contribution_from(self.model, forward, torch.arange(batch.numel()), self.cov[batch],
                                 g.y[batch], gc.correction, gc.shrinkage, wbar)
