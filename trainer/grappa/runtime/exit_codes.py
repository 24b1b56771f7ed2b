"""How a Grappa process ends, as the operator reads it: the exit codes, which errors end a run
with one `grappa: error:` line instead of a traceback, and that line's one writer (`report_error`,
shared by the command line and the predict pods).

0 success; 1 EXIT_CRASH (`group_failed()`: another rank died, froze or diverged; retryable, a
restart resumes); 2 EXIT_CONFIG (a configuration or model file a user wrote is wrong);
3 EXIT_CANNOT_RUN (`cannot_run()`: this job cannot run with this data, these folders or this
model code; permanent); 143 EXIT_STOPPED (stop.py: SIGTERM, the last completed epoch saved).
Torch-free at import: the error classes are looked up only when an error needs sorting, so a
configuration mistake is reported before torch loads.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Optional

EXIT_CRASH, EXIT_CONFIG, EXIT_CANNOT_RUN = 1, 2, 3
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_BYTES = 4096  # what the kubelet keeps of the message


def cannot_run() -> tuple[type[Exception], ...]:
    from grappa.data.errors import ChunkStoreError, DatasetError
    from grappa.models.user_code import ModelCodeError
    from grappa.util.files import OutputDirError
    return ChunkStoreError, DatasetError, OutputDirError, ModelCodeError


def group_failed() -> tuple[type[Exception], ...]:
    """Another process of the job died, froze or diverged (the launcher's LaunchError: a rank or
    a predict worker exited with an error; its message names it and its log)."""
    from grappa.runtime.group import GroupFailure
    from grappa.runtime.local_job import LaunchError
    from grappa.runtime.replica import ReplicaDiverged
    return GroupFailure, ReplicaDiverged, LaunchError


def exit_code(err: BaseException) -> Optional[int]:
    """The exit code of an error a user can act on from its message; None for a crash (a bug:
    its traceback is what helps)."""
    permanent = permanent_code(err)
    if permanent is not None:
        return permanent
    if isinstance(err, group_failed()):
        return EXIT_CRASH
    if isinstance(err, cannot_run()):
        return EXIT_CANNOT_RUN
    return None


def permanent_code(err: BaseException) -> int | None:
    """2 or 3 when `err` means the job cannot run as configured (its own, or another rank's
    relayed by group.PeerCannotRun), else None."""
    from grappa.config import ConfigError
    code = getattr(err, "exit_code", None)
    if code in (EXIT_CONFIG, EXIT_CANNOT_RUN):
        return code
    if isinstance(err, ConfigError):
        return EXIT_CONFIG
    return EXIT_CANNOT_RUN if isinstance(err, cannot_run()) else None


def report_error(err: BaseException) -> None:
    """The one `grappa: error:` line on stderr and, in a pod, as the container's termination
    message, which the operator makes the job's status message (no log tail, no progress bars).
    The kubelet creates the file in every container; it is absent outside a pod."""
    text = f"grappa: error: {err}"
    print(text, file=sys.stderr, flush=True)
    path = os.environ.get("GRAPPA_TERMINATION_LOG", TERMINATION_LOG)
    if os.path.isfile(path) and os.access(path, os.W_OK):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.encode()[:TERMINATION_LOG_BYTES].decode(errors="ignore"))


def run_reporting(command: Callable[[], int]) -> int:
    """`command()`'s exit code; an error with an exit code is reported (`report_error`) and
    ends it with that code, anything else propagates as the crash it is."""
    try:
        return command()
    except Exception as err:
        code = exit_code(err)
        if code is None:
            raise
        report_error(err)
        return code
