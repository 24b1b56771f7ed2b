"""This process's memory: peak RSS (the kernel's VmHWM) and PSS (proportional set size: a page
shared by k processes, such as the store's memory-mapped files or torch's libraries, counts 1/k
in each, so the PSS of all ranks adds up to what the machine really holds).

The kernel keeps a peak for RSS only, so PSS is sampled: at every `sample()` call, by
`sample_every()` at most once per interval, and by an optional background thread. A reading walks
every mapping (14-21 ms of CPU with torch and a chunk store mapped): keep it off hot paths. Each
sample also reads the process's memory cgroup (cgroup_memory.py: a pod's limit is enforced on it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time
import weakref

from grappa.util.cgroup_memory import CgroupPeaks


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the kernel (glibc's malloc_trim).

    Building a round's local graph frees many large temporaries, and glibc keeps them in a heap
    that only shrinks from its top: without this, ~6 bytes per local edge stayed resident for the
    whole round (measured on RMAT-20). Called once per round, so steps keep glibc's fast reuse.
    It costs the round's first epoch too: the steps' free pages go back with the rest and fault in
    again (P = 8, a round every 2 epochs: RMAT-17 ~10,000 faults and ~0.015-0.02 CPU-s a round,
    RMAT-20 ~6% of its modelled epoch). Kept for rounds built ahead too: without it RMAT-20's
    workers peaked 4% higher in RSS (5 rounds), and RMAT-17's model did not gain over 10 rounds.
    False where the C library has no malloc_trim (musl, macOS): nothing changes there.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None. Looked up once: find_library runs `ldconfig -p` in a child
    process, and forking a worker that maps a store costs more CPU than the trim itself."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def _status_kib(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_bytes() -> int:
    """Peak resident memory of this process. Not getrusage's ru_maxrss: that survives exec and so
    reports the launcher's peak when it is larger (a forked child starts with its parent's mm)."""
    return _status_kib("/proc/self/status", "VmHWM:") * 1024


def pss_bytes() -> int:
    return _status_kib("/proc/self/smaps_rollup", "Pss:") * 1024


class PeakMemory:
    """Peak RSS, the largest PSS seen so far, and the memory cgroup's peaks (`cgroup`)."""

    def __init__(self, interval: float = 0.0) -> None:
        self.peak_pss = 0
        self.cgroup = CgroupPeaks()
        self._last = 0.0
        self._stop = threading.Event()
        if interval > 0:
            # The thread holds the sampler weakly, so one its owner forgot to stop ends with it: a
            # process that runs many workers in-process (the tests' threads) would otherwise keep
            # one reading thread per worker, each walking every mapping of the process.
            threading.Thread(target=_sample_while_alive, args=(weakref.ref(self), self._stop, interval),
                             name="grappa-pss", daemon=True).start()

    def sample(self) -> None:
        self.peak_pss = max(self.peak_pss, pss_bytes())
        self.cgroup.sample()
        self._last = time.monotonic()

    def sample_every(self, seconds: float) -> None:
        if time.monotonic() - self._last >= seconds:
            self.sample()

    def stop(self) -> None:
        self._stop.set()

    @property
    def peak_rss(self) -> int:
        return peak_rss_bytes()


def _sample_while_alive(ref: "weakref.ref[PeakMemory]", stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        memory = ref()
        if memory is None:
            return
        memory.sample()
        del memory  # no strong reference while waiting
