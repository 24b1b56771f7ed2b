"""Link prediction (issue 38): single-process PyG vs full communication vs Grappa, and RMAT-22 at P = 8.

The grid (docs/results/link.md): on the link splits of Cora, Coauthor-Physics and Amazon-Photo
(`task: link-prediction`, the seeded RandomLinkSplit-style split of trainer/grappa/data/link_split.py:
10 % validation, 20 % test edges, removed from message passing), GCN with 2 and 3 layers, dot
decoder, one uniform negative per training positive, exact evaluation with 1,000 negatives per
positive for MRR and one shared set of 10,000 negative pairs for Hits@K and AUC (the defaults of
the `link` section), test metrics at the epoch of best validation MRR:

- `single`: one process, PyG's own layers (`torch_geometric.nn.GCNConv` / `SAGEConv`) on the
  store's message-passing graph (the split's training edges), the same decoder, loss, optimizer
  and evaluation sets as the jobs, negatives uniform over all nodes. The reference the target is
  measured against (tests/trainer/test_link_prediction.py checks that Grappa's gradient at P = 1
  equals this single process's on the same batch and negatives).
- `full`: strategy full (remote activations every step, fixed partitions) at P = 4 and 8.
- Grappa at P = 4 and 8 in six variants: `grappa` (edge coverage correction + repartition rounds
  every 10 epochs + the halo's owned in-neighbours, `grappa.halo: neighbours`: the defaults),
  `cut-halo` (the same with the halo cut, as the method paper has it), `self-halo` (the halo from
  copies of the node itself), `no-correction` (rounds, correction none), `no-rounds` (correction,
  fixed partitions), `neither`.

Every multi-worker cell is a real local job (`python -m grappa train --config`: aggregator + P
worker processes; the in-process simulation serves node classification only), so it records the
test metrics, the median training seconds of an epoch after the first, and the training bytes
moved per epoch (the step all-reduce of every worker plus, for full, the fetched rows counted
once). `rmat-22` is one more job: RMAT-22 (4M nodes, 64 float16 features) at P = 8, mini-batch
SAGE, a small held-out split (`--rmat-*`), for the largest worker peak PSS and the epoch time.

Results accumulate in docs/results/link-runs.json (a measured cell is kept unless --force, so an
interrupted run resumes); docs/results/link.md is rendered from it (bench/render_link.py) after
every cell. The gradient-fidelity section (bench/link_fidelity.py: Grappa's aggregated gradient
against the exact one per halo mode, Cora and Amazon-Photo) is kept in link-fidelity.json.
Datasets come from $GRAPPA_DATA_ROOT (or are downloaded: `dataset.download`).

    make bench-link                                        # the published grid (its arguments: Makefile)
    python bench/link.py --datasets cora --partitions 2 --epochs 2 --layers 2 \\
        --methods single,full,grappa --no-rmat --results /tmp/link-smoke   # a smoke run elsewhere
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer")]
from render_link import (DATASETS, DEFAULT_LR, GRAPPA_VARIANTS, LAYERS, METHODS, PARTITIONS,  # noqa: E402
                         cell_key, chosen_lr, render)
from link_fidelity import measure as measure_fidelity  # noqa: E402
import provenance  # noqa: E402
from scale import run_with_peak  # noqa: E402

ROUND_EVERY = 10
EVAL_SLICE = 1000  # positives scored at once by the single process (1,000 x 1,000 negatives x 128 floats: 0.5 GB)
VARIANTS = {  # method: the grappa section of its config
    "grappa": {"correction": "node", "rounds": {"every": ROUND_EVERY}},
    "cut-halo": {"correction": "node", "rounds": {"every": ROUND_EVERY}, "halo": "cut"},
    "self-halo": {"correction": "node", "rounds": {"every": ROUND_EVERY}, "halo": "self"},
    "no-correction": {"correction": "none", "rounds": {"every": ROUND_EVERY}},
    "no-rounds": {"correction": "node", "rounds": {"every": 0}},
    "neither": {"correction": "none", "rounds": {"every": 0}},
}
assert list(VARIANTS) == GRAPPA_VARIANTS, "bench/render_link.py lists the variants in the same order"
DATASET_CONFIGS = {
    "cora": {"name": "cora", "download": True},  # download only where $GRAPPA_DATA_ROOT lacks it
    "coauthor-physics": {"name": "coauthor-physics", "download": True},
    "amazon-photo": {"name": "amazon-photo", "download": True},
}


def config(dataset: str, method: str, partitions: int, layers: int, args, work: Path, seed: int = 0,
           lr: float = DEFAULT_LR) -> dict:
    """The job's config (also what the single process reads its settings from). `seed` is the
    training seed (initialisation, negatives); the split's seed stays 0, so every seed is judged
    on the same test edges."""
    run = f"run-{dataset}-{layers}-{method}-{partitions}" + (f"-lr{lr:g}" if lr != DEFAULT_LR else "") \
        + (f"-s{seed}" if seed else "")
    strategy = "full" if method == "full" else "grappa"
    doc = {"strategy": strategy, "partitions": partitions, "task": "link-prediction",
           "dataset": DATASET_CONFIGS[dataset],
           "model": {"arch": args.arch, "layers": layers, "hidden": args.hidden, "dropout": args.dropout},
           "training": {"epochs": args.epochs, "lr": lr, "seed": seed, "evalEvery": args.eval_every},
           "link": {"splitSeed": 0},
           "checkpoint": {"interval": 0},
           "runDir": str(work / run),
           # one store per dataset and P: the split is seeded (link.splitSeed), the same for every P
           "storeDir": str(work / f"store-{dataset}-{partitions}")}
    if method in VARIANTS:
        doc["grappa"] = VARIANTS[method]
    return doc


# a stored cell measured with other values of these is measured again (its key holds lr and seed)
TRAINED_BY = ("epochs", "arch", "hidden", "dropout", "halo")


def halo_of(doc: dict) -> str | None:
    """How the cell's halo rows enter a layer (grappa.halo resolved; None: no halo, not grappa)."""
    if doc["strategy"] != "grappa" or doc["partitions"] == 1:
        return None
    from grappa.config import TrainConfig
    return TrainConfig.model_validate(doc).halo_mode


