"""Gradient fidelity of link prediction (issue 38): Grappa's aggregated gradient against the exact
full-graph one, per halo mode and reducer, at P = 4 and 8, at initialisation and after training.

strategies/grappa/fidelity.py measures it (expected losses over uniform negatives, so no draw of
negatives adds noise); this runs the grid bench/link.py asks for and keeps it in
link-fidelity.json beside link-runs.json (a measured setting is kept unless --force);
render_link_fidelity.py renders the section of link.md.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from render_link_fidelity import HALOS, REDUCERS, TRAIN_EPOCHS, TRAIN_LR, WHENS, fidelity_key

PARTITION_SEEDS = (0, 1)
ROUNDS = 2


def config(ds: str, layers: int, p: int, halo: str, hidden: int):
    from grappa.config import TrainConfig
    return TrainConfig.model_validate({
        "partitions": p, "task": "link-prediction", "dataset": {"name": ds},
        "model": {"arch": "gcn", "layers": layers, "hidden": hidden, "dropout": 0.0},
        "grappa": {"halo": halo}, "training": {"lr": TRAIN_LR}})


def measure(path: Path, datasets: list[str], layers: list[int], partitions: list[int], hidden: int,
            scratch: str, force: bool = False) -> dict:
    """Every (graph, layers, P, halo, when) setting not in `path` yet; returns the whole file."""
    from grappa.data.datasets import load_dataset
    from grappa.strategies.grappa.fidelity import gradient_fidelity
    fid = json.loads(path.read_text()) if path.exists() else {}
    os.makedirs(scratch, exist_ok=True)
    for ds in datasets:
        data = None
        for L in layers:
            for p in partitions:
                for halo in HALOS:
                    for when in WHENS:
                        key = fidelity_key(ds, L, p, halo, when)
                        if key in fid and not force:
                            continue
                        cfg = config(ds, L, p, halo, hidden)
                        data = data if data is not None else load_dataset(cfg.dataset)
                        t0 = time.perf_counter()
                        rows = gradient_fidelity(cfg, data, PARTITION_SEEDS, rounds=ROUNDS,
                                                 reducers=REDUCERS, work_dir=scratch,
                                                 train_epochs=TRAIN_EPOCHS if when == "trained" else 0)
                        fid[key] = {"reducers": {r.reducer: {"rel_error": r.rel_error, "cosine": r.cosine,
                                                             "samples": r.samples} for r in rows},
                                    "hidden": hidden, "negatives": cfg.link.negatives,
                                    "partition_seeds": list(PARTITION_SEEDS), "rounds": ROUNDS,
                                    "train_epochs": TRAIN_EPOCHS if when == "trained" else 0,
                                    "train_lr": TRAIN_LR, "seconds": round(time.perf_counter() - t0, 1),
                                    "measured": time.strftime("%Y-%m-%d")}
                        path.write_text(json.dumps(fid, indent=1, sort_keys=True))
                        best = fid[key]["reducers"]["node l=0.5"]
                        print(f"fidelity {key}: relative error {best['rel_error']:.4f}, "
                              f"cosine {best['cosine']:.4f}", flush=True)
    return fid
