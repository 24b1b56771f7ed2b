"""Inference at scale: `grappa predict` at P = 8 on R-MAT graphs, predictions and 128-wide embeddings.

Per scale: a store prepared once (64 features, float16, K = 8 chunks), a 3-layer SAGE model of
hidden width 128 with seeded random parameters (the pass costs the same for any parameters; this
measures the pass, not accuracy), then `grappa predict --embeddings 2` in a subprocess. Recorded:
wall time, nodes/s, per worker peak RSS, PSS (the memory-mapped store and row files counted once
per machine) and anonymous memory, bytes read and written, and the process tree's sampled RSS;
the coordinator's (the `grappa predict` process) peak RSS and the peaks of the memory cgroup the
job ran in (the manifest's `coordinator`: locally the session's cgroup, not the job's alone);
beside it, the training step time of the same graph from docs/results/scale-train-runs.json.
Results accumulate in docs/results/inference-runs.json; docs/results/inference.md is re-rendered.

    python bench/inference.py --scales 20,22,24
    python bench/inference.py --scales 12 --partitions 2    # a quick check
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
sys.path.insert(0, str(ROOT / "trainer"))
from scale import run_args, run_with_peak  # noqa: E402

RESULTS = ROOT / "docs" / "results"
RUNS = RESULTS / "inference-runs.json"
TRAIN_RUNS = RESULTS / "scale-train-runs.json"
GIB = 1 << 30


def config(scale: int, partitions: int, work: Path) -> dict:
    return {"partitions": partitions,
            "dataset": {"name": "rmat", "featureDtype": "float16", "synthetic": {"scale": scale, "numFeatures": 64}},
            "model": {"arch": "sage", "layers": 3, "hidden": 128, "dropout": 0.0},
            "runDir": str(work / "run"), "storeDir": str(work / "store")}


def make_model(cfg_dict: dict, path: Path) -> None:
    import torch

    from grappa.config import TrainConfig
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.models import GNN
    from grappa.models.model_file import describe, save_model
    cfg = TrainConfig.model_validate(cfg_dict)
    man = ChunkStore(cfg.store_path).manifest
    torch.manual_seed(0)
    model = GNN(cfg.model, man["num_features"], man["num_classes"])
    save_model(path, describe(cfg, man["num_features"], man["num_classes"], model.widths, man), model.state_dict())


def grappa(args: list[str], timeout: float) -> tuple[float, int, str]:
    """Run `python -m grappa ...`; (wall seconds, sampled peak RSS of the process tree, stdout)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}", "GRAPPA_LOG_LEVEL": "WARNING"}
    wall, peak, out, err, code = run_with_peak([sys.executable, "-m", "grappa", *args], env, timeout)
    if code != 0:
        raise RuntimeError(f"grappa {args[0]} failed ({code}):\n{err[-2500:]}")
    return wall, peak, out


def measure(scale: int, partitions: int, work: Path, timeout: float) -> dict:
    cfg = config(scale, partitions, work)
    cfg_path = work / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    record: dict = {}
    if not (work / "store" / "manifest.json").exists():
        record["prepare_seconds"] = round(grappa(["prepare", "--config", str(cfg_path)], timeout)[0], 1)
    model = work / "model.pt"
    make_model(cfg, model)
    out = work / "predictions"
    wall, tree_peak, _ = grappa(["predict", "--model", str(model), "--store", str(work / "store"), "--out", str(out),
                                 "--embeddings", "2", "--embedding-dtype", "float16",
                                 "--partitions", str(partitions), "--quiet"], timeout)
    m = json.loads((out / "manifest.json").read_text())
    w = m["per_worker"]
    record.update({
        "num_nodes": m["num_nodes"], "wall_seconds": round(wall, 1), "pass_seconds": round(m["pass_seconds"], 1),
        "nodes_per_second": round(m["nodes_per_second"]),
        "worker_peak_rss_bytes": [x["peak_rss_bytes"] for x in w],
        "worker_peak_pss_bytes": [x["peak_pss_bytes"] for x in w],
        "worker_peak_anon_bytes": [x["peak_anon_bytes"] for x in w],
        "bytes_read": sum(x["bytes_read"] for x in w), "bytes_written": sum(x["bytes_written"] for x in w),
        "output_bytes": sum((out / f["file"]).stat().st_size for f in m["files"].values()),
        "tree_peak_rss_bytes": tree_peak, "files": m["files"]})
    c = m.get("coordinator")
    if c:  # the `grappa predict` process, and the memory cgroup the job ran in (locally the session's)
        record.update({"coordinator_peak_rss_bytes": c["peak_rss_bytes"],
                       "coordinator_cgroup_peak_bytes": c.get("cgroup_peak_bytes"),
                       "coordinator_cgroup_working_set_peak_bytes": c.get("cgroup_working_set_peak_bytes"),
                       "cgroup_path": (c.get("cgroup") or {}).get("path"),
                       "worker_cgroup_peak_bytes": [x.get("cgroup_peak_bytes") for x in w]})
    return record


