"""Aggregator checkpoints: atomic writes, resume from the newest one in the run directory."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

import torch

_NAME = re.compile(r"^epoch-(\d{6})\.pt$")


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, epoch: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write `epoch-NNNNNN.pt` via a temp file + rename, so a crash never leaves a torn checkpoint."""
    d = checkpoint_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"epoch-{epoch:06d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
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
    try:
        return torch.load(path, weights_only=False)
    except Exception as err:  # a torn or foreign file: say which, don't guess
        raise RuntimeError(f"checkpoint {path} cannot be read ({err}); delete it to resume from "
                           "the previous one, or use a new runDir") from err
