"""Grappa vs the full-communication baseline vs single-process, on throttled links.

Every run is a real `grappa train` job (aggregator + P worker processes), each rank in its own
network namespace with tbf-shaped links (bench/netns.py); without namespaces it falls back to
loopback and says so. Results accumulate in docs/results/network-runs.json (delete entries to
re-measure); `--render-only` rewrites docs/results/benchmarks.md and its plots from them.

    python bench/network.py --datasets coauthor-physics --partitions 4 --layers 2,3 --presets 1gbit
    python bench/network.py --smoke      # seconds: a tiny graph, both strategies, checks the bytes
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]
# the job's processes run `python -m grappa` and must find it too
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "trainer"), os.environ.get("PYTHONPATH")]))

from grappa.config import TrainConfig  # noqa: E402
from grappa.data.store.preparation import prepare_store  # noqa: E402
from grappa.runtime.exchange import SCALARS  # noqa: E402
from grappa.runtime.local_job import LocalJob  # noqa: E402
from grappa.runtime.transport import ring_allreduce_bytes  # noqa: E402
from netns import PRESETS, NetnsUnavailable, ThrottledNetwork, reap_stale  # noqa: E402

RESULTS = ROOT / "docs" / "results"
DATASETS = {
    # float32 rows (33.7 KB), as this cell has always been measured; featureDtype auto (the
    # default) would store sparse rows, as the next cells do
    "coauthor-physics": {"name": "coauthor-physics", "featureDtype": "float32"},
    # 2^17 nodes, 2^21 = 2.1M edges
    "rmat": {"name": "rmat", "synthetic": {"scale": 17, "numFeatures": 64}},
    "tiny": {"name": "csbm", "synthetic": {"numNodes": 600, "numFeatures": 16}},
}


def dataset_spec(dataset: str) -> dict:
    if dataset.startswith("rmat-"):  # rmat-<scale>: 2^scale nodes, 2^(scale+4) edges
        return {"name": "rmat", "synthetic": {"scale": int(dataset.split("-")[1]), "numFeatures": 64}}
    return DATASETS[dataset]


def job_config(dataset: str, strategy: str, partitions: int, layers: int, epochs: int,
               work: Path) -> TrainConfig:
    return TrainConfig.model_validate({
        "strategy": strategy, "partitions": partitions, "dataset": dataset_spec(dataset),
        "model": {"arch": "gcn", "layers": layers, "hidden": 128, "dropout": 0.5},
        "training": {"epochs": epochs, "evalEvery": epochs},
        "checkpoint": {"interval": 0},
        # each job its own run folder: a finished run found in it would be resumed, not trained again
        "runDir": str(work / f"run-{strategy}-{time.time_ns() % 10**9}"),
        "storeDir": str(work / f"store-{dataset}-{partitions}"),
    })


def step_bytes(n_params: int, n_buf: int, partitions: int) -> list[int]:
    """Gradient-only traffic per step, sent + received, per rank (0 = the aggregator): each rank's
    share of the step's all-reduce of parameters (+ float buffers) and five float32 scalars."""
    message = 4 * (n_params + n_buf + SCALARS)
    return [sum(ring_allreduce_bytes(message, 4, partitions + 1, r)) for r in range(partitions + 1)]


def floor_bytes(n_params: int, n_buf: int, partitions: int) -> int:
    """The busiest worker link's gradient-only traffic per step (about 4(M-1)/M x the message)."""
    return max(step_bytes(n_params, n_buf, partitions)[1:])


def summarise(report: dict, warmup: int = 1) -> dict:
    """Per-epoch figures from one run; the first epoch pays process warm-up and is dropped."""
    hist = report["history"]
    steady = hist[warmup:] or hist
    last = hist[-1]
    per_worker = [t + f for t, f in zip(last["worker_train_bytes"], last["worker_fetch_bytes"])]
    return {
        "epoch_seconds": statistics.median(h["train_seconds"] for h in steady),
        "reducer_share": sum(h["reducer_seconds"] for h in steady) / sum(h["train_seconds"] for h in steady),
        "bytes_per_worker_epoch": max(per_worker),
        "train_bytes_per_worker_epoch": max(last["worker_train_bytes"]),
        "fetch_bytes_per_worker_epoch": max(last["worker_fetch_bytes"]),
        "peak_rss_bytes": max(max(h["worker_peak_rss_bytes"]) for h in hist),
        "parameters": report["parameters"],
        "test_acc": report["result"]["test_acc"],
        "epochs": len(hist),
    }


def curve(report: dict) -> dict:
    """Accuracy against cumulative training time (evaluation time excluded), per epoch."""
    t, cum = 0.0, []
    for h in report["history"]:
        t += h["train_seconds"]
        cum.append(t)
    return {"cum_seconds": cum, "val_acc_curve": [h.get("val_acc") for h in report["history"]],
            "test_acc_curve": [h.get("test_acc") for h in report["history"]]}


def trained_here(history: list[dict], started: float, run_dir) -> None:
    """Refuses a job whose epochs did not run after `started`: its run folder held a finished run,
    which the launcher resumes (nothing to train) and whose old report it hands back."""
    if not history or history[0]["started_at"] < started:
        raise RuntimeError(f"the job trained no epoch of its own: {run_dir} held a finished run "
                           "(each job needs a fresh runDir)")


def run_job(cfg: TrainConfig, net: Optional[ThrottledNetwork], with_curve: bool = False) -> dict:
    prepare_store(cfg, progress=False)
    started = time.time()
    report = LocalJob(cfg, progress=False, threads=1, placement=net).run()
    trained_here(report["history"], started, cfg.run_dir)
    return {**summarise(report), **(curve(report) if with_curve else {})}


