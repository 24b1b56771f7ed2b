"""Writing files safely: folders a command writes into (runDir, storeDir) are checked before any
work starts (a read-only mount or a path under a file is a job that cannot run, exit 3, said in
one line, not a traceback after minutes of preparing), and a file is replaced atomically."""
from __future__ import annotations

import hashlib
import os
import uuid
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class OutputDirError(RuntimeError):
    """A folder the job must write into cannot be created or written."""


def _blocker(path: Path) -> str:
    """Why `path` cannot be a folder: the nearest existing ancestor that is not one, if any."""
    for parent in [path, *path.parents]:
        if parent.exists():
            return f"{parent} is a file" if not parent.is_dir() else ""
    return ""


def ensure_writable(path: str | Path, field: str, flag: str) -> Path:
    """Create `path` if needed and prove a file can be written in it; OutputDirError otherwise.
    `field`: the config field it comes from (or the flag itself, for a command's own flag)."""
    path = Path(path)
    probe = path / f".grappa-write-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        why = _blocker(path) or err.strerror or str(err)
        setting = "" if field == flag else f" (or set {field})"
        raise OutputDirError(
            f"{field} {path}: cannot write there ({why}); give a writable folder with {flag}"
            f"{setting}, or mount the volume read-write") from None
    return path


def atomic_write(path: Path, payload: bytes) -> None:
    """Temp file, fsync, rename, fsync the folder: a crash or SIGKILL at any point leaves either
    the old file or the new one, never a torn one (the rename is atomic, and durable once the
    folder is synced)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def removed_if_left_empty(path: str | Path) -> Iterator[Path]:
    """On an error inside the block, remove `path` and the parents missing before it, where the
    block created them and left them empty: a failed command leaves no empty folder behind (a
    folder holding anything, or one that existed before, is kept)."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]  # innermost first
    try:
        yield path
    except BaseException:
        for p in missing:
            try:
                p.rmdir()  # refuses a folder that is not empty
            except OSError:
                break
        raise


def _blocks(path: str | Path, offset: int = 0, block: int = 1 << 20) -> Iterator[memoryview]:
    """A file's bytes from `offset`, one reused buffer at a time (half the CPU of read() here,
    which allocates, and faults in, a new buffer for every block)."""
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        fh.seek(offset)
        while n := fh.readinto(buf):
            yield view[:n]


def sha256_of(path: str | Path, offset: int = 0) -> str:
    """Hex sha256 of a file's bytes from `offset` (a .npy's data: offset past its header)."""
    h = hashlib.sha256()
    for buf in _blocks(path, offset):
        h.update(buf)
    return h.hexdigest()


def crc32_of(path: str | Path) -> int:
    """CRC-32 of a file's bytes: a check against a torn or damaged copy of a file this program
    wrote itself (some 3x cheaper than sha256 here), not against one made to match."""
    crc = 0
    for buf in _blocks(path):
        crc = zlib.crc32(buf, crc)
    return crc
