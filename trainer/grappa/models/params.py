"""Flat views of a model's parameters, gradients and float buffers (BatchNorm running stats)."""
from __future__ import annotations

import torch
from torch import Tensor, nn


def float_buffers(model: nn.Module) -> list[Tensor]:
    # Integer buffers (BatchNorm's step counter) do not affect outputs and are not synchronised.
    return [b for b in model.buffers() if b.is_floating_point()]


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def num_buffer_values(model: nn.Module) -> int:
    return sum(b.numel() for b in float_buffers(model))


def flat_state(model: nn.Module) -> Tensor:
    """Parameters then float buffers, as one float32 vector (what the aggregator sends back)."""
    parts = [p.detach().reshape(-1) for p in model.parameters()]
    parts += [b.detach().reshape(-1) for b in float_buffers(model)]
    return torch.cat(parts).to(torch.float32) if parts else torch.zeros(0)


def load_flat_state(model: nn.Module, vec: Tensor) -> None:
    i = 0
    with torch.no_grad():
        for t in list(model.parameters()) + float_buffers(model):
            n = t.numel()
            t.copy_(vec[i:i + n].view_as(t))
            i += n


def flat_grads(model: nn.Module) -> Tensor:
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
        for p in model.parameters()
    ])


def set_grads(model: nn.Module, vec: Tensor) -> None:
    i = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = vec[i:i + n].view_as(p).clone()
        i += n
