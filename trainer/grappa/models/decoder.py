"""A link-prediction model's decoder: the score of a pair from the GNN's two embeddings.

    dot:      s(u, v) = <h_u, h_v>
    distmult: s(u, v) = <h_u, r * h_v>   (r learned, one weight a dimension)
    mlp:      s(u, v) = MLP(h_u * h_v)

A part of the model (its parameters train, checkpoint and load with the GNN's), so it lives here;
the task that uses it is tasks/link_prediction.py.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class Decoder(nn.Module):
    """s(u, v) from h_u, h_v (the last dimension); broadcasts over the others."""

    def __init__(self, kind: str, width: int) -> None:
        super().__init__()
        self.kind = kind
        if kind == "distmult":
            self.rel = nn.Parameter(torch.ones(width))
        elif kind == "mlp":
            self.mlp = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
        elif kind != "dot":
            raise ValueError(f"link.decoder must be dot, distmult or mlp, not {kind!r}")

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        if self.kind == "dot":
            return (h_src * h_dst).sum(-1)
        if self.kind == "distmult":
            return (h_src * self.rel * h_dst).sum(-1)
        return self.mlp(h_src * h_dst).squeeze(-1)

    def all_pairs(self, h_src: Tensor, h_cand: Tensor) -> Tensor:
        """[B, N] scores of every (source, candidate) pair: a matrix product for dot and distmult."""
        if self.kind == "dot":
            return h_src @ h_cand.T
        if self.kind == "distmult":
            return (h_src * self.rel) @ h_cand.T
        return self(h_src.unsqueeze(1), h_cand.unsqueeze(0))
