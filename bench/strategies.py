"""All strategies side by side on the same data and partitions: accuracy, bytes and time per run.

Grappa, full communication, VARCO (linear schedule at several r_min, and fixed ratios) and RETEXO
as real `grappa train` jobs on a throttled network (bench/netns.py), plus the single-process
baseline. Results accumulate in docs/results/strategy-runs.json; the report section and the
accuracy-versus-bytes plot go to docs/results/strategies.md.

    python bench/strategies.py --dataset citeseer --layers 2,3,4 --preset 1gbit --epochs 100
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

import network  # noqa: F401  (sets sys.path and PYTHONPATH for the job's processes)
from network import RESULTS, curve, network as make_network, run_job, save, summarise  # noqa: F401

from grappa.config import TrainConfig  # noqa: E402

VARIANTS = {
    # label: (strategy, extra config)
    "grappa": ("grappa", {}),
    "full": ("full", {}),
    "varco-rmin1": ("varco", {"varco": {"rMin": 1}}),
    "varco-rmin2": ("varco", {"varco": {"rMin": 2}}),
    "varco-rmin4": ("varco", {"varco": {"rMin": 4}}),
    "varco-fixed2": ("varco", {"varco": {"schedule": "fixed", "fixedRatio": 2}}),
    "varco-fixed8": ("varco", {"varco": {"schedule": "fixed", "fixedRatio": 8}}),
    # Input features dominate the exchange on wide-feature graphs; these compress them too.
    "varco-in-rmin1": ("varco", {"varco": {"rMin": 1, "compressInput": True}}),
    "varco-in-fixed8": ("varco", {"varco": {"schedule": "fixed", "fixedRatio": 8, "compressInput": True}}),
    "varco-in-fixed32": ("varco", {"varco": {"schedule": "fixed", "fixedRatio": 32, "compressInput": True}}),
    "retexo": ("retexo", {}),
}
# at the middle depth only
DEEP_ONLY = {"varco-rmin2", "varco-rmin4", "varco-fixed2", "varco-fixed8", "varco-in-fixed8", "varco-in-fixed32"}


def config(dataset: str, label: str, layers: int, epochs: int, work: Path, partitions: int) -> TrainConfig:
    strategy, extra = VARIANTS[label]
    return TrainConfig.model_validate({
        "strategy": strategy, "partitions": partitions, "dataset": {"name": dataset},
        "model": {"arch": "gcn", "layers": layers, "hidden": 128, "dropout": 0.5},
        "training": {"epochs": epochs, "evalEvery": 1}, "checkpoint": {"interval": 0},
        "runDir": str(work / f"run-{label}"), "storeDir": str(work / "store"), **extra})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="citeseer")
    ap.add_argument("--layers", default="2,3,4")
    ap.add_argument("--preset", default="1gbit")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        ap.error(f"--variants: unknown {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    # SIGTERM must unwind through the `finally`s that stop the job and delete the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    path = out / "strategy-runs.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    layer_list = [int(x) for x in args.layers.split(",")]
    middle = layer_list[len(layer_list) // 2]
    if not args.render_only:
        with tempfile.TemporaryDirectory() as tmp:
            net = make_network(args.partitions + 1, args.preset)
            try:
                for layers in layer_list:
                    for label in args.variants.split(","):
                        if label in DEEP_ONLY and layers != middle:
                            continue
                        key = f"{args.dataset}|{args.partitions}|{layers}|{label}|{args.preset}"
                        if key in runs:
                            continue
                        cfg = config(args.dataset, label, layers, args.epochs, Path(tmp), args.partitions)
                        runs[key] = run_job(cfg, net, with_curve=True)
                        runs[key]["total_bytes"] = total_bytes(cfg)
                        save(runs, path, key)
            finally:
                if net is not None:
                    net.close()
            for layers in layer_list:
                key = f"{args.dataset}|1|{layers}|single|none"
                if key not in runs:
                    runs[key] = single(args.dataset, layers, args.epochs, Path(tmp))
                    save(runs, path, key)
    from render_strategies import render
    print("wrote", render(runs, out))


def total_bytes(cfg: TrainConfig) -> int:
    """Training bytes of the whole run on the wire (evaluation excluded). Worker <-> aggregator
    traffic is counted once, at the worker; worker <-> worker rows at both ends, hence the half."""
    report = json.loads((Path(cfg.run_dir) / "report.json").read_text())
    return sum(sum(h["worker_train_bytes"]) + sum(h["worker_fetch_bytes"]) // 2
               for h in report["history"])


def single(dataset: str, layers: int, epochs: int, work: Path) -> dict:
    from grappa.data.datasets import load_dataset
    from grappa.runtime.single_process import train_single
    cfg = config(dataset, "grappa", layers, epochs, work, 1)
    result, hist = train_single(cfg, load_dataset(cfg.dataset))
    return {"test_acc": result["test_acc"], "seconds": sum(h["epoch_seconds"] for h in hist)}


if __name__ == "__main__":
    sys.exit(main())
