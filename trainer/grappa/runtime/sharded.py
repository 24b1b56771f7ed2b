"""The sharded optimizer (`training.shardOptimizer`): each of the ring's M ranks updates 1/M of the model.

A ring all-reduce is a reduce-scatter then an all-gather. Unsharded (exchange.py), every rank gets
the whole sum and applies the optimizer to the whole model, so each holds the whole optimizer
state (Adam: two floats a parameter) and spends the whole step's optimizer CPU. Sharded, the step
stops half way: after the reduce-scatter rank i holds the sum of its slice i of

    gradient sum (n_params) | float buffers x seeds (n_buf)

plus, in every chunk, a copy of the step's five scalars (weight sum, loss sum, seeds, correct,
stop: M x 20 bytes, so every rank sees the stop flag and the weight at once). It applies the
reducer (G = sum / weight, elementwise) and the optimizer to its slice only, with optimizer state
for that slice only, and the all-gather then carries every slice's update. Bytes stay those of the
all-reduce; optimizer CPU and state per rank fall by M.

What travels in the all-gather is the update (new - old), not the new values: every rank adds the
same deltas to its own full copy of the parameters and buffers, so a rank whose copy was corrupted
(its own slice included) keeps differing, and the per-epoch replica check (replica.py: CRC of
every parameter and buffer, on every rank) still names it, as it does unsharded. Had the gather
carried values, the owner's corrupted slice would have been copied to every rank and the check
would see identical replicas. Each sum has one owner, so no rank can disagree about it; the deltas
are added in the same order everywhere, so the copies stay bit-identical.

Against an unsharded run the parameters agree to float32 rounding, not bit for bit: the ring adds
the contributions in another order (as gloo's ring already does, exchange.py), and old + (new -
old) can differ from new in the last bit when an element changes by more than half its value.

No option needs a global quantity of the gradient today (the reducer divides by a scalar that
travels in every chunk; weight decay and Adam are elementwise). One that does (a global-norm
clip) would need its partial squares summed across the slices before the update: a scalar more
per chunk and one more pass; it is not built, and no config can ask for it.

Optimizer state is owned, not replicated: the aggregator gathers the M slices at every epoch's
end (their bytes count as control traffic), checks that every slice took the same number of steps,
and keeps the whole state as the checkpoint's `optimizer`, in the unsharded layout, so a
checkpoint written sharded resumes sharded or not, at any M, and vice versa; resume re-slices it
(`slice_state`) when it sends each rank its replica.
"""
from __future__ import annotations

import io
import time
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from grappa.config import TrainConfig
from grappa.models.params import float_buffers, num_buffer_values, num_params
from grappa.runtime.exchange import _LOSS, _SEEDS, _STOP, _WEIGHT, _CORRECT, SCALARS, StepOutcome, pack
from grappa.runtime.group import rank_name
from grappa.runtime.replica import ReplicaDiverged, make_optimizer
from grappa.runtime.transport import Link
from grappa.strategies.contribution import Contribution
from grappa.strategies.grappa.reducer import normalise

# `auto`'s rule, from docs/results/shard.md (bench/shard.py): shard when the model has at least
# AUTO_MIN_PARAMS parameters and the ring has AUTO_MIN_RANKS to AUTO_MAX_RANKS members. What
# sharding saves is the optimizer over (M - 1)/M of the model, at most the whole update (a few
# ns a parameter); what it costs is the ring's passes driven from Python instead of inside gloo,
# 2(M - 1) of them, a fixed amount each whatever the model. Measured (M processes sharing 2 CPUs,
# the table "Net" there): at Physics' 2.19 M parameters the net saving is positive at M = 3, 5
# and 9 and shrinks with M; at 135 k parameters it is a loss at every M. Beyond
# M = 9 the passes' cost is extrapolated to exceed the saving, and this machine cannot measure a
# larger ring without its processes' contention dominating: auto stays off there until measured
# on machines of their own; `on` forces it (the memory saving holds at any M).
AUTO_MIN_PARAMS = 1_000_000
AUTO_MIN_RANKS, AUTO_MAX_RANKS = 3, 9


def shard_on(cfg: TrainConfig, n_params: int, members: int) -> bool:
    """Whether this job shards its optimizer: the same answer on every rank (config and model)."""
    mode = cfg.training.shard_optimizer
    if mode == "on":
        return members >= 2
    if mode == "off" or cfg.strategy == "retexo":
        return False
    return n_params >= AUTO_MIN_PARAMS and AUTO_MIN_RANKS <= members <= AUTO_MAX_RANKS


