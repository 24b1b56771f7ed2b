"""A rerun in an existing run directory: resume it only when it is the same run, and say so when
that run is finished instead of starting its processes again.

The newest checkpoint holds the configuration the run was made with (what a resume would load;
report.json's when a finished run kept none). Every setting is compared with it except where
things live and how they are looked at (`PLACE_ONLY`); `training.epochs` may grow, which extends
the run (RETEXO excepted: its epochs are split over its stages; `grappa single` excepted: it keeps
no checkpoint to extend). A setting the run's config does not hold (it predates the field) counts
as its default. Anything else that differs refuses the rerun, naming each field, because resuming
would mix two runs in one report (or fail loading another model's weights).

Which command made a run is in report.json (`command`); a `grappa single` run and a `grappa train`
run never share a run directory.
"""
from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path
from typing import Any, Optional

from grappa.config import ConfigError, TrainConfig, dump_config

# Wire names (camelCase, dotted) that never change what a run computes.
PLACE_ONLY = ("runDir", "storeDir", "metricsPort", "dataset.root", "dataset.download", "prepare",
              "checkpoint", "model.custom.codePath")  # the code's identity is checked at resume
# What `start_over` removes: everything a run writes into its directory except the chunk store,
# which prepare keys by the dataset itself; the model's default predict/evaluate outputs go with
# the model they came from (only when they hold nothing but those outputs).
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "report.json", "model.pt", "training.png", "logs",
               "pids.json", "retexo", "eval-layers", "stage-*.pt")
MODEL_OUTPUTS = ("predictions", "evaluation")
START_OVER_FLAG = "--start-over"
TRAIN, SINGLE = "train", "single"


# Besides RUN_OUTPUTS and MODEL_OUTPUTS, what a run directory may hold: the default chunk store
# (and the folders a --reprepare swaps it through), the default stores of a dataset predicted on
# next to the model (OUT-store), a write probe.
OTHER_ENTRIES = ("store", ".store.*", "predictions-store", "evaluation-store", ".grappa-write-test-*")


def _a_runs(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in (*RUN_OUTPUTS, *MODEL_OUTPUTS, *OTHER_ENTRIES))


def check_contents(run_dir: Path, flag: str = "--run-dir") -> None:
    """ConfigError (exit 2) when the run directory holds anything a run does not write: a run
    would write beside it, or over it (a user's own model.pt or report.json)."""
    if not run_dir.is_dir():
        return
    foreign = sorted(p.name for p in run_dir.iterdir() if not _a_runs(p.name))
    if foreign:
        raise ConfigError(
            f"run directory {run_dir} holds files that are not a run's ({', '.join(foreign[:6])}"
            f"{', ...' if len(foreign) > 6 else ''}): a run writes only into a new or empty folder, or "
            f"one holding a run's own files; give a new {flag}")


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def _ignored(field: str) -> bool:
    return any(field == p or field.startswith(p + ".") for p in PLACE_ONLY)


def differences(saved: dict, cfg: TrainConfig, extendable: bool = True) -> list[str]:
    """Each defining setting that differs, as `field: was X, now Y`."""
    before = flatten(saved)
    now = flatten(json.loads(dump_config(cfg)))
    defaults = flatten(json.loads(dump_config(TrainConfig())))
    out = []
    for field in sorted(set(before) | set(now)):
        # a field the run's config lacks is one this Grappa added since: the run had its default
        old, new = before[field] if field in before else defaults.get(field), now.get(field)
        if old == new or _ignored(field):
            continue
        if field == "training.epochs" and extendable and cfg.strategy != "retexo" and \
                isinstance(old, int) and new >= old:
            continue  # more epochs extend the run
        out.append(f"{field}: {json.dumps(old)} in the run, {json.dumps(new)} now")
    return out


def _report(run_dir: Path) -> Optional[dict]:
    try:
        report = json.loads((run_dir / "report.json").read_text())
        return report if isinstance(report.get("config"), dict) else None
    except (OSError, ValueError, AttributeError):
        return None


