"""Model replicas: every rank holds the model and the optimizer, and they must stay identical.

Each step every rank receives the same all-reduced sum and applies the same deterministic update
(exchange.py), so no parameters travel during training. They do travel once when a rank starts or
the job resumes: the aggregator's parameters, float buffers and optimizer state (`send_replica`).
Once per epoch each worker reports a checksum of its parameters with its epoch report, and the
aggregator compares it with its own (`check_replicas`): a difference fails the job naming the
ranks, rather than resyncing, because identical inputs must give identical bits here, so a
difference is a bug or a corrupted process, and the restart that follows resyncs every rank
from the last checkpoint anyway.

With a sharded optimizer (sharded.py) parameters and buffers are still whole on every rank and
checked the same way; each optimizer slice has one owner, and the aggregator checks, when it
gathers them at each epoch's end, that every slice took the same number of steps.
"""
from __future__ import annotations

import io
import zlib

import torch

from grappa.config import TrainConfig
from grappa.models.params import flat_state
from grappa.runtime.group import rank_name


class ReplicaDiverged(RuntimeError):
    pass


def make_optimizer(cfg: TrainConfig, model: torch.nn.Module | list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Over a model's parameters, or a list of them (the sharded optimizer's flat slice)."""
    t = cfg.training
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, weight_decay=t.weight_decay)
    return torch.optim.Adam(params, lr=t.lr, weight_decay=t.weight_decay)


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """The optimizer's state (moments, step counts, hyper-parameters) as one uint8 tensor."""
    buf = io.BytesIO()
    torch.save(optimizer.state_dict(), buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def load_optimizer_bytes(optimizer: torch.optim.Optimizer, data: torch.Tensor) -> None:
    state = torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)
    optimizer.load_state_dict(state)


def checksum(model: torch.nn.Module) -> int:
    """CRC-32 of the parameters and float buffers as float32 bytes: equal only if bit-identical."""
    return zlib.crc32(flat_state(model).numpy().tobytes())


def check_replicas(own: int, reported: dict[int, int], epoch: int) -> None:
    """Raise naming every rank whose checksum differs from the aggregator's."""
    bad = [r for r, c in sorted(reported.items()) if c != own]
    if bad:
        who = ", ".join(f"{rank_name(r)} (crc {reported[r]:08x})" for r in bad)
        raise ReplicaDiverged(
            f"replica check after epoch {epoch}: {who} hold parameters that differ from the "
            f"aggregator's (crc {own:08x}). Every rank applies the same update to the same sum, so "
            "this is a fault, not rounding: the job stops instead of training on diverged models; "
            "a restart resyncs every rank from the last checkpoint.")