def bounds(n: int, m: int) -> list[tuple[int, int]]:
    """Contiguous near-equal slices of n elements, one per rank (the first n % m one longer)."""
    base, extra = divmod(n, m)
    out, lo = [], 0
    for i in range(m):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def state_bytes(obj: Any) -> Tensor:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def load_state_bytes(data: Tensor) -> Any:
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)


def optimizer_state_nbytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state tensors (Adam's moments and step counts)."""
    return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if torch.is_tensor(v))


def _group(sd: dict, params: list[int]) -> list[dict]:
    return [{**{k: v for k, v in sd["param_groups"][0].items() if k != "params"}, "params": params}]


def slice_state(full: Optional[dict], shapes: list[torch.Size], lo: int, hi: int) -> Optional[dict]:
    """The state of one flat parameter covering [lo, hi) of the model's flat parameters, from an
    unsharded optimizer's state_dict (None: a fresh optimizer, nothing to load)."""
    if full is None or not full["state"]:
        return None
    one: dict[str, Tensor] = {}
    for key, first in full["state"][0].items():
        values = [full["state"][i][key] for i in range(len(shapes))]
        if torch.is_tensor(first) and first.dim() > 0:  # one value per element: flatten, cut
            one[key] = torch.cat([v.reshape(-1) for v in values])[lo:hi].clone()
        else:  # per parameter (Adam's step): equal for every parameter, since all step together
            one[key] = first.clone() if torch.is_tensor(first) else first
    return {"state": {0: one}, "param_groups": _group(full, [0])}


def merge_states(slices: list[dict], shapes: list[torch.Size]) -> dict:
    """The unsharded state_dict from every rank's slice (rank order): what a checkpoint keeps.
    Raises ReplicaDiverged naming a rank whose slice took another number of steps."""
    states = [s["state"].get(0) for s in slices]
    if all(s is None for s in states):
        return {"state": {}, "param_groups": _group(slices[0], list(range(len(shapes))))}
    missing = [r for r, s in enumerate(states) if s is None]
    if missing:
        raise ReplicaDiverged(f"optimizer slices: {', '.join(rank_name(r) for r in missing)} "
                              "has no optimizer state while the others have stepped")
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    full: dict[int, dict] = {i: {} for i in range(len(shapes))}
    for key, first in states[0].items():
        if torch.is_tensor(first) and first.dim() > 0:
            whole = torch.cat([s[key] for s in states])
            for i, part in enumerate(torch.split(whole, sizes)):
                full[i][key] = part.reshape(shapes[i]).clone()
        else:
            bad = [r for r, s in enumerate(states) if not _same(s[key], first)]
            if bad:
                who = ", ".join(f"{rank_name(r)} ({_show(states[r][key])})" for r in bad)
                raise ReplicaDiverged(
                    f"optimizer slices disagree on {key!r}: {who} against the aggregator's "
                    f"{_show(first)}. Every slice takes every step, so this is a fault: the job "
                    "stops; a restart resumes every rank from the last checkpoint.")
            for i in full:
                full[i][key] = first.clone() if torch.is_tensor(first) else first
    return {"state": full, "param_groups": _group(slices[0], list(range(len(shapes))))}


def _same(a: Any, b: Any) -> bool:
    return torch.equal(a, b) if torch.is_tensor(a) else a == b


def _show(v: Any) -> str:
    return f"{float(v):g}" if torch.is_tensor(v) else str(v)