def saved_config(run_dir: Path) -> Optional[tuple[Path, dict]]:
    """(file, config) of the newest checkpoint, else of report.json (a finished run that kept no
    checkpoint), or None when the folder holds no run."""
    from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
    path = latest_checkpoint(run_dir)
    if path is None:
        report = _report(run_dir)
        return (run_dir / "report.json", report["config"]) if report else None
    try:
        ck = load_checkpoint(path)
    except RuntimeError as err:
        raise ConfigError(f"{err}; or {START_OVER_FLAG} to discard the run") from None
    config = ck.get("config")
    return path, json.loads(config) if isinstance(config, str) else (config or {})


def made_by(run_dir: Path) -> Optional[str]:
    """The command whose run the folder holds: report.json's `command` (reports from before it
    was recorded: `single` when the run kept no checkpoint and says it was one process)."""
    report = _report(run_dir)
    if report is None:
        return TRAIN if saved_config(run_dir) else None
    if report.get("command"):
        return report["command"]
    return SINGLE if report.get("result", {}).get("mode") == "single-process" else TRAIN


def finished_report(run_dir: Path, cfg: TrainConfig) -> Optional[dict]:
    """report.json when the folder holds this very run, finished: its settings, every epoch
    asked for done, and no later checkpoint (an extension under way) past it."""
    from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
    report = _report(run_dir)
    if report is None or differences(report["config"], cfg, extendable=False):
        return None
    if report.get("epochs", 0) < cfg.training.epochs:
        return None
    newest = latest_checkpoint(run_dir)
    if newest is not None and load_checkpoint(newest).get("epoch", 0) > report["epochs"]:
        return None
    return report


def check_rerun(cfg: TrainConfig, command: str = TRAIN) -> Optional[dict]:
    """None when cfg.run_dir holds no run, or the same run to resume; the run's report when it
    holds this very run, finished; ConfigError (exit 2) when it holds a different run."""
    run_dir = Path(cfg.run_dir)
    found = saved_config(run_dir)
    if found is None:
        return None
    path, saved = found
    other = made_by(run_dir)
    if other != command:
        raise ConfigError(
            f"run directory {cfg.run_dir} holds a `grappa {other}` run ({path}), not a `grappa "
            f"{command}` one: its results would be mixed with this one's. Give a new --run-dir, or add "
            f"{START_OVER_FLAG} to delete its results ({', '.join(RUN_OUTPUTS)}; the chunk store is kept)")
    diffs = differences(saved, cfg, extendable=command == TRAIN)
    if diffs:
        extend = "" if command == TRAIN else " (a `grappa single` run keeps no checkpoint to extend)"
        raise ConfigError(
            f"run directory {cfg.run_dir} holds a run with other settings (from {path}){extend}:\n  "
            + "\n  ".join(diffs)
            + f"\nits results would be mixed with this one's. Give a new --run-dir, or add "
              f"{START_OVER_FLAG} to delete its results ({', '.join(RUN_OUTPUTS)}; the chunk store "
              f"is kept) and train from scratch; to resume it, rerun with its settings")
    return finished_report(run_dir, cfg)


def _remove(p: Path) -> None:
    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def start_over(run_dir: Path) -> list[str]:
    """Delete a run's outputs (never the chunk store), and the model's predict/evaluate outputs
    next to it when they hold nothing else; returns what was removed."""
    from grappa.inference.out_folder import remove_outputs
    removed = []
    for name in RUN_OUTPUTS:
        paths = sorted(run_dir.glob(name)) if "*" in name else [run_dir / name]
        for p in paths:
            if p.exists() or p.is_symlink():
                _remove(p)
                removed.append(p.name)
    for name in MODEL_OUTPUTS:
        if (run_dir / name).is_dir() and remove_outputs(run_dir / name):
            removed.append(f"{name}/")
    return removed
