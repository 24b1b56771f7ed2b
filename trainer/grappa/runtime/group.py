"""The job's process group: rendezvous, a bounded timeout, and naming the rank that failed.

Every rank joins one gloo group through a TCPStore hosted by rank 0 (the aggregator). gloo's own
default timeout is 30 minutes and its errors name a socket, not a rank, so:

- the group's timeout is `GRAPPA_COLLECTIVE_TIMEOUT_SECONDS` (default 600 s): a rank that hangs
  without closing its sockets ends every collective waiting on it within that bound. A rank whose
  process dies closes its sockets, and its neighbours fail at once;
- every rank bumps its own counter in the store once a second from a background thread
  (`grappa/beat/<rank>`), and a rank that leaves on purpose says so (`grappa/left/<rank>`); after a
  collective fails, the counters that stopped moving name the dead or frozen ranks
  (`GroupFailure`). If the aggregator itself is gone, its store is too, and that names it.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta
from typing import Optional

import torch.distributed as dist

from grappa.runtime.rendezvous import open_store

log = logging.getLogger("grappa.group")

DEFAULT_TIMEOUT_S = 600.0
JOIN_TIMEOUT_S = 1800.0
BEAT_S = 1.0
# A counter that has not moved for this long, read twice, belongs to a rank that is gone.
SILENT_AFTER_S = 3.0 * BEAT_S


def rank_name(rank: int) -> str:
    return "aggregator (rank 0)" if rank == 0 else f"worker {rank - 1} (rank {rank})"


def timeout_from_env() -> float:
    raw = os.environ.get("GRAPPA_COLLECTIVE_TIMEOUT_SECONDS", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise RuntimeError(f"GRAPPA_COLLECTIVE_TIMEOUT_SECONDS must be a number of seconds, not {raw!r}")
    if value <= 0:
        raise RuntimeError(f"GRAPPA_COLLECTIVE_TIMEOUT_SECONDS must be > 0, not {raw!r}")
    return value


class GroupFailure(RuntimeError):
    """A collective or message failed because another rank died, froze or left."""

    def __init__(self, what: str, silent: Optional[list[int]], detail: str):
        self.silent = silent if silent is not None else [0]
        if silent is None:
            msg = (f"{what} failed: the aggregator (rank 0) is gone, its rendezvous store does not "
                   f"answer (it ended on an error, or its process died; its log says why). ({detail})")
        elif silent:
            who = ", ".join(rank_name(r) for r in silent)
            msg = (f"{what} failed: {who} stopped answering (its process died or hung; its log says "
                   f"why). The group is ended; a restart resumes from the last checkpoint. ({detail})")
        else:
            msg = f"{what} failed ({detail})"
        super().__init__(msg)


class PeerCannotRun(RuntimeError):
    """Another rank ended on a permanent error (exit 2 or 3: its configuration or its model code
    cannot run); this rank ends with the same code and line, so the job's every failed process says
    why and none looks like a crash worth a restart."""

    def __init__(self, rank: int, code: int, line: str):
        super().__init__(f"{rank_name(rank)}: {line}")
        self.rank, self.exit_code = rank, code


class Group:
    """This rank's membership: joins the gloo group and keeps its heartbeat going."""

    def __init__(self, rank: int, world_size: int, store: Optional[dist.Store], timeout_s: float):
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.store = store
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @classmethod
    def join_from_env(cls, timeout_s: Optional[float] = None) -> "Group":
        """Join the group described by MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE."""
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if k not in os.environ]
        if missing:
            raise RuntimeError(f"missing rendezvous environment variables: {', '.join(missing)}")
        timeout_s = timeout_s or timeout_from_env()
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        # Joining may wait for pods still being scheduled or pulling images: the store keeps the
        # old half-hour for that; collectives get the (shorter) group timeout.
        store = open_store(host, port, world, rank, timedelta(seconds=max(JOIN_TIMEOUT_S, timeout_s)))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        group = cls(rank, world, store, timeout_s)
        group._start_beating(host, port)
        return group

    # -- heartbeat -----------------------------------------------------------------------------
    def _start_beating(self, host: str, port: int) -> None:
        # Its own client connection: the store's client is not shared across threads.
        beat_store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=10),
                                   wait_for_workers=False)
        self._thread = threading.Thread(target=self._beat, args=(beat_store,), name="grappa-beat",
                                        daemon=True)
        self._thread.start()

    def _beat(self, store: dist.Store) -> None:
        key = f"grappa/beat/{self.rank}"
        while not self._stop.is_set():
            try:
                store.add(key, 1)
            except Exception:  # the aggregator's store is gone: nothing left to tell
                return
            self._stop.wait(BEAT_S)

    def leaving(self, reason: str) -> None:
        """Say this rank leaves on purpose, so a failure it causes is not blamed on a crash."""
        self._stop.set()
        try:
            if self.store is not None:
                self.store.set(f"grappa/left/{self.rank}", reason)
        except Exception:
            pass

    def cannot_run(self, code: int, line: str) -> None:
        """This rank ends on a permanent error: tell the others before leaving (failure())."""
        try:
            if self.store is not None:
                self.store.set(f"grappa/cannot-run/{self.rank}", f"{code} {line}")
        except Exception:
            pass
        self.leaving("cannot run")

    def peer_cannot_run(self) -> Optional[PeerCannotRun]:
        """The first other rank that said it cannot run, if any."""
        try:
            for r in range(self.world_size):
                if r != self.rank and self.store is not None and self.store.check([f"grappa/cannot-run/{r}"]):
                    code, _, line = self.store.get(f"grappa/cannot-run/{r}").decode().partition(" ")
                    return PeerCannotRun(r, int(code), line)
        except Exception:
            return None
        return None

    def silent_ranks(self) -> Optional[list[int]]:
        """The other ranks whose heartbeat stopped and that did not leave on purpose; None if the
        store (the aggregator) cannot be reached."""
        if self.store is None:
            return []
        others = [r for r in range(self.world_size) if r != self.rank]
        try:
            first = {r: self._count(r) for r in others}
            time.sleep(SILENT_AFTER_S)
            second = {r: self._count(r) for r in others}
            left = {r for r in others if self.store.check([f"grappa/left/{r}"])}
        except Exception:
            return None
        return [r for r in others if second[r] == first[r] and r not in left]

    def _count(self, rank: int) -> int:
        return int(self.store.add(f"grappa/beat/{rank}", 0))

    def failure(self, what: str, err: BaseException):
        """The error to raise for a failed collective: another rank's permanent error when one
        said so, else a GroupFailure naming the ranks that went silent."""
        silent = self.silent_ranks()  # waits SILENT_AFTER_S: a leaving rank has said why by then
        peer = self.peer_cannot_run()
        if peer is not None:
            log.error("%s", peer)
            return peer
        first_line = str(err).splitlines()[0] if str(err) else ""
        failure = GroupFailure(what, silent, f"{type(err).__name__}: {first_line}")
        log.error("%s", failure)
        return failure

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:  # the heartbeat's store client goes before the group
            self._thread.join(timeout=2 * BEAT_S)
        if dist.is_initialized():
            dist.destroy_process_group()
