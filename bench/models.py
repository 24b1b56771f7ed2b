"""PyG's own layers against the built-in models under Grappa: P = 8, mini-batch, on
Coauthor-Physics and RMAT-20; epoch time, worker peak PSS and test accuracy side by side.

Each cell is a real local job (`python -m grappa train --config`: aggregator + P worker
processes) on a store prepared once per dataset: the built-in model (`model.arch`) or a PyG model
from `torch_geometric.nn.models` through `model.custom.factory` (PyG's `GraphSAGE`, `GCN`, `GAT`
with v2 attention), the same depth, width, dropout, fanouts, batch, seed and rounds. Per cell:
the median epoch's training seconds after the first (warm-up), steps per epoch, the largest
worker peak PSS (the report's memory section: PSS counts the memory-mapped store and shared
libraries once per machine, but is sampled every 5 s, so a short evaluation's peak can fall
between samples), the largest worker peak RSS (the kernel's high-water mark: every peak, with
shared pages counted whole in each worker) and the test accuracy of the last epoch's evaluation (sampled, on
`--eval-fraction` of each worker's nodes, with the training fanouts).

`--profile` then runs one worker's steps of the SAGE models in a process of its own per model (the
same store, round and batches as rank 1 of the job): seconds per step by phase (sampling and
feature rows, forward, backward), the step's peak RSS above what the process held before its
first step, and the operators with the most CPU time (torch.profiler): what the page says when
PyG's GraphSAGE misses the target of 1.5x the built-in SAGE's epoch time and worker memory.

Results accumulate in docs/results/models-runs.json (a measured cell is kept unless --force);
docs/results/models.md is rendered from it after every cell.

    python bench/models.py                                   # the published cells (make bench-models)
    python bench/models.py --datasets cora --partitions 2 --epochs 2 --models builtin-sage,pyg-sage \\
        --profile --results /tmp/models-smoke                # a seconds-long smoke run elsewhere
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer")]
from scale import run_with_peak  # noqa: E402

from grappa.config import DEFAULT_FANOUTS  # noqa: E402  (torch-free)

GIB, MIB = 2 ** 30, 2 ** 20
TARGET = 1.5  # PyG GraphSAGE's epoch time and worker memory at most this times the built-in SAGE's
PAIR = ("builtin-sage", "pyg-sage")
# PyG's GraphSAGE as it comes, and what closes its gap: Grappa's dropout mask, then a user's model
# of the same SAGEConv layers that computes only the rows the next layer reads (user_models/).
VARIANTS = ("pyg-sage-sparse", "pyg-sage-fast", "user-sage-trimmed")
PROFILED = PAIR + VARIANTS
TRIMMED = ROOT / "bench" / "user_models" / "trimmed_sage.py"
MODELS = {
    "builtin-sage": {"arch": "sage"},
    "pyg-sage": {"custom": {"factory": "torch_geometric.nn.models:GraphSAGE"}},
    "pyg-sage-sparse": {"custom": {"factory": "torch_geometric.nn.models:GraphSAGE", "adjacency": "sparse"}},
    "pyg-sage-fast": {"custom": {"factory": "torch_geometric.nn.models:GraphSAGE", "fastDropout": True}},
    "user-sage-trimmed": {"custom": {"factory": "trimmed_sage:TrimmedSAGE", "codePath": str(TRIMMED),
                                     "fastDropout": True}},
    "builtin-gcn": {"arch": "gcn"},
    "pyg-gcn": {"custom": {"factory": "torch_geometric.nn.models:GCN"}},
    "builtin-gat": {"arch": "gat", "heads": 4},
    "pyg-gatv2": {"custom": {"factory": "torch_geometric.nn.models:GAT", "kwargs": {"v2": True, "heads": 4}}},
}
DATASETS = {
    "coauthor-physics": {"name": "coauthor-physics", "download": True},  # unless under $GRAPPA_DATA_ROOT
    "rmat-20": {"name": "rmat", "synthetic": {"scale": 20, "numFeatures": 64}, "featureDtype": "float16"},
    "cora": {"name": "cora"},  # smoke runs
}


def config(dataset: str, model: str, args, work: Path) -> dict:
    training = {"mode": "mini-batch", "epochs": args.epochs, "batchSize": args.batch_size,
                "evalEvery": args.epochs, "evalFraction": args.eval_fraction, "seed": 0}
    if args.max_steps:
        training["maxStepsPerEpoch"] = args.max_steps
    return {"partitions": args.partitions, "dataset": DATASETS[dataset],
            "model": {"layers": args.layers, "hidden": args.hidden, "dropout": 0.5, **MODELS[model]},
            "training": training, "checkpoint": {"interval": 0},
            "runDir": str(work / f"run-{model}"), "storeDir": str(work / f"store-{dataset}")}


def run_cell(cfg: dict, timeout: float) -> dict:
    path = Path(cfg["runDir"]).with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}", "GRAPPA_LOG_LEVEL": "WARNING"}
    wall, tree_peak, _, err, code = run_with_peak(
        [sys.executable, "-m", "grappa", "train", "--config", str(path), "--start-over"], env, timeout)
    if code != 0:
        raise RuntimeError(f"train failed ({code}):\n{err[-2500:]}")
    rep = json.loads((Path(cfg["runDir"]) / "report.json").read_text())
    hist, mem = rep["history"], rep.get("memory") or {}
    train = [h["train_seconds"] for h in hist]
    pss = mem.get("worker_peak_pss_bytes") or []
    rss = mem.get("worker_peak_rss_bytes") or []
    return {"wall_seconds": round(wall, 1), "tree_peak_rss_bytes": tree_peak,
            "epoch_seconds": round(statistics.median(train[1:] or train), 3), "train_seconds": train,
            "steps_per_epoch": hist[-1].get("steps"), "worker_peak_pss_bytes": pss,
            "max_worker_peak_pss_bytes": max(pss) if pss else None,
            "max_worker_peak_rss_bytes": max(rss) if rss else None,
            "worker_local_edges": mem.get("worker_local_edges"), "test_acc": hist[-1].get("test_acc"),
            "val_acc": hist[-1].get("val_acc")}


# ---- one worker's steps, phase by phase (--profile) --------------------------------------------------

def _vm(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def profile_one(cfg: dict, steps: int) -> dict:
    """Runs in a child process: rank 1's round and first `steps` batches of epoch 0."""
    sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "operator")]
    import torch

    from grappa.config import validate_config
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.models.build import build_model
    from grappa.strategies import make_strategy
    from grappa.strategies.grappa.rounds import RoundDecision, round_seed
    torch.set_num_threads(int(os.environ.get("GRAPPA_THREADS", "1")))
    c = validate_config(cfg)
    store = ChunkStore(c.store_path)
    man = store.manifest
    torch.manual_seed(c.training.seed)
    model = build_model(c.model, man["num_features"], man["num_classes"], c.training.mode)
    shard = make_strategy(c, 1, store, model)
    shard.setup_round(RoundDecision(0, round_seed(c.grappa.partition_seed, 0), 0))
    epoch = shard.start_epoch(0)
    batches = [epoch[i % len(epoch)] for i in range(steps + 1)]  # a small graph's batches again
    times = {"sample_and_features": 0.0, "forward": 0.0, "backward": 0.0}
    rows = {"given": 0, "read_next": 0, "all": 0}
    shard.contribute(batches[0], 1.0)  # warm-up: caches, allocator
    blocks, x = shard.prepare(batches[0])
    dense = x.to_dense() if x.is_sparse or x.layout != torch.strided else x
    density = float((dense != 0).float().mean())
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak-RSS counter (VmHWM)
        f.write("5")
    before = _vm("VmRSS:")
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            t0 = time.perf_counter()
            blocks, x = shard.prepare(batch)
            t1 = time.perf_counter()
            model.train()
            model.zero_grad(set_to_none=True)
            out = model(x, blocks)
            loss = F.cross_entropy(out, shard.graph.y[batch])
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            times["sample_and_features"] += t1 - t0
            times["forward"] += t2 - t1
            times["backward"] += t3 - t2
            # a layer is given its block's source rows; the next layer reads its target rows
            rows["given"] += sum(b.num_src for b in blocks)
            rows["read_next"] += sum(b.num_dst for b in blocks)
            rows["all"] += len(blocks) * blocks[0].num_src  # no trimming (a CSR adjacency)
    n = max(1, len(batches) - 1)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:25]
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) or 1
    return {"steps": n, "seconds_per_step": {k: v / n for k, v in times.items()},
            "step_peak_bytes": _vm("VmHWM:") - before, "rss_before_bytes": before,
            "rows_per_step": {k: v / n for k, v in rows.items()}, "input_density": density,
            "top_ops": [{"op": e.key, "share": e.self_cpu_time_total / total,
                         "seconds_per_step": e.self_cpu_time_total / 1e6 / n} for e in ops]}


