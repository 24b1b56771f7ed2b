"""Messages between the job's ranks, with exact byte counts.

torch.distributed on gloo (group.py joins the group). Each training step is one all-reduce among
all P + 1 ranks (exchange.py); everything else is point to point (send/recv), whose bytes are
exactly the payloads. The all-reduce is gloo's ring, whose per-rank volume `ring_allreduce_bytes`
computes from gloo's own segmenting (gloo/allreduce.cc): about 2(M-1)/M x N sent and as much
received per rank, for N payload bytes and M ranks. A broadcast is avoided on purpose: gloo's
relays through inner ranks of a tree, which would make per-rank accounting a guess.
Counters are split by kind: "train" (the step's all-reduce), "fetch" (remote features and
activations, worker to worker: full, VARCO, RETEXO), "eval" (layer-wise evaluation), "control"
(round set-up, commands, the replica sync after a start or resume, per-epoch worker reports).
A failed message or collective raises group.GroupFailure naming the ranks that went silent.
"""
from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from grappa.runtime.group import Group

KINDS = ("train", "fetch", "eval", "control")
_HEADER = 9  # ndim, dtype code, up to 7 dims
RING_TAG = 0x5A  # the sharded optimizer's ring passes


_DTYPES = [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool]


class ByteCounter:
    def __init__(self) -> None:
        self.sent: dict[str, int] = defaultdict(int)
        self.received: dict[str, int] = defaultdict(int)

    def snapshot(self) -> dict:
        return {"sent": dict(self.sent), "received": dict(self.received)}


def nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


# gloo's ring all-reduce moves segments of at most this many bytes (AllreduceOptions).
_GLOO_MAX_SEGMENT = 1 << 20