def job_env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}", "GRAPPA_LOG_LEVEL": "WARNING"}


def run_job(doc: dict, timeout: float) -> dict:
    """One real local job; what the page needs from its report.json."""
    path = Path(doc["runDir"]).with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    wall, tree_peak, _, err, code = run_with_peak(
        [sys.executable, "-m", "grappa", "train", "--config", str(path), "--start-over"], job_env(), timeout)
    if code != 0:
        raise RuntimeError(f"train failed ({code}):\n{err[-2500:]}")
    rep = json.loads((Path(doc["runDir"]) / "report.json").read_text())
    hist, res, mem = rep["history"], rep["result"], rep.get("memory") or {}
    train = [h["train_seconds"] for h in hist]
    # training bytes of an epoch: every worker's all-reduce traffic, plus fetched rows counted once
    # (the fetching and the serving worker both count them)
    moved = [sum(h["worker_train_bytes"]) + sum(h["worker_fetch_bytes"]) // 2 for h in hist]
    pss = mem.get("worker_peak_pss_bytes") or hist[-1].get("worker_peak_pss_bytes") or []
    return {"test_mrr": res.get("test_mrr"), "test_hits@50": res.get("test_hits@50"),
            "test_auc": res.get("test_auc"), "best_val_mrr": res.get("best_val"),
            "best_epoch": res.get("best_epoch"),
            "epoch_seconds": round(statistics.median(train[1:] or train), 4), "train_seconds": train,
            "bytes_per_epoch": int(statistics.median(moved[1:] or moved)),
            "aggregator_train_bytes": [h.get("train_bytes") for h in hist],
            "steps_per_epoch": hist[-1].get("steps"), "worker_peak_pss_bytes": pss,
            "max_worker_peak_pss_bytes": max(pss) if pss else None,
            "wall_seconds": round(wall, 1), "tree_peak_rss_bytes": tree_peak}


def run_single(doc: dict) -> dict:
    """Single-process PyG on the store's split (prepared at P = 1): full-graph epochs, the best
    validation MRR's test metrics, computed by the trainer's own metric functions."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv, SAGEConv

    from grappa.config import TrainConfig
    from grappa.data.datasets import load_dataset
    from grappa.data.link_split import LinkEdges
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.data.store.preparation import prepare_store
    from grappa.models.decoder import Decoder
    from grappa.runtime.replica import make_optimizer
    from grappa.strategies.base import epoch_seed
    from grappa.tasks import link_prediction as lp

    cfg = TrainConfig.model_validate(doc)
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    link = LinkEdges(cfg.store_path, man)
    data = load_dataset(cfg.dataset)
    mp = torch.cat([store.load_chunk(k).edge_index for k in range(store.num_chunks)], 1)
    n, m = data.num_nodes, cfg.model
    conv = {"gcn": GCNConv, "sage": SAGEConv}[m.arch]
    widths = [data.num_features] + [m.hidden] * m.layers

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList(conv(a, b) for a, b in zip(widths, widths[1:]))
            self.decoder = Decoder(cfg.link.decoder, m.hidden)

        def forward(self, x, ei):
            h = x
            for i, c in enumerate(self.convs):
                if i > 0:  # as the built-in stack: dropout on hidden activations only
                    h = F.dropout(h, m.dropout, self.training)
                h = c(h, ei)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
            return h

    torch.manual_seed(cfg.training.seed)
    model = Net()
    opt = make_optimizer(cfg, model)
    pos = torch.from_numpy(np.array(link["train"], dtype=np.int64))
    sets = {s: [torch.from_numpy(np.array(link[f], dtype=np.int64)) for f in (s, f"{s}_neg", f"{s}_shared_neg")]
            for s in lp.EVAL_SPLITS}

    @torch.no_grad()
    def evaluate() -> dict:
        model.eval()
        emb = model(data.x, mp)
        total = torch.zeros(lp.EVAL_STATS_LEN, dtype=torch.float64)
        for i, s in enumerate(lp.EVAL_SPLITS):
            p_e, n_e, sh = sets[s]
            shared = torch.sort(model.decoder(emb[sh[0]], emb[sh[1]])).values
            th = lp.hits_thresholds(shared)
            # the stats are sums: positives in slices keep the [slice, k, hidden] gather bounded
            for lo in range(0, p_e.shape[1], EVAL_SLICE):
                p, neg = lp.pair_scores(model.decoder, emb, p_e[:, lo:lo + EVAL_SLICE], n_e[lo:lo + EVAL_SLICE])
                total[i * lp.STATS_PER_SPLIT:(i + 1) * lp.STATS_PER_SPLIT] += lp.split_stats(p, neg, shared, th)
        return lp.metrics_of(total)

    best: dict = {"val_mrr": -1.0}
    train_s = []
    for epoch in range(cfg.training.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        gen = torch.Generator().manual_seed(epoch_seed(cfg.training.seed, 1, epoch))
        neg = lp.sample_negatives(pos[0], n, cfg.link.negatives, gen)
        emb = model(data.x, mp)
        p, q = lp.pair_scores(model.decoder, emb, pos, neg)
        loss = lp.example_losses(p, q).mean()
        loss.backward()
        opt.step()
        train_s.append(time.perf_counter() - t0)
        if (epoch + 1) % cfg.training.eval_every == 0 or epoch == cfg.training.epochs - 1:
            rec = evaluate()
            if rec["val_mrr"] > best["val_mrr"]:
                best = {**rec, "epoch": epoch + 1}
    return {"test_mrr": best.get("test_mrr"), "test_hits@50": best.get("test_hits@50"),
            "test_auc": best.get("test_auc"), "best_val_mrr": best["val_mrr"], "best_epoch": best.get("epoch"),
            "epoch_seconds": round(statistics.median(train_s[1:] or train_s), 4), "train_seconds": train_s,
            "bytes_per_epoch": 0, "num_edges_message_passing": int(mp.shape[1])}


def rmat_config(args, work: Path) -> dict:
    return {"strategy": "grappa", "partitions": 8, "task": "link-prediction",
            "dataset": {"name": "rmat", "synthetic": {"scale": args.rmat_scale, "numFeatures": 64},
                        "featureDtype": "float16"},
            "model": {"arch": "sage", "layers": 2, "hidden": args.hidden, "dropout": args.dropout},
            "training": {"mode": "mini-batch", "evalMode": "exact", "epochs": args.rmat_epochs,
                         "batchSize": 1000, "maxStepsPerEpoch": args.rmat_steps, "evalEvery": args.rmat_epochs,
                         "seed": 0},
            "link": {"valFraction": args.rmat_held_out, "testFraction": args.rmat_held_out,
                     "evalNegatives": 100, "sharedNegatives": 10000},
            **({"grappa": {"halo": args.rmat_halo}} if args.rmat_halo else {}),
            "checkpoint": {"interval": 0},
            "runDir": str(work / f"run-rmat-{args.rmat_scale}"), "storeDir": str(work / f"store-rmat-{args.rmat_scale}")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--partitions", default=",".join(map(str, PARTITIONS)))
    ap.add_argument("--layers", default=",".join(map(str, LAYERS)))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--seeds", default="0", help="training seeds, e.g. 0,1,2: each cell once per seed")
    ap.add_argument("--arch", choices=["gcn", "sage"], default="gcn")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lrs", default=str(DEFAULT_LR),
                    help="learning rates, e.g. 0.01,0.001: with several, single-process (seed 0) runs at each "
                         "first and every method of a graph and depth uses the one with its best validation MRR")
    ap.add_argument("--no-rmat", action="store_true", help="skip the RMAT cell")
    ap.add_argument("--rmat-only", action="store_true", help="only the RMAT cell")
    ap.add_argument("--rmat-scale", type=int, default=22)
    ap.add_argument("--rmat-epochs", type=int, default=2)
    ap.add_argument("--rmat-steps", type=int, default=100, help="training.maxStepsPerEpoch of the RMAT cell")
    ap.add_argument("--rmat-held-out", type=float, default=0.001, help="RMAT's link.valFraction and testFraction")
    ap.add_argument("--rmat-halo", choices=["cut", "self", "neighbours"],
                    help="grappa.halo of the RMAT cell, kept beside the default's as rmat/<scale>/8/<halo>-halo")
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--force", action="store_true", help="measure cells that are measured already")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where link-runs.json and link.md go")
    ap.add_argument("--scratch", default=os.environ.get("GRAPPA_BENCH_SCRATCH", tempfile.gettempdir()))
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--fidelity-datasets", default="cora,amazon-photo",
                    help="graphs of the gradient-fidelity section (bench/link_fidelity.py)")
    ap.add_argument("--no-fidelity", action="store_true", help="skip the gradient-fidelity section")
    ap.add_argument("--fidelity-only", action="store_true", help="only the gradient-fidelity section")
    args = ap.parse_args()
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    runs_file = results / "link-runs.json"
    runs = json.loads(runs_file.read_text()) if runs_file.exists() else {}
    command = "make bench-link" if results == ROOT / "docs" / "results" else "python bench/link.py " + " ".join(sys.argv[1:])
    work = Path(args.scratch) / "grappa-bench-link"

    def measure(key: str, record: dict, fn) -> None:
        if key in runs and "failed" not in runs[key] and not args.force:
            other = {k: runs[key].get(k) for k in TRAINED_BY if runs[key].get(k) != record.get(k)}
            if not other:
                print(f"{key}: measured already")
                return
            print(f"{key}: measured with other settings ({other}): measuring again", flush=True)
        record.update({"cpus": len(os.sched_getaffinity(0)), "measured": time.strftime("%Y-%m-%d"),
                       "code": provenance.stamp(), "load_before": round(os.getloadavg()[0], 2)})
        print(f"{key}: running", flush=True)
        try:
            record.update(fn())
            record["load_after"] = round(os.getloadavg()[0], 2)  # the job's own processes included
            print(f"{key}: test MRR {record.get('test_mrr')}, Hits@50 {record.get('test_hits@50')}, "
                  f"AUC {record.get('test_auc')}, epoch {record['epoch_seconds']:.3f} s, "
                  f"{record['bytes_per_epoch']:,} B/epoch, worker peak PSS "
                  f"{record.get('max_worker_peak_pss_bytes')}", flush=True)
        except (RuntimeError, OSError, ValueError) as err:
            record["failed"] = str(err)[-800:]
            print(f"{key}: failed: {record['failed']}", flush=True)
        runs[key] = record
        runs_file.write_text(json.dumps(runs, indent=1, sort_keys=True))
        render(runs, results, command)

    def cell(ds: str, layers: int, method: str, p: int, seed: int, lr: float) -> None:
        doc = config(ds, method, p, layers, args, work, seed, lr)
        record = {"dataset": ds, "layers": layers, "method": method, "partitions": p, "seed": seed,
                  "epochs": args.epochs, "eval_every": args.eval_every, "arch": args.arch,
                  "hidden": args.hidden, "dropout": args.dropout, "lr": lr, "config": doc,
                  "halo": halo_of(doc)}
        fn = (lambda: run_single(doc)) if method == "single" else (lambda: run_job(doc, args.timeout))
        measure(cell_key(ds, layers, method, p, seed, lr), record, fn)

    lrs = [float(x) for x in args.lrs.split(",")]
    if not args.render_only and not args.rmat_only and not args.fidelity_only:
        for ds in args.datasets.split(","):
            for layers in [int(x) for x in args.layers.split(",")]:
                if len(lrs) > 1:  # the rate is chosen on single-process validation, before any other cell
                    for lr in lrs:
                        cell(ds, layers, "single", 1, 0, lr)
                lr = chosen_lr(runs, ds, layers) if len(lrs) > 1 else lrs[0]
                print(f"{ds}, {layers} layers: lr {lr:g}", flush=True)
                for method in args.methods.split(","):
                    for p in [1] if method == "single" else [int(x) for x in args.partitions.split(",")]:
                        for seed in [int(x) for x in args.seeds.split(",")]:
                            cell(ds, layers, method, p, seed, lr)
    if not args.render_only and not args.rmat_only and not args.no_fidelity:
        measure_fidelity(results / "link-fidelity.json", args.fidelity_datasets.split(","),
                         [int(x) for x in args.layers.split(",")], [int(x) for x in args.partitions.split(",")],
                         args.hidden, str(work / "fidelity"), args.force)
    if not args.render_only and not args.no_rmat and not args.fidelity_only:
        doc = rmat_config(args, work)
        record = {"dataset": f"rmat-{args.rmat_scale}", "method": "grappa", "partitions": 8, "config": doc,
                  "halo": halo_of(doc)}
        key = f"rmat/{args.rmat_scale}/8" + (f"/{args.rmat_halo}-halo" if args.rmat_halo else "")
        measure(key, record, lambda: run_job(doc, args.timeout))
    page = render(runs, results, command)
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