def run_profile(cfg: dict, steps: int, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}", "GRAPPA_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--profile-one", json.dumps(cfg), "--profile-steps", str(steps)],
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the page ---------------------------------------------------------------------------------------

def gib(v) -> str:
    return f"{v / GIB:.2f} GiB" if v else "n/a"


def render(runs: dict, out: Path, command: str) -> None:
    lines = ["# PyG layers vs the built-in models under Grappa", "",
             f"Regenerate with `{command}` (bench/models.py; measured cells are kept in "
             "`models-runs.json`, a new cell is added to them).", ""]
    cells = {k: v for k, v in runs.items() if k.startswith("cell/")}
    if not cells:
        lines += ["No cell has been measured yet.", ""]
    datasets = sorted({v["dataset"] for v in cells.values()})
    for ds in datasets:
        mine = [v for v in cells.values() if v["dataset"] == ds]
        s = mine[0]["setting"]
        lines += [f"## {ds}", "",
                  f"P = {s['partitions']}, mini-batch of {s['batch_size']} seeds per worker, {s['layers']} layers, "
                  f"hidden {s['hidden']}, fanouts {s['fanouts']}, {s['epochs']} epochs"
                  + (f" of at most {s['max_steps']} steps" if s.get("max_steps") else "")
                  + f", evaluation on {s['eval_fraction']:.0%} of the nodes (sampled); {s['cpus']} CPUs, "
                  f"measured {s['measured']}.", "",
                  "| model | layers from | epoch time | steps / epoch | worker peak PSS | worker peak RSS | test acc |",
                  "|---|---|---|---|---|---|---|"]
        for v in sorted(mine, key=lambda v: list(MODELS).index(v["model"])):
            if "failed" in v:
                lines.append(f"| {v['model']} | {origin(v['model'])} | failed: {v['failed'][-160:]!r} | | | | |")
                continue
            acc = "n/a" if v.get("test_acc") is None else f"{v['test_acc']:.4f}"
            lines.append(f"| {v['model']} | {origin(v['model'])} | {v['epoch_seconds']:.2f} s | {v['steps_per_epoch']} | "
                         f"{gib(v['max_worker_peak_pss_bytes'])} | {gib(v.get('max_worker_peak_rss_bytes'))} | {acc} |")
        lines += [""] + verdict(ds, cells) + [""] + profile_section(ds, runs)
    out.write_text("\n".join(lines).rstrip() + "\n")


