"""The same measurement for every system: per machine (network namespace), the bytes its link sent
and received by the kernel's counters, and the CPU seconds of every process in it.

A thread samples, every `interval` seconds, the host end of each namespace's veth (its rx is what
the namespace sent) and the utime + stime of this process's descendants, grouped by the network
namespace they run in. `window(a, b)` interpolates both between samples, so any system that
reports when its epochs started and ended gets per-epoch figures measured the same way.

    with Probe(net) as probe:
        job.run()
    per_machine = probe.window(epoch["started_at"], epoch["ended_at"])
"""
from __future__ import annotations

import bisect
import os
import threading
import time
from pathlib import Path
from typing import Optional

import psutil

# Readings a system should leave between an epoch's end and work outside any epoch (Grappa's
# evaluation: bench/peer.py holds it this long), since `window` splits a reading's counts linearly.
QUIET_READINGS = 4


def _inode(path: str) -> int:
    return os.stat(path).st_ino


class Probe:
    def __init__(self, net, interval: float = 0.05):
        self.net, self.interval = net, interval
        self.ns_inode = {_inode(f"/run/netns/{net.namespace(r)}"): r for r in range(net.ranks)}
        self.times: list[float] = []
        self.samples: list[list[tuple[int, int, float]]] = []  # per sample, per rank: sent, received, cpu
        self._rank_of: dict[int, int] = {}
        self._cpu_seen: dict[int, tuple[int, float]] = {}  # rank, last CPU (an exited process keeps it)
        self._procs: list = []
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _rank(self, pid: int) -> Optional[int]:
        if pid not in self._rank_of:
            try:
                rank = self.ns_inode.get(_inode(f"/proc/{pid}/ns/net"))
            except OSError:
                return None
            if rank is None:  # e.g. `ip netns exec` before its setns(): look again next time
                return None
            self._rank_of[pid] = rank
        return self._rank_of[pid]

    def _processes(self) -> list:
        """The descendants, listed again every 20th sample only: listing walks all of /proc, and
        the probe must not take CPU from the jobs it measures (processes start at the beginning)."""
        if self._count % 20 == 0:
            self._procs = psutil.Process().children(recursive=True)
        self._count += 1
        return self._procs

    def sample(self) -> None:
        cpu = [0.0] * self.net.ranks
        for proc in self._processes():
            rank = self._rank(proc.pid)
            if rank is None:
                continue
            try:
                t = proc.cpu_times()
                self._cpu_seen[proc.pid] = (rank, t.user + t.system)
            except psutil.Error:
                pass
        for rank, seconds in self._cpu_seen.values():
            cpu[rank] += seconds
        row = []
        for r in range(self.net.ranks):
            stats = Path(f"/sys/class/net/{self.net.tag}h{r}/statistics")
            sent, received = int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())
            row.append((sent, received, cpu[r]))
        self.times.append(time.time())
        self.samples.append(row)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "Probe":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._count = 0
        self.sample()

    def _at(self, t: float) -> list[tuple[float, float, float]]:
        i = bisect.bisect_left(self.times, t)
        if i <= 0:
            return [tuple(map(float, r)) for r in self.samples[0]]
        if i >= len(self.times):
            return [tuple(map(float, r)) for r in self.samples[-1]]
        t0, t1 = self.times[i - 1], self.times[i]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return [tuple(a + f * (b - a) for a, b in zip(r0, r1))
                for r0, r1 in zip(self.samples[i - 1], self.samples[i])]

    def window(self, start: float, end: float) -> list[dict]:
        """Per machine: bytes sent and received and CPU seconds between two wall-clock times."""
        a, b = self._at(start), self._at(end)
        return [{"sent_bytes": int(y[0] - x[0]), "received_bytes": int(y[1] - x[1]),
                 "cpu_seconds": y[2] - x[2]} for x, y in zip(a, b)]
