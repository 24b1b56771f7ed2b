"""Training at scale: per-worker memory and time of `grappa train` (P = 8) on R-MAT graphs.

Every run is a real local job (aggregator + 8 worker processes, `grappa.runtime.local_job.LocalJob`) on a
store prepared once per scale. Per worker it records peak RSS and peak PSS (the report's memory
section: PSS counts the memory-mapped store and shared libraries once per machine), the local
graph's edges, and bytes per local edge above the runtime floor (the same job's PSS on RMAT-10,
whose graph is negligible); for the job, the sum of PSS and the sampled peak RSS of the whole
process tree; the launcher's own peak RSS and the peaks of the memory cgroup the job ran in (the
report's `launcher_*`: locally the session's cgroup, not the job's alone). Mini-batch runs are
time-boxed to 100 steps per epoch (training.maxStepsPerEpoch) and evaluate a 1% sample at the
end; full-graph runs train 3 epochs and evaluate exactly. The previous design is the same harness
on commit OLD_DESIGN's tree (git archive), on its own store. Results accumulate in
docs/results/scale-train-runs.json; docs/results/scale.md is re-rendered after every run.

    python bench/train_scale.py --scales 10,19,20,22,24 --archs sage,gcn --modes mini-batch
    python bench/train_scale.py --scales 10,19,20 --archs sage,gcn --modes full-graph
    python bench/train_scale.py --design previous --scales 10,17,18 --archs sage --modes mini-batch,full-graph
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from scale import OLD_DESIGN, old_tree, run_args, run_with_peak  # noqa: E402

RESULTS = ROOT / "docs" / "results"
RUNS = RESULTS / "scale-train-runs.json"
P = 8
STEPS = 100
FLOOR_SCALE = 10


def config(scale: int, arch: str, mode: str, work: Path, design: str) -> dict:
    training = {"mode": mode, "epochs": 1 if mode == "mini-batch" else 3, "evalEvery": 1000,
                "batchSize": 1000}
    if design == "streaming" and mode == "mini-batch":
        training.update(maxStepsPerEpoch=STEPS, evalFraction=0.01)
    dataset = {"name": "rmat", "synthetic": {"scale": scale, "numFeatures": 64}}
    if design == "streaming":
        dataset["featureDtype"] = "float16"
    return {"partitions": P, "dataset": dataset,
            "model": {"arch": arch, "layers": 3, "hidden": 128, "dropout": 0.5},
            "training": training, "checkpoint": {"interval": 0},
            "runDir": str(work / f"run-{arch}-{mode}"), "storeDir": str(work / "store")}


def run(tree: Path, cfg: dict, timeout: float) -> dict:
    """`python -m grappa train --config` in a subprocess; the tree's sampled peak RSS and the report."""
    work = Path(cfg["runDir"]).parent
    path = work / "config.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": f"{tree / 'trainer'}:{tree / 'operator'}", "GRAPPA_THREADS": "1",
           "OMP_NUM_THREADS": "1", "GRAPPA_LOG_LEVEL": "WARNING"}
    wall, peak, _, err, code = run_with_peak([sys.executable, "-m", "grappa", "train", "--config", str(path)],
                                             env, timeout)
    if code != 0:
        raise RuntimeError(f"train failed ({code}):\n{err[-2500:]}")
    report = json.loads((Path(cfg["runDir"]) / "report.json").read_text())
    return {"wall_seconds": round(wall, 1), "tree_peak_rss_bytes": peak,
            "report": report}


def summarise(out: dict, design: str) -> dict:
    rep = out.pop("report")
    hist = rep["history"]
    last = hist[-1]
    mem = rep.get("memory") or {}
    rss = mem.get("worker_peak_rss_bytes") or [max(h["worker_peak_rss_bytes"][i] for h in hist)
                                               for i in range(len(last["worker_peak_rss_bytes"]))]
    train_seconds = [h["train_seconds"] for h in hist]
    return {**out, "worker_peak_rss_bytes": rss, "worker_peak_pss_bytes": mem.get("worker_peak_pss_bytes"),
            "worker_local_edges": mem.get("worker_local_edges"),
            "aggregator_peak_rss_bytes": mem.get("aggregator_peak_rss_bytes"),
            "aggregator_peak_pss_bytes": mem.get("aggregator_peak_pss_bytes"),
            # the launcher's own, and the memory cgroup every rank shares locally (a run before the
            # report had them: absent, "not measured" in the table)
            **{k: mem[k] for k in ("launcher_peak_rss_bytes", "launcher_cgroup_peak_bytes",
                                   "launcher_cgroup_working_set_peak_bytes", "worker_cgroup_peak_bytes") if k in mem},
            **({"cgroup_path": mem["launcher_cgroup"]["path"]} if mem.get("launcher_cgroup") else {}),
            "steps_per_epoch": last.get("steps"),
            "train_seconds": train_seconds, "epoch_seconds": [h["epoch_seconds"] for h in hist],
            "test_acc": rep["result"].get("test_acc")}


def prepare(tree: Path, cfg: dict) -> float:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'trainer'}:{tree / 'operator'}"}
    path = Path(cfg["runDir"]).parent / "config.json"
    path.write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grappa", "prepare", "--config", str(path)], env=env, check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=["streaming", "previous"], default="streaming")
    ap.add_argument("--scales", default="10,19,20,22,24")
    ap.add_argument("--archs", default="sage,gcn")
    ap.add_argument("--modes", default="mini-batch")
    args, runs = run_args(ap, RUNS)
    if not args.render_only:
        scratch = Path(args.scratch)
        tree = ROOT if args.design == "streaming" else old_tree(scratch)
        for scale in [int(s) for s in args.scales.split(",")]:
            work = Path(tempfile.mkdtemp(prefix=f"train-{scale}-", dir=scratch))
            try:
                for arch in args.archs.split(","):
                    for mode in args.modes.split(","):
                        key = f"{args.design}/{mode}/{arch}/rmat-{scale}"
                        if key in runs and "failed" not in runs[key]:
                            print(f"{key}: measured already")
                            continue
                        cfg = config(scale, arch, mode, work, args.design)
                        record = {"design": args.design, "scale": scale, "arch": arch, "mode": mode,
                                  "partitions": P, "cpus": len(os.sched_getaffinity(0)),
                                  "measured": time.strftime("%Y-%m-%d"),
                                  "commit": OLD_DESIGN if args.design == "previous" else "HEAD"}
                        print(f"{key}: running", flush=True)
                        try:
                            if not (work / "store" / "manifest.json").exists():
                                record["prepare_seconds"] = round(prepare(tree, cfg), 1)
                            record.update(summarise(run(tree, cfg, args.timeout), args.design))
                            print(f"{key}: worker peak RSS {max(record['worker_peak_rss_bytes']) / 2**30:.2f} GiB, "
                                  f"train {record['train_seconds']}", flush=True)
                        except (RuntimeError, subprocess.CalledProcessError) as err:
                            record["failed"] = str(err)[-800:]
                            print(f"{key}: failed: {record['failed']}", flush=True)
                        runs[key] = record
                        RUNS.write_text(json.dumps(runs, indent=1, sort_keys=True))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    from render_scale import render
    render(RESULTS)


if __name__ == "__main__":
    main()
