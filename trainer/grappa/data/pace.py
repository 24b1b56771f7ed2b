"""A background fetch spread over a time budget, so the next round's data comes while the current
round trains without taking the link from its epochs all at once (data/prefetch.py).

The fetch announces the bytes it will read (`begin`, again when it learns of more) and reports
each block as it comes (`spend`); a block waits until the fetch is no further ahead than its
share of the budget:

    wait until  now >= t_ref + (done - done_ref) / (total - done_ref) x (deadline - t_ref)

where (t_ref, done_ref) is when the budget was last set (`retarget`: the worker learns its epoch
time as the round goes on, and the budget follows). No deadline: no wait. Bytes the fetch will
only know of later (a halo's rows, found from the chunks it fetches first) may be counted from the
start as an estimate (`expect`), replaced by their real size when known (`settle`): otherwise the
first bytes would be spread over the whole budget and the late ones crowd its end. `release` lifts the
pace at once (the round needs its data now), waking a block that waits.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional


class Pace:
    def __init__(self, seconds: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Optional[Callable[[float], object]] = None) -> None:
        self.clock = clock
        self._sleep = sleep if sleep is not None else self._wait
        self.total = self.done = 0
        self.expected = 0  # of total, the estimate of bytes not announced yet
        self._free = threading.Event()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds the fetch waited in all
        self.retarget(seconds)

    def retarget(self, seconds: Optional[float]) -> None:
        """The rest of the fetch spread over `seconds` from now (None or <= 0: at once)."""
        with self._lock:
            self.t_ref, self.done_ref = self.clock(), self.done
            self.deadline = None if seconds is None or seconds <= 0 else self.t_ref + seconds

    def release(self) -> None:
        with self._lock:
            self.deadline = None
        self._free.set()

    def begin(self, n: int) -> None:
        """`n` more bytes will come, besides those announced before."""
        with self._lock:
            self.total += n

    def expect(self, n: int) -> None:
        """About `n` more bytes will come, announced later by `settle`."""
        with self._lock:
            self.total += n
            self.expected += n

    def settle(self, n: int) -> None:
        """The expected bytes are `n` in fact (0: none came)."""
        with self._lock:
            self.total = max(self.done, self.total - self.expected + n)
            self.expected = 0

    def due(self) -> float:
        """Seconds the fetch should wait now to keep to its budget (0: go on)."""
        with self._lock:
            if self.deadline is None or self.total <= self.done_ref:
                return 0.0
            share = min(1.0, (self.done - self.done_ref) / (self.total - self.done_ref))
            return max(0.0, self.t_ref + share * (self.deadline - self.t_ref) - self.clock())

    def spend(self, n: int) -> None:
        """`n` bytes came: wait while the fetch is ahead of its budget."""
        with self._lock:
            self.done += n
        while (wait := self.due()) > 0 and not self._free.is_set():
            t0 = self.clock()
            self._sleep(min(wait, 1.0))  # a budget set shorter meanwhile is seen within a second
            self.waited += self.clock() - t0

    def _wait(self, seconds: float) -> None:
        self._free.wait(seconds)