def run_single(dataset: str, layers: int, epochs: int, work: Path) -> dict:
    from grappa.data.datasets import load_dataset
    from grappa.runtime.single_process import train_single
    cfg = job_config(dataset, "grappa", 1, layers, epochs, work)
    _, hist = train_single(cfg, load_dataset(cfg.dataset))
    return {"epoch_seconds": statistics.median(h["epoch_seconds"] for h in hist[1:] or hist),
            "epochs": len(hist)}


def network(ranks: int, preset: str) -> Optional[ThrottledNetwork]:
    try:
        stale = reap_stale()
        if stale:
            print(f"removed leftovers of killed runs: {', '.join(stale)}", file=sys.stderr)
        return ThrottledNetwork(ranks, PRESETS[preset]).__enter__()
    except (NetnsUnavailable, FileNotFoundError) as err:
        print(f"network namespaces unavailable ({err}); running on unshaped loopback instead",
              file=sys.stderr)
        return None


def smoke(work: Path) -> dict:
    """Both strategies on a tiny graph, P = 2, 2 epochs; returns the byte figures it checked."""
    out = {}
    net = network(3, "100mbit")
    try:
        for strategy in ("grappa", "full"):
            cfg = job_config("tiny", strategy, 2, 2, 2, work)
            out[strategy] = run_job(cfg, net)
    finally:
        if net is not None:
            net.close()
    out["shaped"] = net is not None
    out["tag"] = net.tag if net is not None else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="coauthor-physics,rmat")
    ap.add_argument("--partitions", default="2,4,8")
    ap.add_argument("--layers", default="2,3,4")
    ap.add_argument("--presets", default="10gbit,1gbit,100mbit")
    ap.add_argument("--strategies", default="grappa,full,single")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--experiment", choices=["grid", "scaling"], default="grid",
                    help="grid: bytes and epoch time; scaling: RMAT --scales at P = --partitions "
                         "(the accuracy section comes from bench/strategies.py)")
    ap.add_argument("--scales", default="18,19,20,21,22")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    # SIGTERM must unwind through the `finally`s that delete the namespaces, like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(smoke(Path(tmp)), indent=1))
        return
    out = Path(args.out)
    runs_path = out / "network-runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    if not args.render_only:
        {"grid": measure, "scaling": measure_scaling}[args.experiment](
            args, runs, runs_path)
    from render_network import render
    notes = ROOT / "bench" / "network-notes.md"
    strategy_runs = out / "strategy-runs.json"
    print("wrote", render(runs, out, notes.read_text() if notes.exists() else "",
                          json.loads(strategy_runs.read_text()) if strategy_runs.exists() else None))


def measure(args, runs: dict, runs_path: Path) -> None:
    strategies = args.strategies.split(",")
    for dataset in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as tmp:  # chunk stores, reused across presets
            measure_dataset(args, dataset, strategies, runs, runs_path, Path(tmp))


def measure_dataset(args, dataset: str, strategies: list[str], runs: dict, runs_path: Path,
                    tmp: Path) -> None:
    for layers in map(int, args.layers.split(",")):
        for rep in range(args.repeats):
            key = f"{dataset}|1|{layers}|single|none|{rep}"
            if "single" in strategies and key not in runs:
                runs[key] = run_single(dataset, layers, args.epochs, tmp)
                save(runs, runs_path, key)
    for p in map(int, args.partitions.split(",")):
        for preset in args.presets.split(","):
            todo = [(layers, s, rep) for layers in map(int, args.layers.split(","))
                    for rep in range(args.repeats) for s in strategies if s != "single"
                    if f"{dataset}|{p}|{layers}|{s}|{preset}|{rep}" not in runs]
            if not todo:
                continue
            net = network(p + 1, preset)
            try:
                for layers, strategy, rep in todo:
                    key = f"{dataset}|{p}|{layers}|{strategy}|{preset}|{rep}"
                    cfg = job_config(dataset, strategy, p, layers, args.epochs, tmp)
                    t0 = time.perf_counter()
                    runs[key] = {**run_job(cfg, net), "wall_seconds": time.perf_counter() - t0,
                                 "shaped": net is not None}
                    save(runs, runs_path, key)
            finally:
                if net is not None:
                    net.close()


def measure_series(args, runs: dict, runs_path: Path, experiment: str, datasets: list[str]) -> None:
    p, preset = int(args.partitions), args.presets.split(",")[0]
    for dataset in datasets:
        with tempfile.TemporaryDirectory() as tmp:
            net = network(p + 1, preset)
            try:
                for layers in map(int, args.layers.split(",")):
                    for strategy in args.strategies.split(","):
                        key = f"{experiment}|{dataset}|{p}|{layers}|{strategy}|{preset}|0"
                        if strategy == "single" or key in runs:
                            continue
                        cfg = job_config(dataset, strategy, p, layers, args.epochs, Path(tmp))
                        try:
                            runs[key] = run_job(cfg, net)
                        except Exception as err:  # noqa: BLE001 - e.g. out of memory: record, go on
                            runs[key] = {"error": str(err).splitlines()[0]}
                        save(runs, runs_path, key)
            finally:
                if net is not None:
                    net.close()


def measure_scaling(args, runs: dict, runs_path: Path) -> None:
    measure_series(args, runs, runs_path, "scaling", [f"rmat-{s}" for s in args.scales.split(",")])


def save(runs: dict, path: Path, key: str, show: Optional[tuple[str, ...]] = None) -> None:
    """Writes every run (so a killed grid resumes) and prints the new one, or its `show` fields."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runs, indent=1, sort_keys=True))
    rec = runs[key] if show is None else {k: runs[key].get(k) for k in show}
    print(key, json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
