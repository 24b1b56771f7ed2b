"""Folders a command writes into (runDir, storeDir), checked before any work starts: a read-only
mount or a path under a file is a job that cannot run (exit 3), said in one line, not a traceback
after minutes of preparing."""
from __future__ import annotations

import os
import uuid
from pathlib import Path


class OutputDirError(RuntimeError):
    """A folder the job must write into cannot be created or written."""


def _blocker(path: Path) -> str:
    """Why `path` cannot be a folder: the nearest existing ancestor that is not one, if any."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return f"{parent} is a file" if not parent.is_dir() else ""
    return ""


def ensure_writable(path: str | Path, field: str, flag: str) -> Path:
    """Create `path` if needed and prove a file can be written in it; OutputDirError otherwise."""
    path = Path(path)
    probe = path / f".grappa-write-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        why = _blocker(path) or err.strerror or str(err)
        raise OutputDirError(
            f"{field} {path}: cannot write there ({why}); give a writable folder with {flag} "
            f"(or set {field}), or mount the volume read-write") from None
    return path