class ShardedStepExchange:
    """This rank's end of the step with a sharded optimizer: reduce-scatter, update its slice,
    all-gather the updates (module doc). Per step it holds the message (its chunks, one buffer)
    and the gathered deltas (one buffer), each the model's size, and its slice's state: no whole
    flat copy of the model besides."""

    def __init__(self, link: Link, model: torch.nn.Module, cfg: TrainConfig):
        self.link, self.model, self.cfg = link, model, cfg
        self.n_params, self.n_buf = num_params(model), num_buffer_values(model)
        self.shapes = [p.shape for p in model.parameters()]
        self.tensors = list(model.parameters()) + float_buffers(model)  # the message body's order
        m = link.world_size
        self.bounds = bounds(self.n_params + self.n_buf, m)  # what each rank owns of the message
        # of which parameters: the optimizer's slices
        self.param_bounds = [(min(lo, self.n_params), min(hi, self.n_params)) for lo, hi in self.bounds]
        lo, hi = self.param_bounds[link.rank]
        self.param = torch.nn.Parameter(torch.zeros(hi - lo))
        self.optimizer = make_optimizer(cfg, [self.param])

    def load_slice(self, state: Optional[dict]) -> None:
        """This rank's slice of the optimizer state (slice_state), after a start or resume."""
        self.optimizer = make_optimizer(self.cfg, [self.param])
        if state is not None:
            self.optimizer.load_state_dict(state)

    def slice_for(self, full: Optional[dict], rank: int) -> Optional[dict]:
        return slice_state(full, self.shapes, *self.param_bounds[rank])

    def merge(self, slices: list[dict]) -> dict:
        return merge_states(slices, self.shapes)

    def step(self, c: Optional[Contribution], epoch: int, stop: bool = False,
             meanwhile: Optional[Callable[[], object]] = None) -> StepOutcome:
        own, ahead = self.link.ring_reduce_scatter(
            self.pack(c, stop), "train", f"the step reduce-scatter of epoch {epoch + 1}", meanwhile)
        out = self.apply(own, epoch)
        out.prefetched = ahead
        return out

    def pack(self, c: Optional[Contribution], stop: bool = False) -> list[Tensor]:
        """exchange.pack's message cut into the M chunks, each followed by the five scalars."""
        scalars = pack(None, _NOTHING, stop)
        body = None
        if c is not None:
            scalars[_WEIGHT], scalars[_LOSS] = c.weight_sum, c.loss_sum
            scalars[_SEEDS], scalars[_CORRECT] = float(c.seeds), float(c.correct)
            body = c.grad_sum
            if self.n_buf and c.seeds:  # the buffers its forward left, times its seeds
                body = torch.cat([body] + [b.detach().reshape(-1) * float(c.seeds)
                                           for b in float_buffers(self.model)])
        chunks = []
        for lo, hi in self.bounds:
            chunk = torch.empty(hi - lo + SCALARS)
            got = 0 if body is None else max(0, min(hi, body.numel()) - lo)  # buffers absent: seeds = 0
            if got:
                chunk[:got].copy_(body[lo:lo + got])
            chunk[got:hi - lo].zero_()
            chunk[-SCALARS:] = scalars
            chunks.append(chunk)
        return chunks

    def _views(self, lo: int, hi: int):
        """(tensor, its flat range, the body's range) of the model's tensors that meet [lo, hi)."""
        at = 0
        for t in self.tensors:
            a, b = max(lo, at), min(hi, at + t.numel())
            if a < b:
                yield t, a - at, b - at, a - lo, b - lo
            at += t.numel()

    def apply(self, own: Tensor, epoch: int) -> StepOutcome:
        """Update this rank's slice from its summed chunk, gather every slice's update, apply."""
        scalars = own[-SCALARS:]
        if float(scalars[_STOP]) > 0:
            return StepOutcome(stopped=True)
        t0 = time.perf_counter()
        seeds, weight = float(scalars[_SEEDS]), float(scalars[_WEIGHT])
        out = StepOutcome(seeds, float(scalars[_LOSS]), float(scalars[_CORRECT]))
        # seeds and the stop flag are sums of integers and weight > 0 is a sum of non-negative
        # terms: every rank takes the same branch, so they all join the same all-gather
        buffers = self.n_buf > 0 and seeds > 0
        if weight <= 0 and not buffers:
            out.apply_seconds = time.perf_counter() - t0
            return out
        r = self.link.rank
        lo, hi = self.bounds[r]
        k = self.param_bounds[r][1] - self.param_bounds[r][0]
        old = torch.empty(hi - lo)
        for t, a, b, x, y in self._views(lo, hi):
            old[x:y] = t.detach().reshape(-1)[a:b]
        new = old.clone()
        if weight > 0:
            with torch.no_grad():
                self.param.copy_(old[:k])
            self.param.grad = normalise(own[:k], weight)
            self.optimizer.step()
            new[:k] = self.param.detach()
        if buffers:  # this slice's share of the buffers: the seed-weighted mean (exchange.py)
            new[k:] = own[k:hi - lo] / seeds
        compute = time.perf_counter() - t0
        deltas = torch.empty(self.n_params + self.n_buf)
        parts = [deltas[a:b] for a, b in self.bounds]
        torch.sub(new, old, out=parts[r])
        self.link.ring_all_gather(parts, "train", f"the step all-gather of epoch {epoch + 1}")
        t1 = time.perf_counter()
        with torch.no_grad():  # every rank adds the same deltas in the same order
            for t, a, b, x, y in self._views(0, self.n_params + self.n_buf):
                t.view(-1)[a:b] += deltas[x:y]
        out.apply_seconds = compute + time.perf_counter() - t1
        return out


class _Nothing(torch.nn.Module):
    """A model without parameters: exchange.pack of it is the five scalars alone."""


_NOTHING = _Nothing()
