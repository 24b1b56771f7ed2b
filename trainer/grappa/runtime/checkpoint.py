"""Aggregator checkpoints: atomic writes, resume from the newest one in the run directory (or,
with a run home in the bucket and none here, the bucket's newest complete one: data/s3/run_home.py).

`LastEpoch` keeps the state at the last completed epoch as bytes, so a SIGTERM can write it from
any thread while the training loop goes on changing the live model (stop.py, entry.py).
"""
from __future__ import annotations

import io
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from grappa.util.files import atomic_write

_NAME = re.compile(r"^epoch-(\d{6})\.pt$")


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def encode_state(state: dict[str, Any]) -> bytes:
    import torch  # here, not above: the launcher reads a run folder without loading torch
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_checkpoint(run_dir: str | Path, epoch: int, state: dict[str, Any], keep: int = 2) -> Path:
    return write_checkpoint(run_dir, epoch, encode_state(state), keep)


def write_checkpoint(run_dir: str | Path, epoch: int, payload: bytes, keep: int = 2) -> Path:
    """Write `epoch-NNNNNN.pt` atomically, then drop all but the newest `keep`."""
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"epoch-{epoch:06d}.pt"
    atomic_write(path, payload)
    for old in sorted(p for p in d.iterdir() if _NAME.match(p.name))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def latest_checkpoint(run_dir: str | Path) -> Optional[Path]:
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return None
    found = sorted(p for p in d.iterdir() if _NAME.match(p.name))
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    import torch
    try:
        return torch.load(path, weights_only=False)
    except Exception as err:  # a torn or foreign file: say which, don't guess
        raise RuntimeError(f"checkpoint {path} cannot be read ({err}); delete it to resume from "
                           "the previous one, or use a new runDir") from err


@dataclass
class EpochState:
    epoch: int  # epochs completed
    step: int  # optimizer steps completed
    payload: Optional[bytes]  # None when `path` already holds it
    path: Optional[Path] = None  # where it is on disk, once written


class LastEpoch:
    """The state at the last epoch boundary, serialized: immutable, so writing it needs no
    cooperation from the training loop. `lock` also covers the loop's end-of-epoch bookkeeping,
    so a checkpoint and metrics.jsonl always agree on the epochs completed."""

    def __init__(self, run_dir: str | Path, keep: int = 2, home=None):
        self.run_dir, self.keep = Path(run_dir), keep
        self.home = home  # the run's home in the bucket (data/s3/run_home.py): each checkpoint goes up too
        self.lock = threading.RLock()
        self.latest: Optional[EpochState] = None

    def on_disk(self, epoch: int, step: int, path: Path) -> None:
        """The state just resumed from: already saved."""
        with self.lock:
            self.latest = EpochState(epoch, step, None, path)

    def record(self, epoch: int, step: int, state: dict[str, Any], write: bool) -> None:
        with self.lock:
            self.latest = EpochState(epoch, step, encode_state(state))
            if write:
                self.save()

    def save(self) -> Optional[EpochState]:
        """Write the last epoch's state unless it is on disk already; None when no epoch has
        completed (nothing newer than what a restart would resume from anyway)."""
        with self.lock:
            s = self.latest
            if s is not None and s.path is None:
                path = write_checkpoint(self.run_dir, s.epoch, s.payload, self.keep)
                if self.home is not None:  # written locally first: the bucket gets whole files only
                    self.home.put_checkpoint(path, self.keep)
                s.path, s.payload = path, None  # saved now; free the copy
            return s
