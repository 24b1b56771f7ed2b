"""Accuracy benchmark: single-process vs Grappa (full) vs UW vs FP, P = 4, and gradient fidelity.

Writes docs/results/accuracy.md and accuracy.png (bench/render_accuracy.py; raw numbers in accuracy-runs.json and fidelity.json). Runs use the in-process
simulation (`grappa.runtime.simulation`), which reproduces the multi-process run's numbers exactly
(tests/trainer/test_local_runs.py) without paying process start-up and loopback copies 192 times.
Results accumulate in the JSON, so an interrupted run resumes where it stopped.

    python bench/accuracy.py                       # the full grid (hours on 2 CPU cores)
    python bench/accuracy.py --datasets cora --seeds 1 --epochs 50   # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]

from grappa.config import TrainConfig  # noqa: E402
from grappa.data.datasets import load_dataset  # noqa: E402
from grappa.data.store.preparation import prepare_store  # noqa: E402
from grappa.runtime.simulation import Simulation  # noqa: E402
from grappa.runtime.single_process import train_single  # noqa: E402
from grappa.strategies.grappa.fidelity import gradient_fidelity  # noqa: E402
from render_accuracy import ARCHS, DEPTHS, METHODS as METHOD_ORDER, render  # noqa: E402

DATASETS = ["cora", "citeseer", "coauthor-physics", "amazon-computers"]
METHODS = {
    # label: (grappa overrides, multi-worker?)
    "single": (None, False),
    "Grappa": ({"correction": "node", "rounds": {"every": 10}}, True),
    "UW": ({"correction": "none", "rounds": {"every": 10}}, True),
    "FP": ({"correction": "node", "rounds": {"every": 0}}, True),
}
assert list(METHODS) == METHOD_ORDER, "bench/render_accuracy.py lists the methods in the same order"


def config(dataset: str, arch: str, layers: int, seed: int, epochs: int, method: str, tmp: str,
           shrinkage: float) -> TrainConfig:
    grappa, _ = METHODS[method]
    doc = {
        "partitions": 4, "dataset": {"name": dataset},
        "model": {"arch": arch, "layers": layers, "hidden": 128, "dropout": 0.5},
        "training": {"epochs": epochs, "lr": 0.01, "seed": seed, "eval_every": 1},
        "grappa": {**(grappa or {}), "partition_seed": seed, "shrinkage": shrinkage},
        "runDir": f"{tmp}/run", "storeDir": f"{tmp}/store-{dataset}-{seed}",
    }
    return TrainConfig.model_validate(doc)


def run_one(cfg: TrainConfig, method: str, data) -> dict:
    t0 = time.perf_counter()
    if method == "single":
        result, _ = train_single(cfg, data)
    else:
        prepare_store(cfg, progress=False)
        result, _ = Simulation(cfg, data=data).run()
    return {"test_acc": result["test_acc"], "best_val": result["best_val"],
            "best_epoch": result["best_epoch"], "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--layers", default=",".join(map(str, DEPTHS)))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--shrinkage", type=float, default=0.5)
    ap.add_argument("--fidelity-datasets", default="cora,citeseer,coauthor-cs")
    ap.add_argument("--only", choices=["accuracy", "fidelity"], help="run one part only")
    ap.add_argument("--render-only", action="store_true", help="rewrite accuracy.md from the JSON")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("GRAPPA_THREADS", os.cpu_count() or 1)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Two files, so the two parts can run side by side: runs and fidelity.
    runs_path, fid_path = out / "accuracy-runs.json", out / "fidelity.json"
    raw = {"runs": json.loads(runs_path.read_text()) if runs_path.exists() else {},
           "fidelity": json.loads(fid_path.read_text()) if fid_path.exists() else {}}
    archs, layer_list = args.archs.split(","), [int(x) for x in args.layers.split(",")]
    if args.render_only:
        args.only = "none"
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets.split(",") if args.only not in ("fidelity", "none") else []:
            data = load_dataset(config(dataset, "gcn", 2, 0, 1, "single", tmp, 0.5).dataset)
            for arch in archs:
                for layers in layer_list:
                    for method in args.methods.split(","):
                        for seed in range(args.seeds):
                            key = f"{dataset}|{arch}|{layers}|{method}|{seed}|{args.epochs}"
                            if key in raw["runs"]:
                                continue
                            cfg = config(dataset, arch, layers, seed, args.epochs, method, tmp, args.shrinkage)
                            raw["runs"][key] = run_one(cfg, method, data)
                            print(key, raw["runs"][key], flush=True)
                            runs_path.write_text(json.dumps(raw["runs"], indent=1))
        if args.only not in ("accuracy", "none"):
            for dataset in args.fidelity_datasets.split(","):
                data = load_dataset(config(dataset, "gcn", 2, 0, 1, "single", tmp, 0.5).dataset)
                for arch in archs:
                    for layers in layer_list:
                        for when, epochs in (("init", 0), ("early", 5)):
                            key = f"{dataset}|{arch}|{layers}|{when}"
                            if key in raw["fidelity"]:
                                continue
                            cfg = config(dataset, arch, layers, 0, 1, "Grappa", tmp, 0.5)
                            entry = {}
                            # degrees only enter GCN's normalisation: the ablation is GCN's alone
                            for degrees in ("global", "local") if arch == "gcn" else ("global",):
                                rows = gradient_fidelity(cfg, data, range(3), rounds=2,
                                                         train_epochs=epochs, degrees=degrees, work_dir=tmp)
                                entry[degrees] = {r.reducer: {"rel_error": r.rel_error, "cosine": r.cosine}
                                                  for r in rows}
                            raw["fidelity"][key] = entry
                            print(key, entry["global"], flush=True)
                            fid_path.write_text(json.dumps(raw["fidelity"], indent=1))
    runs = {k.rsplit("|", 1)[0]: v for k, v in raw["runs"].items() if k.endswith(f"|{args.epochs}")}
    page = render(runs, raw["fidelity"], args.epochs, args.seeds, DATASETS, out, torch.__version__,
                  round_every=METHODS["Grappa"][0]["rounds"]["every"])
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