def origin(model: str) -> str:
    m = MODELS[model]
    if "custom" not in m:
        return f"built-in `{m['arch']}`"
    sparse = ", CSR adjacency" if m["custom"].get("adjacency") == "sparse" else ""
    fast = ", `fastDropout`" if m["custom"].get("fastDropout") else ""
    code = " (bench/user_models)" if m["custom"].get("codePath") else ""
    return f"`{m['custom']['factory']}`{code}{sparse}{fast}"


LABELS = {"pyg-sage": "PyG GraphSAGE", "pyg-sage-sparse": "PyG GraphSAGE on a CSR adjacency",
          "pyg-sage-fast": "PyG GraphSAGE with `fastDropout`",
          "user-sage-trimmed": "a user's SAGEConv model computing only the rows read next, with `fastDropout`"}


def verdict(ds: str, cells: dict) -> list[str]:
    a = cells.get(f"cell/{ds}/{PAIR[0]}")
    out = []
    for name in (PAIR[1],) + VARIANTS:
        b, label = cells.get(f"cell/{ds}/{name}"), LABELS[name]
        if not a or not b or "failed" in a or "failed" in b:
            if b is not None or name == PAIR[1]:
                out.append(f"- Target, {label} within {TARGET}x of the built-in SAGE: not measured "
                           "(a cell is missing or failed).")
            continue
        t = b["epoch_seconds"] / a["epoch_seconds"]
        m = b["max_worker_peak_pss_bytes"] / a["max_worker_peak_pss_bytes"]
        say = lambda r: "met" if r <= TARGET else "**missed**"  # noqa: E731
        out.append(f"- Target, {label} within {TARGET}x of the built-in SAGE: epoch time {t:.2f}x "
                   f"({say(t)}), worker peak PSS {m:.2f}x ({say(m)}).")
    return out


