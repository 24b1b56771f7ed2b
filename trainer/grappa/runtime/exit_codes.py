"""How a Grappa process ends, as the operator reads it: the exit codes, and which errors end a
run with one `grappa: error:` line instead of a traceback.

0 success; 1 EXIT_CRASH (`group_failed()`: another rank died, froze or diverged; retryable, a
restart resumes); 2 EXIT_CONFIG (a configuration or model file a user wrote is wrong);
3 EXIT_CANNOT_RUN (`cannot_run()`: this job cannot run with this data, these folders or this
model code; permanent); 143 EXIT_STOPPED (stop.py: SIGTERM, the last completed epoch saved).
Torch-free at import: the error classes are looked up only when an error needs sorting, so a
configuration mistake is reported before torch loads.
"""
from __future__ import annotations

EXIT_CRASH, EXIT_CONFIG, EXIT_CANNOT_RUN = 1, 2, 3


def cannot_run() -> tuple[type[Exception], ...]:
    from grappa.data.errors import ChunkStoreError, DatasetError
    from grappa.models.user_code import ModelCodeError
    from grappa.util.files import OutputDirError
    return ChunkStoreError, DatasetError, OutputDirError, ModelCodeError


def group_failed() -> tuple[type[Exception], ...]:
    from grappa.runtime.group import GroupFailure
    from grappa.runtime.replica import ReplicaDiverged
    return GroupFailure, ReplicaDiverged


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
