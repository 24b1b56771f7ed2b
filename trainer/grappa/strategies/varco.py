"""VARCO (`strategy: varco`): the full-communication exchange (strategies/full.py) with
compressed halo activations.

Each exchanged activation matrix of width d travels as k = max(1, floor(d / r_t)) columns, and so
does its gradient in the backward pass. The rate falls over training (Cervino et al.):

    r_t = max(r_max - s t (r_max - r_min) / (T - 2), r_min)

so early steps are cheap and late steps approach full communication (r_min = 1 is exact). Every
rank derives k from the global step t, so message sizes need no negotiation.

A codec is the linear map halo = h E D (E: d x k, D: k x d); the backward pass sends
grad D^T and the owner applies E^T, so compression is consistent in both directions:
- truncate: the first k columns, rescaled by d / k (zero padding alone shrinks the neighbour mean);
- random:  a seeded random k-column subset per (step, layer), rescaled by d / k: unbiased;
- lowrank: the top-k right singular vectors V of the rows sent (E = V, D = V^T); V travels too.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import Tensor

from grappa.strategies.full.strategy import FullStrategy


def rate(step: int, r_max: float, r_min: float, s: float, total_steps: int) -> float:
    """The linear schedule's compression rate at global step `step` (0-based)."""
    if total_steps <= 2:
        return r_min
    return max(r_max - s * step * (r_max - r_min) / (total_steps - 2), r_min)


def kept_columns(width: int, r: float) -> int:
    return max(1, min(width, math.floor(width / r)))


class ColumnCodec:
    """truncate / random: a column subset, scaled by d / k."""

    def __init__(self, width: int, k: int, columns: Optional[Tensor] = None):
        self.width, self.k = width, k
        self.cols = columns if columns is not None else torch.arange(k)
        self.scale = width / k

    def side_shape(self) -> Optional[tuple[int, int]]:
        return None  # both ends derive the columns

    def encode(self, h: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        return h[:, self.cols].contiguous(), None

    def decode(self, wire: Tensor, side: Optional[Tensor]) -> Tensor:
        out = wire.new_zeros(wire.shape[0], self.width)
        out[:, self.cols] = wire * self.scale
        return out

    def encode_grad(self, grad: Tensor, side: Optional[Tensor]) -> Tensor:
        return (grad[:, self.cols] * self.scale).contiguous()

    def decode_grad(self, wire: Tensor, side: Optional[Tensor]) -> Tensor:
        out = wire.new_zeros(wire.shape[0], self.width)
        out[:, self.cols] = wire
        return out


class LowRankCodec:
    """lowrank: h V V^T with V the top-k right singular vectors of the rows the owner sends."""

    def __init__(self, width: int, k: int):
        self.width, self.k = width, k

    def side_shape(self) -> Optional[tuple[int, int]]:
        return (self.width, self.k)

    def encode(self, h: Tensor) -> tuple[Tensor, Tensor]:
        if h.shape[0] == 0:
            v = torch.eye(self.width, self.k)
        else:
            v = torch.linalg.svd(h, full_matrices=False).Vh[:self.k].T  # d x min(n, d, k)
            if v.shape[1] < self.k:  # fewer rows than k: pad with unused directions
                v = torch.cat([v, v.new_zeros(self.width, self.k - v.shape[1])], dim=1)
        v = v.contiguous()
        return (h @ v).contiguous(), v

    def decode(self, wire: Tensor, side: Tensor) -> Tensor:
        return wire @ side.T

    def encode_grad(self, grad: Tensor, side: Tensor) -> Tensor:
        return (grad @ side).contiguous()

    def decode_grad(self, wire: Tensor, side: Tensor) -> Tensor:
        return wire @ side.T


def make_codec(kind: str, width: int, r: float, seed: int, step: int, layer: int):
    """The codec every rank builds for (step, layer); None means send everything."""
    k = kept_columns(width, r)
    if k == width and kind != "lowrank":
        return None  # r <= 1: exact, and no copy
    if kind == "truncate":
        return ColumnCodec(width, k)
    if kind == "random":
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + layer)
        return ColumnCodec(width, k, torch.randperm(width, generator=g)[:k].sort().values)
    if kind == "lowrank":
        return None if k == width else LowRankCodec(width, k)
    raise ValueError(f"varco.compressor must be truncate, random or lowrank, not {kind!r}")


class VarcoStrategy(FullStrategy):
    """Full communication whose exchanged activations (and their gradients) travel through the
    codec of the step's rate."""

    name = "varco"

    def codec_for(self) -> Optional[Callable[[int, int], object]]:
        v, step = self.cfg.varco, self.step
        total = v.total_steps or self.cfg.training.epochs
        r = v.fixed_ratio if v.schedule == "fixed" else rate(step, v.r_max, v.r_min, v.slope, total)
        seed = self.cfg.training.seed

        def codec(layer: int, width: int):
            if layer < 0 and not v.compress_input:
                return None
            return make_codec(v.compressor, width, r, seed, step, layer)
        return codec
