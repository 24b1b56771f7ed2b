"""Preparation at scale: the streaming prepare against the in-memory design it replaced.

Every run is a real `python -m grappa prepare` of an R-MAT graph (2^s nodes, 2^(s+4) edges,
64 features) in a subprocess; a sampler sums the resident memory of its whole process tree every
0.1 s (peak RSS below is that sum's maximum; the manifest adds each process's own VmHWM). The
previous design is measured by the same harness on its own source tree: commit OLD_DESIGN of
this repository, exported with `git archive`. Stores are deleted once measured; the free disk is
checked first against what the scale needs, and a run that cannot fit is recorded as skipped.
Results accumulate in docs/results/scale-runs.json (delete an entry to re-measure);
docs/results/scale.md and its plot are rewritten after every run.

    python bench/scale.py --design streaming --scales 17,18,19,20,22,24,26
    python bench/scale.py --design in-memory --scales 17,18,19
    python bench/scale.py --render-only
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RUNS = RESULTS / "scale-runs.json"
OLD_DESIGN = "b557111"   # last commit with the in-memory prepare (chunk store format 1)
FEATURES = 64
MARGIN = 8 << 30         # disk left free for everything else on the machine
CHUNKS = 8


def need_bytes(scale: int, feature_bytes: int, design: str) -> int:
    """Disk a prepare of this scale needs at its peak (measured layout; duplicates not subtracted)."""
    n, draws = 1 << scale, 1 << (scale + 4)
    directed = 2 * draws                         # both directions of every draw, before dedup
    if design == "in-memory":                    # int64 [2, E] per chunk, float32 features
        return directed * 16 + n * (FEATURES * 4 + 40)
    store = directed * 4 + n * (FEATURES * feature_bytes + 4 + 8 + 4 + 1 + 2)
    spill = directed * 8                         # (dst, src) int32 records, until finalised
    return store + spill


def tree_rss(pid: int) -> int:
    """Resident bytes of pid and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_with_peak(cmd: list[str], env: dict, timeout: Optional[float] = None, interval: float = 0.5
                  ) -> tuple[float, int, str, str, int]:
    """Run `cmd`, sampling its process tree's RSS every `interval` s: (wall seconds, peak RSS,
    stdout, stderr, exit code); a timeout kills it and raises RuntimeError."""
    peak = [0]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(interval)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"timed out after {timeout:.0f} s")
    wall = time.perf_counter() - started
    sampler.join()
    return wall, peak[0], out, err, proc.returncode


def run_args(ap, runs_file: Path) -> tuple:
    """Adds the arguments every per-scale benchmark shares and parses: (args, the runs so far)."""
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--scratch", default=os.environ.get("GRAPPA_BENCH_SCRATCH", tempfile.gettempdir()))
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    return args, json.loads(runs_file.read_text()) if runs_file.exists() else {}


def run_prepare(tree: Path, scale: int, feature_dtype: Optional[str], work: Path) -> dict:
    """One `grappa prepare`; returns wall time, the sampled peak, the manifest's own figures."""
    store = work / "store"
    args = [sys.executable, "-m", "grappa", "prepare", "--dataset", "rmat", "--partitions", str(CHUNKS),
            "--store-dir", str(store), "--run-dir", str(work / "run"),
            "--set", f"dataset.synthetic.scale={scale}", "--set", f"dataset.synthetic.numFeatures={FEATURES}"]
    if feature_dtype:
        args += ["--set", f"dataset.featureDtype={feature_dtype}"]
    env = {**os.environ, "PYTHONPATH": f"{tree / 'trainer'}:{tree / 'operator'}", "GRAPPA_LOG_LEVEL": "WARNING"}
    wall, peak, _, err, code = run_with_peak(args, env, interval=0.1)
    if code != 0:
        raise RuntimeError(f"prepare failed ({code}):\n{err[-3000:]}")
    manifest = json.loads((store / "manifest.json").read_text())
    disk = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    return {"wall_seconds": round(wall, 2), "peak_rss_bytes": peak, "store_bytes": disk,
            "num_nodes": manifest["num_nodes"], "stored_edges": manifest["num_edges"],
            "manifest_prepare": manifest.get("prepare")}


def old_tree(work: Path) -> Path:
    """The previous design's source tree, exported from git (no checkout of this clone changes)."""
    out = work / f"grappa-{OLD_DESIGN}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_DESIGN, "trainer", "operator"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def measure(design: str, scales: list[int], scratch: Path, feature_dtype: str) -> None:
    runs = json.loads(RUNS.read_text()) if RUNS.exists() else {}
    tree = old_tree(scratch) if design == "in-memory" else ROOT
    dtype = None if design == "in-memory" else feature_dtype
    for s in scales:
        key = f"{design}/{dtype or 'float32'}/rmat-{s}"
        if key in runs and "skipped" not in runs[key]:
            print(f"{key}: measured already")
            continue
        need = need_bytes(s, 2 if dtype == "float16" else 4, design)
        free = shutil.disk_usage(scratch).free
        record: dict = {"design": design, "scale": s, "source_edges": 1 << (s + 4),
                        "feature_dtype": dtype or "float32", "need_bytes": need, "free_bytes": free,
                        "chunks": CHUNKS, "cpus": len(os.sched_getaffinity(0)),
                        "measured": time.strftime("%Y-%m-%d")}
        if free - need < MARGIN:
            record["skipped"] = f"needs {need / 2**30:.0f} GiB of disk, {free / 2**30:.0f} GiB free"
            print(f"{key}: skipped ({record['skipped']})")
        else:
            work = Path(tempfile.mkdtemp(prefix=f"scale-{s}-", dir=scratch))
            try:
                print(f"{key}: preparing ({need / 2**30:.1f} GiB of disk at the peak)", flush=True)
                record.update(run_prepare(tree, s, dtype, work))
                record["edges_per_second"] = round(record["source_edges"] / record["wall_seconds"])
                print(f"{key}: {record['wall_seconds']} s, peak {record['peak_rss_bytes'] / 2**30:.2f} GiB, "
                      f"{record['edges_per_second'] / 1e6:.2f} M edges/s", flush=True)
            except RuntimeError as err:  # e.g. the in-memory design running out of memory
                record["failed"] = str(err)[-500:]
                print(f"{key}: failed\n{err}", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        runs[key] = record
        RUNS.write_text(json.dumps(runs, indent=1, sort_keys=True))
        render(runs)


def render(runs: dict) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from render_scale import render
    render(RESULTS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=["streaming", "in-memory"], default="streaming")
    ap.add_argument("--scales", default="17,18,19,20,22,24,26")
    ap.add_argument("--feature-dtype", choices=["float32", "float16"], default="float16",
                    help="streaming design only (the in-memory design always stored float32)")
    ap.add_argument("--scratch", default=os.environ.get("GRAPPA_BENCH_SCRATCH", tempfile.gettempdir()))
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    if args.render_only:
        render(json.loads(RUNS.read_text()))
        return
    measure(args.design, [int(s) for s in args.scales.split(",")], Path(args.scratch), args.feature_dtype)


if __name__ == "__main__":
    main()
