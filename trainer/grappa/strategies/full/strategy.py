"""Full communication (`strategy: full`): the feature-fetching training Grappa avoids.

Partitions are fixed (each worker's base chunks, no variable chunk). Every step, each worker
fetches the input features of its remote in-neighbours from the workers that own them, and before
every later layer their activations; the backward pass returns the gradients of those activations
to their owners (BNS-GCN with p = 1, DistDGL-style feature fetching; the exchange is
fullcomm.py). Every seed is fully covered, so the weights are 1 and the aggregator's
sum_p grad_p / sum_p seeds_p is exactly the full-graph gradient. Full-graph mode only.

Link prediction: a worker trains the training edges whose destination it owns, whatever owns the
source. The source of such an edge is an in-neighbour of its destination (training edges carry
messages), so it is owned or in the halo: after the last layer one more exchange fetches the halo
rows' embeddings (their gradients go back with the others). Negatives are uniform over the owned
nodes; with unit weights the reduced gradient is exactly the full-graph gradient of the mean BCE
over every training edge and the negatives drawn.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import Tensor

from grappa.data.blocks import Block, owned_block
from grappa.data.local_graph import LocalGraph
from grappa.models import GNN
from grappa.strategies.base import Strategy
from grappa.strategies.contribution import Contribution, contribution_from
from grappa.strategies.full.halo_exchange import (
    HaloPlan, Peers, _count, _HaloExchange, build_plan, fetch_rows
)


def halo_owner(g: LocalGraph, partitions: int) -> Tensor:
    """Worker index of each halo node: its chunk (found when the graph was built) mod P."""
    return torch.from_numpy(g.features.halo_chunk.astype(np.int64) % partitions)


def forward_full(model: GNN, x_own: Tensor, block: Block, plan: HaloPlan, peers: Peers,
                 codec_for: Optional[Callable[[int, int], object]] = None,
                 log: Optional[dict] = None) -> Tensor:
    """Logits of the owned nodes with every remote neighbour's features and activations fetched.
    Every worker must call this in lockstep (the exchanges pair up layer by layer).

    `block`: the owned rows' in-edges over owned + halo rows. `codec_for(layer, width)` (VARCO)
    compresses the activations exchanged after `layer`; `log` accumulates the bytes this worker
    sends per (layer, direction), layer -1 being the input."""
    input_codec = codec_for(-1, x_own.shape[1]) if codec_for else None
    if input_codec is None:
        x = fetch_rows(x_own, plan, peers)
        _count(log, (-1, "forward"), [x_own[r] for r in plan.send_rows.values()])
    else:  # features need no gradient, so only the forward half runs
        x = _HaloExchange.apply(x_own, plan, peers, input_codec, -1, log)
    h = model.prepare_input(x)
    last = len(model.layers) - 1
    for i in range(last + 1):
        out = model.layer(i, h, block)
        if i < last:
            codec = codec_for(i, out.shape[1]) if codec_for else None
            h = _HaloExchange.apply(out, plan, peers, codec, i, log)
    return out


class FullStrategy(Strategy):
    name = "full"
    needs_peers = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fetch_log: dict = {}  # bytes sent per (layer, direction), for byte accounting
        self.link = self.pos = self.negatives = None
        if self.cfg.task == "link-prediction":
            from grappa.data.link_split import LinkEdges
            self.link = LinkEdges(self.store.path, self.store.manifest)

    def prepare_round(self, g: LocalGraph) -> float:
        self.plan = build_plan(g, halo_owner(g, self.cfg.partitions), self.index,
                               self.cfg.partitions, self.peers)
        self.block = owned_block(g.indptr, g.indices, g.deg, g.num_owned)
        self.x_own = g.features.gather(torch.arange(g.num_owned))  # halo rows are fetched per step
        if self.link is not None:
            from grappa.data.link_split import supervision_in
            # destination owned, source anywhere local (owned or halo: an in-neighbour)
            pos = supervision_in(self.link["train"], g.global_ids.numpy(), g.num_owned, g.num_nodes)
            self.pos = torch.from_numpy(pos).to(torch.int64)
            return float(self.pos.shape[1])
        return float(g.seeds.numel())

    def examples(self) -> Tensor:
        if self.link is not None:
            return torch.arange(self.pos.shape[1])
        return super().examples()

    def codec_for(self) -> Optional[Callable[[int, int], object]]:
        """Compression of the exchanged rows per (layer, width); None sends them whole."""
        return None

    def contribute(self, batch: Tensor, wbar: float, prepared=None) -> Contribution:
        if self.link is not None:
            return self.contribute_link(batch)
        forward = lambda: forward_full(self.model, self.x_own, self.block, self.plan,  # noqa: E731
                                       self.peers, self.codec_for(), self.fetch_log)
        return contribution_from(self.model, forward, batch, torch.ones(batch.numel()),
                                 self.graph.y[batch], "none", 0.0, 1.0)

    def contribute_link(self, batch: Tensor) -> Contribution:
        """Every owned node's embedding with remote rows fetched at every layer, then the halo
        rows' embeddings fetched too; the positives `batch` with link.negatives uniform owned
        negatives each, unit weights."""
        from grappa.strategies.contribution import link_contribution
        from grappa.tasks.link_prediction import sample_negatives
        pos = self.pos[:, batch]
        self.negatives = neg = sample_negatives(pos[0], self.graph.num_owned, self.cfg.link.negatives, self.gen)
        last = len(self.model.layers) - 1

        def forward() -> Tensor:
            out = forward_full(self.model, self.x_own, self.block, self.plan, self.peers,
                               self.codec_for(), self.fetch_log)
            return _HaloExchange.apply(out, self.plan, self.peers, None, last, self.fetch_log)
        return link_contribution(self.model, forward, pos, neg, torch.ones(pos.shape[1]), "none", 0.0, 1.0)
