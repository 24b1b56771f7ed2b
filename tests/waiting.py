"""Waiting in tests: on the condition itself, for as long as the work behind it moves.

A fixed wall-clock budget fails a test on a cold, busy machine that is slow but fine (the
happy-path job at epoch 10 of 10 when its 420 s ran out). Here a wait fails only when the work it
waits for has *stopped moving*: `progress()` returns a fingerprint of that work (log sizes, a
job's phase and epoch) and the wait fails once it has not changed for `stall` seconds, a budget
stretched by the machine's load (a run queue twice the cores doubles it). `ceiling` bounds the
whole wait, so a job that moves forever (a crash loop) still ends the test.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable
from typing import Optional, TypeVar

T = TypeVar("T")


def load_factor() -> float:
    """The run queue per core, at least 1: how much slower than an idle machine this one is now."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def wait_until(done: Callable[[], Optional[T]], what: str, *, stall: float,
               progress: Optional[Callable[[], Hashable]] = None, ceiling: float = 1800.0,
               poll: float = 0.2, describe: Optional[Callable[[], str]] = None) -> T:
    """`done()`'s first truthy result. Fails (AssertionError naming `what`, plus `describe()`) when
    `progress()` has not changed for `stall` x load seconds (without `progress`: when `done` has
    not come true in that time), or after `ceiling` x load seconds in all."""
    start = last_move = time.monotonic()
    seen = progress() if progress else None
    while True:
        result = done()
        if result:
            return result
        now = time.monotonic()
        if progress is not None:
            fingerprint = progress()
            if fingerprint != seen:
                seen, last_move = fingerprint, now
        scale = load_factor()
        idle = now - last_move
        if idle > stall * scale or now - start > ceiling * scale:
            why = (f"nothing moved for {idle:.0f} s" if idle > stall * scale
                   else f"still moving after {now - start:.0f} s")
            detail = describe() if describe else ""
            raise AssertionError(f"gave up waiting for {what}: {why} (load factor {scale:.1f}, last "
                                 f"progress {seen!r}){detail}")
        time.sleep(poll)