# What an operator's time is, in a PyG model against the built-in layers (read with the profile's
# numbers: which of these a step spends more on is measured, not assumed).
OPS = {
    "aten::bernoulli_": "torch's dropout mask, one Bernoulli draw per element of every hidden row (the "
                        "built-in draws 16-bit slices of 64-bit words, models/dropout.py)",
    "aten::mm": "dense products", "aten::addmm": "dense products with a bias",
    "aten::index_select": "per-edge messages: a source row gathered per edge (`x_j`)",
    "aten::scatter_add_": "summing per-edge messages into their targets",
    "aten::scatter_reduce_": "reducing per-edge messages into their targets",
    "aten::index_add_": "summing per-edge gradients back into their sources",
    "aten::_sparse_mm_reduce_impl": "a sparse product with the adjacency (fused gather and mean)",
    "aten::fill_": "zero-filling aggregation outputs", "aten::zero_": "zero-filling gradients",
    "aten::div": "the mean's division by the in-degree", "aten::mul": "elementwise scaling (dropout, the mean)",
    "aten::threshold_backward": "ReLU's backward", "aten::clamp_min": "ReLU",
    "aten::copy_": "copies (the input rows, dtype casts)", "aten::random_": "random bits (the built-in's dropout mask)",
}


def op_differences(b: dict, a: dict, k: int = 4) -> list[tuple[str, float]]:
    """The operators on which `b` spends the most self time per step more than `a` (an operator
    missing from a profile's top list counts as its smallest listed time or less: 0)."""
    sa = {o["op"]: o["seconds_per_step"] for o in a["top_ops"]}
    diffs = [(o["op"], o["seconds_per_step"] - sa.get(o["op"], 0.0)) for o in b["top_ops"]]
    return sorted((d for d in diffs if d[1] > 0), key=lambda d: -d[1])[:k]


def why(ds: str, prof: dict, cells: dict) -> str:
    """The step's gap explained from the profiles: per-operator differences, the rows each
    model's layers compute, the input's density; then what the measured variants close."""
    a, b = prof[PAIR[0]], prof[PAIR[1]]
    fb = lambda p: p["seconds_per_step"]["forward"] + p["seconds_per_step"]["backward"]  # noqa: E731
    parts = [f"Forward and backward: PyG GraphSAGE {fb(b):.3f} s per step, the built-in SAGE {fb(a):.3f} s "
             f"({fb(b) / max(fb(a), 1e-9):.2f}x); step peak {b['step_peak_bytes'] / MIB:.0f} MiB against "
             f"{a['step_peak_bytes'] / MIB:.0f} MiB."]
    diffs = op_differences(b, a)
    if diffs:
        parts.append("Where PyG's step spends more (self time per step, PyG minus built-in): " + "; ".join(
            f"`{op}` +{d:.3f} s, {OPS.get(op, 'see the operator list')}" for op, d in diffs) + ".")
    rb, ra = b.get("rows_per_step"), a.get("rows_per_step")
    if rb and ra:
        parts.append(f"Rows: PyG's `BasicGNN` trims each layer's input to the hops still needed, yet every layer "
                     f"computes all rows it is given ({rb['given']:,.0f} a step over its layers), of which the next "
                     f"layer reads {rb['read_next']:,.0f} ({rb['given'] / max(rb['read_next'], 1):.1f}x); the built-in "
                     "layers compute only those (their block's targets), so PyG's products, activations and dropout "
                     "masks cover that many more rows.")
    dens = a.get("input_density")
    if dens is not None and dens < 0.5:
        parts.append(f"The input is {dens:.1%} non-zero: the built-in first layer multiplies it as a CSR "
                     "matrix (models/sparse_input.py), a user's model gets `x` dense, and `SAGEConv` on an "
                     "`edge_index` gathers a message row per edge in that input width.")
    closing = []
    base = cells.get(f"cell/{ds}/{PAIR[0]}")
    for name in VARIANTS[1:]:
        c, p = cells.get(f"cell/{ds}/{name}"), prof.get(name)
        if c and base and "failed" not in c and "failed" not in base:
            closing.append(f"{LABELS[name]}: epoch {c['epoch_seconds'] / base['epoch_seconds']:.2f}x the built-in"
                           + (f", forward and backward {fb(p) / max(fb(a), 1e-9):.2f}x" if p else ""))
    if closing:
        parts.append("What closes it, measured in the same run: " + "; ".join(closing) + ".")
    return " ".join(parts)


# Which rows a model's layers compute (of the profile's counts): the built-in layers and the
# trimmed user model their block's targets, PyG's BasicGNN every row it is given after trimming,
# and on a CSR adjacency (no trimming) every row of the sample at every layer.
COMPUTES = {"builtin-sage": "read_next", "user-sage-trimmed": "read_next", "pyg-sage": "given",
            "pyg-sage-fast": "given", "pyg-sage-sparse": "all"}