def ring_allreduce_bytes(total: int, element: int, ranks: int, rank: int) -> tuple[int, int]:
    """(sent, received) payload bytes of `rank` in gloo's ring all-reduce of `total` bytes.

    gloo splits the buffer into S segments (S a multiple of M, at least 2M, each at most 1 MiB),
    M per-rank chunks of S/M segments; a reduce-scatter then an all-gather each pass S - S/M
    segments to the left neighbour. Segments past the end of the buffer are short or empty, which
    is why this is computed, not taken as 2(M-1)/M x total.
    """
    if ranks < 2 or total == 0:
        return 0, 0
    max_seg = element * max(1, _GLOO_MAX_SEGMENT // element)
    segments = max(-(-total // max_seg), 2 * ranks)
    segments += (-segments) % ranks
    per_rank = segments // ranks
    seg_bytes = -(-total // segments)
    seg_bytes += (-seg_bytes) % element
    span = segments * seg_bytes

    def length(index: int) -> int:
        return max(0, min(seg_bytes, total - (index * seg_bytes) % span))

    passes = range(segments - per_rank)
    sent = sum(length((rank + 1) * per_rank + i) + length(rank * per_rank + i) for i in passes)
    received = sum(length((rank + 2) * per_rank + i) + length((rank + 1) * per_rank + i) for i in passes)
    return sent, received


class Link:
    """This rank's end of every channel: point to point and the group's collectives."""

    def __init__(self, rank: int, world_size: int, counter: Optional[ByteCounter] = None,
                 group: Optional[Group] = None):
        self.rank = rank
        self.world_size = world_size
        self.bytes = counter or ByteCounter()
        self.group = group
        self._helper: Optional[ThreadPoolExecutor] = None  # the sharded ring's thread, when used

    @classmethod
    def from_env(cls, timeout_s: Optional[float] = None) -> "Link":
        """Join the group described by MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (gloo)."""
        group = Group.join_from_env(timeout_s)
        return cls(group.rank, group.world_size, group=group)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=False)
        if self.group is not None:
            self.group.close()
        elif dist.is_initialized():
            dist.destroy_process_group()

    @contextmanager
    def _failing_as(self, what: str) -> Iterator[None]:
        """A gloo error becomes a GroupFailure naming the silent ranks."""
        try:
            yield
        except RuntimeError as err:
            if self.group is None:
                raise
            raise self.group.failure(what, err) from err

    # Fixed-size messages: both ends know the shape, so only the payload crosses the wire.
    def send(self, t: Tensor, dst: int, kind: str) -> None:
        with self._failing_as(f"a {kind} message to rank {dst}"):
            dist.send(t.contiguous(), dst)
        self.bytes.sent[kind] += nbytes(t)

    def recv(self, buf: Tensor, src: int, kind: str) -> Tensor:
        with self._failing_as(f"a {kind} message from rank {src}"):
            dist.recv(buf, src)
        self.bytes.received[kind] += nbytes(buf)
        return buf

    def send_many(self, items: list[tuple[Tensor, int]], kind: str) -> None:
        """Send to several peers concurrently (the aggregator's commands)."""
        with self._failing_as(f"{kind} messages to the workers"):
            works = [dist.isend(t.contiguous(), dst) for t, dst in items]
            for w in works:
                w.wait()
        for t, _ in items:
            self.bytes.sent[kind] += nbytes(t)

    def recv_many(self, items: list[tuple[Tensor, int]], kind: str) -> list[Tensor]:
        """Receive from several peers concurrently (the workers' reports)."""
        with self._failing_as(f"{kind} messages from the workers"):
            works = [dist.irecv(buf, src) for buf, src in items]
            for w in works:
                w.wait()
        for buf, _ in items:
            self.bytes.received[kind] += nbytes(buf)
        return [buf for buf, _ in items]

    def exchange(self, sends: dict[int, Tensor], recvs: dict[int, Tensor], kind: str) -> None:
        """Send to and receive from several peers at once (worker <-> worker halo rows)."""
        payloads = [(t.contiguous(), dst) for dst, t in sends.items()]
        with self._failing_as(f"a {kind} exchange between workers"):
            works = [dist.isend(t, dst) for t, dst in payloads]
            works += [dist.irecv(buf, src) for src, buf in recvs.items()]
            for w in works:
                w.wait()
        self.bytes.sent[kind] += sum(nbytes(t) for t, _ in payloads)
        self.bytes.received[kind] += sum(nbytes(b) for b in recvs.values())

    def all_reduce(self, t: Tensor, kind: str, what: str,
                   meanwhile: Optional[Callable[[], Any]] = None) -> tuple[Tensor, Any]:
        """Sum `t` in place over every rank (gloo's ring), counting this rank's real volume.
        `meanwhile()` runs here while gloo's own thread moves the bytes; returns (t, its result)."""
        with self._failing_as(what):
            work = dist.all_reduce(t, async_op=True)
        try:
            result = meanwhile() if meanwhile is not None else None
        finally:
            with self._failing_as(what):
                work.wait()
        sent, received = ring_allreduce_bytes(nbytes(t), t.element_size(), self.world_size, self.rank)
        self.bytes.sent[kind] += sent
        self.bytes.received[kind] += received
        return t, result

    # The sharded optimizer's two halves of a ring all-reduce (runtime/sharded.py), written with
    # point-to-point messages to the ring neighbours so every byte is a counted payload: M - 1
    # passes each, chunk i of the sum ending on rank i. A tag of their own keeps them apart from
    # worker-to-worker row exchanges that `meanwhile` may run at the same time.
    def ring_reduce_scatter(self, chunks: list[Tensor], kind: str, what: str,
                            meanwhile: Optional[Callable[[], Any]] = None) -> tuple[Tensor, Any]:
        """`chunks[i]`: this rank's share of chunk i (one per rank, any lengths every rank agrees
        on), summed into in place. Returns chunk `self.rank`, then the sum over every rank, and
        `meanwhile()`'s result."""
        m, r = self.world_size, self.rank
        scratch = torch.empty(max(c.numel() for c in chunks), dtype=chunks[0].dtype)

        def passes() -> Tensor:
            for s in range(m - 1):  # pass the partial sum of chunk r-s-1 right, add to chunk r-s-2
                out, into = (r - s - 1) % m, (r - s - 2) % m
                chunks[into] += self._ring_pass(chunks[out], scratch[:chunks[into].numel()], kind, what)
            return chunks[r]
        return self._in_background(passes, meanwhile)

    def ring_all_gather(self, chunks: list[Tensor], kind: str, what: str) -> list[Tensor]:
        """`chunks[self.rank]` is this rank's; the others are buffers of their agreed lengths,
        filled with the other ranks' chunks."""
        m, r = self.world_size, self.rank
        for s in range(m - 1):  # pass chunk r-s right, take chunk r-s-1 from the left
            self._ring_pass(chunks[(r - s) % m], chunks[(r - s - 1) % m], kind, what)
        return chunks

    def _ring_pass(self, send: Tensor, recv: Tensor, kind: str, what: str) -> Tensor:
        m = self.world_size
        with self._failing_as(what):
            works = [dist.isend(send.contiguous(), (self.rank + 1) % m, tag=RING_TAG),
                     dist.irecv(recv, (self.rank - 1) % m, tag=RING_TAG)]
            for w in works:
                w.wait()
        self.bytes.sent[kind] += nbytes(send)
        self.bytes.received[kind] += nbytes(recv)
        return recv

    def _in_background(self, work: Callable[[], Tensor],
                       meanwhile: Optional[Callable[[], Any]]) -> tuple[Tensor, Any]:
        """Run `work` (the ring's passes, which wait on sockets without the GIL) on a helper thread
        while `meanwhile()` runs here, as the gloo all-reduce's own thread allows."""
        if meanwhile is None:
            return work(), None
        if self._helper is None:
            self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grappa-ring")
        fut = self._helper.submit(work)
        try:
            result = meanwhile()
        finally:
            done = fut.result()
        return done, result

    # Variable-size messages carry a small header (counted too) describing shape and dtype.
    def send_var(self, t: Tensor, dst: int, kind: str) -> None:
        header = torch.zeros(_HEADER, dtype=torch.int64)
        header[0] = t.dim()
        header[1] = _DTYPES.index(t.dtype)
        header[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        self.send(header, dst, kind)
        if t.numel():
            self.send(t, dst, kind)

    def recv_var(self, src: int, kind: str) -> Tensor:
        header = self.recv(torch.zeros(_HEADER, dtype=torch.int64), src, kind)
        ndim, code = int(header[0]), int(header[1])
        shape = [int(s) for s in header[2:2 + ndim]]
        buf = torch.empty(shape, dtype=_DTYPES[code])
        if buf.numel():
            self.recv(buf, src, kind)
        return buf
