"""Dropout with a cheaper mask: 16 random bits per element, four elements per 64-bit draw.

    y = x * m / (1 - p),   m_i ~ Bernoulli(1 - p') i.i.d.,   p' = round(p * 2^16) / 2^16

torch's CPU dropout draws one Bernoulli variate per element from its 32-bit generator; on the
hidden rows of a sampled 3-layer SAGE step that was 22 % of a worker's step CPU (bench/
profile_step.py, docs/results/peer.md). Drawing 64-bit words and comparing each 16-bit slice with
a threshold gives the same distribution up to p's rounding to 1/65536 (exact for 0.5, 0.25, ...)
at about a fifth of the cost. The same torch generator is used, so runs stay seeded.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

_LEVELS = 1 << 16


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    n = x.numel()
    words = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64)
    slices = words.view(torch.int16)[:n].view(x.shape)  # uniform on [-2^15, 2^15)
    drop = round(p * _LEVELS)
    keep = slices >= drop - (1 << 15)  # P(keep) = 1 - drop / 2^16
    return x * keep.to(x.dtype).mul_(_LEVELS / (_LEVELS - drop))


class Dropout(nn.Module):
    """`torch.nn.Dropout`'s drop-in (model.custom.fastDropout swaps them in a user's model)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def swap_dropout(net: nn.Module) -> int:
    """Replace every `torch.nn.Dropout` (not its subclasses: they may do more) in `net` by
    `Dropout` of the same p, in place; returns how many."""
    swapped = 0
    for parent in net.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout and not child.inplace:
                setattr(parent, name, Dropout(child.p))
                swapped += 1
    return swapped