def profile_section(ds: str, runs: dict) -> list[str]:
    prof = {m: runs[f"profile/{ds}/{m}"] for m in PROFILED if f"profile/{ds}/{m}" in runs}
    if not all(m in prof for m in PAIR):
        return []
    a = prof[PAIR[0]]
    lines = [f"### Where a SAGE step goes ({ds}, rank 1, one thread, {a['steps']} steps)", "",
             "| model | sampling + feature rows | forward | backward | step peak above the process before it | rows computed / read next |",
             "|---|---|---|---|---|---|"]
    for m in prof:
        p, r = prof[m]["seconds_per_step"], prof[m].get("rows_per_step")
        given = "n/a" if not r else f"{r[COMPUTES[m]]:,.0f} / {r['read_next']:,.0f}"
        lines.append(f"| {m} | {p['sample_and_features']:.3f} s | {p['forward']:.3f} s | {p['backward']:.3f} s | "
                     f"{prof[m]['step_peak_bytes'] / MIB:.0f} MiB | {given} |")
    lines += ["", "Operators with the most CPU time per step (torch.profiler, self time):", ""]
    for m in prof:
        ops = ", ".join(f"`{o['op']}` {o['seconds_per_step']:.3f} s ({o['share']:.0%})" for o in prof[m]["top_ops"][:5])
        lines.append(f"- {m}: {ops}")
    cells = {k: v for k, v in runs.items() if k.startswith("cell/")}
    lines += ["", why(ds, prof, cells), ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="coauthor-physics,rmat-20")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=None, help="training.maxStepsPerEpoch (RMAT-20: 100)")
    ap.add_argument("--eval-fraction", type=float, default=0.1)
    ap.add_argument("--profile", action="store_true", help="also profile one worker's steps of the SAGE models")
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--profile-one", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--force", action="store_true", help="measure cells that are measured already")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where models-runs.json and models.md go")
    ap.add_argument("--scratch", default=os.environ.get("GRAPPA_BENCH_SCRATCH", tempfile.gettempdir()))
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    if args.profile_one:
        print(json.dumps(profile_one(json.loads(args.profile_one), args.profile_steps)))
        return
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    runs_file, page = results / "models-runs.json", results / "models.md"
    runs = json.loads(runs_file.read_text()) if runs_file.exists() else {}
    command = "make bench-models" if results == ROOT / "docs" / "results" else "python bench/models.py " + " ".join(sys.argv[1:])
    if not args.render_only:
        for ds in args.datasets.split(","):
            work = Path(args.scratch) / f"grappa-bench-models-{ds}"
            for model in args.models.split(","):
                key = f"cell/{ds}/{model}"
                if key in runs and "failed" not in runs[key] and not args.force:
                    print(f"{key}: measured already")
                    continue
                cfg = config(ds, model, args, work)
                setting = {"partitions": args.partitions, "layers": args.layers, "hidden": args.hidden,
                           "batch_size": args.batch_size, "epochs": args.epochs, "max_steps": args.max_steps,
                           "eval_fraction": args.eval_fraction, "fanouts": DEFAULT_FANOUTS.get(args.layers, [10] * args.layers),
                           "cpus": len(os.sched_getaffinity(0)), "measured": time.strftime("%Y-%m-%d")}
                record = {"dataset": ds, "model": model, "setting": setting, "config": cfg}
                print(f"{key}: running", flush=True)
                try:
                    record.update(run_cell(cfg, args.timeout))
                    print(f"{key}: epoch {record['epoch_seconds']:.2f} s, worker peak PSS "
                          f"{gib(record['max_worker_peak_pss_bytes'])}, test acc {record['test_acc']}", flush=True)
                except (RuntimeError, subprocess.SubprocessError) as err:
                    record["failed"] = str(err)[-800:]
                    print(f"{key}: failed: {record['failed']}", flush=True)
                runs[key] = record
                runs_file.write_text(json.dumps(runs, indent=1, sort_keys=True))
                render(runs, page, command)
            if args.profile:
                for model in PROFILED:
                    key = f"profile/{ds}/{model}"
                    if key in runs and not args.force:
                        continue
                    print(f"{key}: profiling", flush=True)
                    try:
                        runs[key] = run_profile(config(ds, model, args, work), args.profile_steps, args.timeout)
                    except (RuntimeError, subprocess.SubprocessError) as err:
                        print(f"{key}: failed: {str(err)[-800:]}", flush=True)
                        continue
                    runs_file.write_text(json.dumps(runs, indent=1, sort_keys=True))
    render(runs, page, command)
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
