"""A rerun in an existing run directory: resume it only when it is the same run.

The newest checkpoint holds the configuration the run was made with (what a resume would load;
report.json's when a finished run kept none).
Every setting is compared with it except where things live and how they are looked at
(`PLACE_ONLY`); `training.epochs` may grow, which extends the run (RETEXO excepted: its epochs
are split over its stages). Anything else that differs refuses the rerun, naming each field,
because resuming would mix two runs in one report (or fail loading another model's weights).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional

from grappa.config import ConfigError, TrainConfig, dump_config

# Wire names (camelCase, dotted) that never change what a run computes.
PLACE_ONLY = ("runDir", "storeDir", "metricsPort", "dataset.root", "dataset.download", "prepare",
              "checkpoint", "model.custom.codePath")  # the code's identity is checked at resume
# What `start_over` removes: everything a run writes into its directory except the chunk store,
# which prepare keys by the dataset itself.
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "report.json", "model.pt", "training.png", "logs",
               "pids.json", "retexo")
START_OVER_FLAG = "--start-over"


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def _ignored(field: str) -> bool:
    return any(field == p or field.startswith(p + ".") for p in PLACE_ONLY)


def differences(saved: dict, cfg: TrainConfig) -> list[str]:
    """Each defining setting that differs, as `field: was X, now Y`."""
    before = flatten(saved)
    now = flatten(json.loads(dump_config(cfg)))
    out = []
    for field in sorted(set(before) | set(now)):
        old, new = before.get(field), now.get(field)
        if old == new or _ignored(field):
            continue
        if field == "training.epochs" and cfg.strategy != "retexo" and \
                isinstance(old, int) and new >= old:
            continue  # more epochs extend the run
        out.append(f"{field}: {json.dumps(old)} in the run, {json.dumps(new)} now")
    return out


def saved_config(run_dir: Path) -> Optional[tuple[Path, dict]]:
    """(file, config) of the newest checkpoint, else of report.json (a finished run that kept no
    checkpoint), or None when the folder holds no run."""
    from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
    path = latest_checkpoint(run_dir)
    if path is None:
        report = run_dir / "report.json"
        try:
            return report, json.loads(report.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
    try:
        ck = load_checkpoint(path)
    except RuntimeError as err:
        raise ConfigError(f"{err}; or {START_OVER_FLAG} to discard the run") from None
    config = ck.get("config")
    return path, json.loads(config) if isinstance(config, str) else (config or {})


def check_rerun(cfg: TrainConfig) -> None:
    """Raise ConfigError (exit 2) when cfg.run_dir holds a different run."""
    found = saved_config(Path(cfg.run_dir))
    if found is None:
        return
    path, saved = found
    diffs = differences(saved, cfg)
    if diffs:
        raise ConfigError(
            f"run directory {cfg.run_dir} holds a run with other settings (from {path}):\n  "
            + "\n  ".join(diffs)
            + f"\nits results would be mixed with this one's. Give a new --run-dir, or add "
              f"{START_OVER_FLAG} to delete its results ({', '.join(RUN_OUTPUTS)}; the chunk store "
              f"is kept) and train from scratch; to resume it, rerun with its settings")


def start_over(run_dir: Path) -> list[str]:
    """Delete a run's outputs (never the chunk store); returns what was removed."""
    removed = []
    for name in RUN_OUTPUTS:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
        else:
            continue
        removed.append(name)
    return removed