def coordinator_cells(r: dict) -> str:
    """The coordinator's peak RSS and the job's memory cgroup peak / working set, as two cells."""
    if "coordinator_peak_rss_bytes" not in r:
        return "not measured | not measured"
    peak = r.get("coordinator_cgroup_peak_bytes")
    working_set = r.get("coordinator_cgroup_working_set_peak_bytes") or 0
    group = f"{peak / GIB:.2f} / {working_set / GIB:.2f} GiB" if peak else "no cgroup"
    return f"{r['coordinator_peak_rss_bytes'] / GIB:.2f} GiB | {group}"


def train_step(scale: int) -> dict | None:
    """The same graph's training step (mini-batch SAGE, P = 8) from the scale benchmark."""
    if not TRAIN_RUNS.exists():
        return None
    rec = json.loads(TRAIN_RUNS.read_text()).get(f"streaming/mini-batch/sage/rmat-{scale}")
    if not rec or "failed" in rec:
        return None
    return {"step_seconds": sum(rec["train_seconds"]) / max(1, rec["steps_per_epoch"] * len(rec["train_seconds"])),
            "worker_peak_pss_bytes": max(rec["worker_peak_pss_bytes"])}


def render(runs: dict) -> str:
    lines = ["# Inference at scale: `grappa predict`", "",
             "Generated by `make bench-inference` (`bench/inference.py`) from `inference-runs.json`; "
             "do not edit by hand.", "",
             "Predictions (int32) and 128-wide embeddings (layer 2 of a 3-layer SAGE, float16) for every "
             "node of R-MAT graphs (64 features, float16 store), one worker process per chunk. PSS counts "
             "the memory-mapped store and row files once per machine (as scale.md does); anonymous memory "
             "is what a worker allocated itself. The training step beside it is mini-batch SAGE at P = 8 "
             "from `scale-train-runs.json`. A block of rows holds at most `--edges-per-block` in-edges "
             "(default 524,288): a worker's own memory grows with the graph only until its chunks' blocks "
             "reach that size, and is flat beyond (`tests/trainer/test_inference.py` checks it on a graph "
             "16x larger). `wall` includes starting the P worker processes; nodes/s is over the wall time.",
             "",
             "Rows marked *before* are the same runs on commit 2dc3ff7, which handed a block's mapped "
             "pages back only at the block's end; a block's in-neighbours lie in every chunk, so each "
             "worker kept most of a layer's row files mapped (`layer_pass.gather` now hands back each "
             "chunk's pages as soon as its rows are copied).",
             "",
             "The coordinator is the `grappa predict` process that starts the workers and watches them (its "
             "peak RSS); the memory cgroup columns are the peak usage and largest sampled working set (usage "
             "less inactive file pages), page cache included, of the cgroup the job ran in: what a pod's limit "
             "is enforced on, but locally the session's, shared by every worker and whatever else ran there, "
             "its kernel peak since the session began (the manifest names its path). *not measured*: a run recorded before the manifest had them.",
             "",
             "| graph | P | nodes | wall | nodes/s | max worker PSS | max worker anon | max worker RSS | "
             "coordinator RSS | memory cgroup peak / working set | "
             "read | written | outputs | training step (max PSS) | measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(runs, key=lambda k: (runs[k]["scale"], runs[k]["partitions"], bool(runs[k].get("design")))):
        r = runs[key]
        if "failed" in r:
            lines.append(f"| RMAT-{r['scale']} | {r['partitions']} | | failed: {r['failed'][:120]} | | | | | | | | | | | {r['measured']} |")
            continue
        t = train_step(r["scale"])
        label = f"RMAT-{r['scale']}" + (f" *{r['design']}*" if r.get("design") else "")
        step = f"{t['step_seconds']:.2f} s ({t['worker_peak_pss_bytes'] / GIB:.2f} GiB)" if t else "not measured"
        lines.append(
            f"| {label} | {r['partitions']} | {r['num_nodes']:,} | {r['wall_seconds']:.0f} s | "
            f"{r['nodes_per_second']:,} | {max(r['worker_peak_pss_bytes']) / GIB:.2f} GiB | "
            f"{max(r['worker_peak_anon_bytes']) / GIB:.2f} GiB | {max(r['worker_peak_rss_bytes']) / GIB:.2f} GiB | "
            f"{coordinator_cells(r)} | "
            f"{r['bytes_read'] / GIB:.2f} GiB | {r['bytes_written'] / GIB:.2f} GiB | {r['output_bytes'] / GIB:.2f} GiB | "
            f"{step} | {r['measured']}, {r['cpus']} CPUs |")
    target = [r for r in runs.values() if r["scale"] == 24 and r["partitions"] == 8 and "failed" not in r
              and not r.get("design")]
    lines += ["", "Target: RMAT-24 at P = 8 on a 2-core, 24 GiB machine, no process above 2.5 GiB of PSS, "
              "within 30 minutes: " + (
                  verdict(target[0]) if target else
                  "**not measured yet** (run `make bench-inference` on an otherwise idle machine)."), ""]
    return "\n".join(lines)


def verdict(r: dict) -> str:
    minutes, pss = r["wall_seconds"] / 60, max(r["worker_peak_pss_bytes"]) / GIB
    met = minutes <= 30 and pss <= 2.5
    return (f"measured {minutes:.1f} min (target ≤ 30), max worker PSS {pss:.2f} GiB (target ≤ 2.5): "
            f"**{'met' if met else 'not met'}**.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="20,22,24")
    ap.add_argument("--partitions", type=int, default=8)
    args, runs = run_args(ap, RUNS)
    if not args.render_only:
        for scale in [int(s) for s in args.scales.split(",")]:
            key = f"rmat-{scale}/p{args.partitions}"
            if key in runs and "failed" not in runs[key]:
                print(f"{key}: measured already")
                continue
            work = Path(tempfile.mkdtemp(prefix=f"predict-{scale}-", dir=args.scratch))
            record = {"scale": scale, "partitions": args.partitions, "cpus": len(os.sched_getaffinity(0)),
                      "measured": time.strftime("%Y-%m-%d")}
            print(f"{key}: running", flush=True)
            try:
                record.update(measure(scale, args.partitions, work, args.timeout))
                print(f"{key}: {record['wall_seconds']} s, max worker PSS "
                      f"{max(record['worker_peak_pss_bytes']) / GIB:.2f} GiB", flush=True)
            except (RuntimeError, subprocess.CalledProcessError) as err:
                record["failed"] = str(err)[-800:]
                print(f"{key}: failed: {record['failed']}", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            runs[key] = record
            RUNS.write_text(json.dumps(runs, indent=1, sort_keys=True))
    (RESULTS / "inference.md").write_text(render(runs))


if __name__ == "__main__":
    main()
