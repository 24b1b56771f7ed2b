"""The folder `grappa predict` / `grappa evaluate` writes into (`--out`): what it may hold, and
what a rerun finds there.

A command writes only into a folder that is new, empty, or holds its own outputs: the output
files, their manifest (`FORMAT`) and the scratch folder of unfinished work. A folder holding
anything else (a chunk store, another command's outputs, a user's files) is refused before
anything is written, naming what is there. A rerun is the train command's: the same job resumes
its unfinished work or, finished, says so and writes nothing; another job is refused naming each
difference, unless `--start-over` replaces this command's outputs.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grappa.config import ConfigError
from grappa.inference.job import IDENTITY, SCRATCH, PredictJob

FORMAT = "grappa-inference-outputs"
MANIFEST = "manifest.json"
EVALUATION = "evaluation.json"
OUTPUT_FILES = ("predictions.npy", "scores.npy", "embeddings.npy", "pair_scores.npy", "topk.npy",
                "topk_scores.npy", "predictions.parquet", EVALUATION, MANIFEST)
START_OVER_FLAG = "--start-over"


def _read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def is_ours(manifest: Optional[dict]) -> bool:
    """A manifest this command wrote (or, before `format` was recorded, one of its shape)."""
    if manifest is None:
        return False
    return manifest.get("format") == FORMAT or {"files", "model", "dataset", "per_worker"} <= manifest.keys()


def command_of(manifest: dict) -> str:
    return manifest.get("command") or ("predict" if manifest.get("files") else "evaluate")


@dataclass
class Previous:
    """What a folder holds of an earlier run: finished outputs (their manifest) or unfinished
    work (its job), of which command."""

    command: str
    manifest: Optional[dict] = None
    job: Optional[PredictJob] = None


def _unfinished(out: Path) -> Optional[PredictJob]:
    path = out / SCRATCH / "job.json"
    if not path.is_file():
        return None
    try:
        return PredictJob.load(path)
    except (OSError, ValueError, TypeError):
        return None  # half a job file: nothing to resume


def previous(out: Path, flag: str = "--out") -> Optional[Previous]:
    """None when `out` is missing or empty (or holds only work too broken to resume); what it
    holds of an earlier predict/evaluate otherwise. ConfigError (exit 2) when it holds anything
    else: no command writes into a folder holding something other than its own outputs."""
    if not out.is_dir():
        return None  # missing; a file is ensure_writable's to name
    entries = sorted(p.name for p in out.iterdir())
    manifest = _read_json(out / MANIFEST)
    foreign = [n for n in entries if n not in OUTPUT_FILES and n != SCRATCH]
    if MANIFEST in entries and not is_ours(manifest):
        foreign.insert(0, f"{MANIFEST} (not a predict/evaluate manifest)")
    if foreign:
        raise ConfigError(
            f"{flag} {out} holds files that are not predict/evaluate outputs ({', '.join(foreign[:6])}"
            f"{', ...' if len(foreign) > 6 else ''}): predict and evaluate write only into a new or empty "
            f"folder, or one holding their own outputs; give another {flag}")
    if manifest is not None:
        return Previous(command_of(manifest), manifest=manifest)
    job = _unfinished(out)
    if job is not None:
        return Previous("predict" if job.predict else "evaluate", job=job)
    return None


def _describe(identity: dict) -> dict:
    return {"model": f"the model with sha256 {str(identity.get('model_sha256'))[:12]}",
            "graph": f"the chunk store with fingerprint {identity.get('store_fingerprint')}",
            **{k: identity.get(k) for k in IDENTITY if k not in ("model_sha256", "store_fingerprint")}}


def differences(before: Optional[dict], job: PredictJob) -> list[str]:
    """`what: X then, Y now` for each part of the job that differs from the earlier one's."""
    if before is None:
        return ["the outputs were written by an older Grappa, which did not record the job"]
    old, new = _describe(before), _describe(job.identity)
    return [f"{k}: {json.dumps(old[k])} then, {json.dumps(new[k])} now" for k in new if old.get(k) != new[k]]


def claim(out: Path, command: str, job: PredictJob, start_over: bool, flag: str = "--out") -> Optional[dict]:
    """Make `out` this job's before anything is written: the finished manifest when it already
    holds this very job's outputs (nothing to do), None when the job may run (fresh, resuming its
    own work, or `--start-over` removed the earlier outputs). ConfigError otherwise."""
    prev = previous(out, flag)
    if prev is None:
        return None
    if prev.command != command:
        raise ConfigError(
            f"{flag} {out} holds the outputs of `grappa {prev.command}`, not of `grappa {command}`: "
            f"give another {flag} (each command writes into a folder of its own)")
    before = prev.manifest.get("job") if prev.manifest else prev.job.identity
    diffs = differences(before, job)
    if not diffs:
        return prev.manifest  # finished: said so; unfinished: None, the job resumes its work
    if start_over:
        remove_outputs(out)
        return None
    state = "finished outputs" if prev.manifest else "unfinished work"
    raise ConfigError(
        f"{flag} {out} holds the {state} of another {command} job:\n  " + "\n  ".join(diffs)
        + f"\nGive another {flag}, or add {START_OVER_FLAG} to delete them ({', '.join(OUTPUT_FILES)}, "
          f"{SCRATCH}/) and {command} again")


def remove_outputs(out: Path) -> bool:
    """Delete a predict/evaluate's outputs, only when `out` holds nothing else; True if it did."""
    if not out.is_dir():
        return False
    try:
        previous(out)
    except ConfigError:
        return False
    for name in (SCRATCH, *OUTPUT_FILES):
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    out.rmdir()
    return True
