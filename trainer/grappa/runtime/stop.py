"""SIGTERM: how a trainer process stops when Kubernetes suspends, preempts or drains it.

Kubernetes sends SIGTERM to every pod and SIGKILL `terminationGracePeriodSeconds` later. The
aggregator must write its last completed epoch in between; workers hold no state and just exit.

A Python signal handler only runs when the main thread gets back to the interpreter, which it
does not while it waits in gloo for a gradient (possibly from a worker that is itself being
killed). So the signal is noticed by a thread reading the interpreter's wakeup fd: it sets
`requested`, which the training loop checks between steps (its safe points), and if the main
thread has not finished stopping `grace_s` later, the thread runs `on_timeout` itself (for the
aggregator: write the last epoch's state, which is immutable bytes, see checkpoint.LastEpoch)
and ends the process with EXIT_STOPPED.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Callable, Optional

# "Stopped by SIGTERM; the last completed epoch is checkpointed": 128 + SIGTERM, what a shell
# reports for a process SIGTERM killed. Retryable, unlike the permanent exit codes 2 and 3.
EXIT_STOPPED = 128 + signal.SIGTERM
# How long the aggregator's main thread gets to reach a safe point before the watcher writes
# the checkpoint itself. The state written is the same either way; waiting buys a clean exit.
SAFE_POINT_WAIT_S = 2.0

log = logging.getLogger("grappa.stop")


class StopRequested(Exception):
    """Raised by the training loop at a safe point once SIGTERM has arrived."""


class Stopped(Exception):
    """The process stopped on SIGTERM as documented: the CLI exits EXIT_STOPPED."""


class SigtermWatch:
    def __init__(self, on_timeout: Callable[[], None], grace_s: float = SAFE_POINT_WAIT_S):
        self.on_timeout, self.grace_s = on_timeout, grace_s
        self.requested = threading.Event()
        self._previous: Optional[object] = None

    def install(self) -> "SigtermWatch":
        """Main thread only (Python's rule for signal handlers and the wakeup fd)."""
        r, w = os.pipe()
        os.set_blocking(w, False)  # the C-level handler must never block
        # A Python handler at all keeps the default action (death) off; it also makes SIGTERM
        # deliverable to a container's PID 1, which ignores signals it has no handler for.
        self._previous = signal.signal(signal.SIGTERM, lambda *_: None)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(r,), name="sigterm-watch", daemon=True).start()
        return self

    def check(self) -> None:
        if self.requested.is_set():
            raise StopRequested()

    def _watch(self, fd: int) -> None:
        while signal.SIGTERM not in os.read(fd, 64):  # other signals' bytes land here too
            pass
        log.info("SIGTERM received%s", f": stopping at the next safe point (at most {self.grace_s:g} s)"
                 if self.grace_s else "")
        self.requested.set()
        threading.Event().wait(self.grace_s)  # the main thread exits meanwhile, if it can
        try:
            self.on_timeout()
        except BaseException:
            log.exception("SIGTERM: stopping failed")
            os._exit(1)
        os._exit(EXIT_STOPPED)
