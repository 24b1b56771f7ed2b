"""docs/results/benchmarks.md and its plots, from network-runs.json (written by bench/network.py)."""
from __future__ import annotations

import os
import platform
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PRESET_ORDER = ["10gbit", "1gbit", "100mbit", "unshaped"]
MB = 1e6


def parse(runs: dict, strategy_runs: Optional[dict] = None) -> dict:
    """{(experiment, dataset, P, layers, strategy, preset): [run, ...]} over repeats. Grappa and
    full runs of bench/strategies.py (per-epoch curves) feed the accuracy section."""
    out = defaultdict(list)
    for key, run in (strategy_runs or {}).items():
        dataset, p, layers, label, preset = key.split("|")
        if label in ("grappa", "full"):
            out[("accuracy", dataset, int(p), int(layers), label, preset)].append(run)
    for key, run in runs.items():
        if "error" in run:
            continue  # listed by failures()
        parts = key.split("|")
        exp = parts.pop(0) if parts[0] == "scaling" else "grid"
        dataset, p, layers, strategy, preset, _rep = parts
        out[(exp, dataset, int(p), int(layers), strategy, preset)].append(run)
    return out


def med(runs: list[dict], field: str) -> float:
    return statistics.median(r[field] for r in runs)


def fmt_bytes(b: float) -> str:
    return f"{b / MB:,.2f} MB" if b < 1e9 else f"{b / 1e9:,.2f} GB"


def grid_table(g: dict, dataset: str) -> list[str]:
    lines = ["| P | layers | link | runs | bytes/worker/epoch Grappa | Grappa ÷ floor | full | full ÷ Grappa "
             "| epoch s Grappa | full | single | full ÷ Grappa | Grappa reducer share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(k[2], k[3], k[5]) for k in g if k[0] == "grid" and k[1] == dataset and k[4] == "grappa"},
                  key=lambda t: (t[0], t[1], PRESET_ORDER.index(t[2])))
    for p, layers, preset in keys:
        gr = g.get(("grid", dataset, p, layers, "grappa", preset))
        fu = g.get(("grid", dataset, p, layers, "full", preset))
        si = g.get(("grid", dataset, 1, layers, "single", "none"))
        if not gr:
            continue
        floor = 8 * gr[0]["parameters"] + 16  # full-graph: one step per epoch, GCN has no buffers
        row = [str(p), str(layers), preset, f"{len(gr)} / {len(fu or [])}",
               fmt_bytes(med(gr, "bytes_per_worker_epoch")),
               f"{med(gr, 'bytes_per_worker_epoch') / floor:.2f}x"]
        if fu:
            row += [fmt_bytes(med(fu, "bytes_per_worker_epoch")),
                    f"{med(fu, 'bytes_per_worker_epoch') / med(gr, 'bytes_per_worker_epoch'):,.0f}x"]
        else:
            row += ["-", "-"]
        row += [f"{med(gr, 'epoch_seconds'):.2f}", f"{med(fu, 'epoch_seconds'):.2f}" if fu else "-",
                f"{med(si, 'epoch_seconds'):.2f}" if si else "-",
                f"{med(fu, 'epoch_seconds') / med(gr, 'epoch_seconds'):.1f}x" if fu else "-",
                f"{100 * med(gr, 'reducer_share'):.2f}%"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def plot_bytes(g: dict, dataset: str, path: Path) -> bool:
    combos = sorted({(k[2], k[3]) for k in g if k[0] == "grid" and k[1] == dataset})
    if not combos:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for strategy, marker in (("grappa", "o"), ("full", "s")):
        for p in sorted({c[0] for c in combos}):
            xs, ys = [], []
            for layers in sorted({c[1] for c in combos if c[0] == p}):
                runs = [r for k, rs in g.items() for r in rs if k[:5] == ("grid", dataset, p, layers, strategy)]
                if runs:
                    xs.append(layers)
                    ys.append(statistics.median(r["bytes_per_worker_epoch"] for r in runs))
            if xs:
                ax.plot(xs, ys, marker=marker, label=f"{strategy} P={p}",
                        linestyle="-" if strategy == "full" else "--")
    floors = {}
    for k, rs in g.items():
        if k[0] == "grid" and k[1] == dataset and k[4] == "grappa":
            floors[k[3]] = 8 * rs[0]["parameters"] + 16
    if floors:
        xs = sorted(floors)
        ax.plot(xs, [floors[x] for x in xs], color="black", linewidth=3, alpha=0.3,
                label="floor: 2 x 4 B x |params| (+16 B)")
    ax.set_yscale("log")
    ax.set_xticks(sorted({c[1] for c in combos}))
    ax.set_xlabel("layers")
    ax.set_ylabel("training bytes per worker per epoch")
    ax.set_title(f"{dataset}: training traffic (exact counters)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_time(g: dict, dataset: str, path: Path) -> bool:
    keys = sorted({(k[2], k[3], k[5]) for k in g if k[0] == "grid" and k[1] == dataset and k[4] != "single"})
    if not keys:
        return False
    presets = [p for p in PRESET_ORDER if any(k[2] == p for k in keys)]
    configs = sorted({(k[0], k[1]) for k in keys})
    fig, axes = plt.subplots(1, len(presets), figsize=(4.5 * len(presets), 4), squeeze=False)
    for ax, preset in zip(axes[0], presets):
        labels, gr, fu = [], [], []
        for p, layers in configs:
            a = g.get(("grid", dataset, p, layers, "grappa", preset))
            b = g.get(("grid", dataset, p, layers, "full", preset))
            if a and b:
                labels.append(f"P{p} L{layers}")
                gr.append(med(a, "epoch_seconds"))
                fu.append(med(b, "epoch_seconds"))
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], gr, 0.4, label="grappa")
        ax.bar([i + 0.2 for i in x], fu, 0.4, label="full")
        ax.set_xticks(list(x), labels, rotation=60, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"{dataset}, {preset}")
        ax.set_ylabel("training seconds per epoch (median)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def scaling_section(g: dict, out: Path) -> list[str]:
    keys = sorted(k for k in g if k[0] == "scaling")
    if not keys:
        return []
    lines = ["## Scaling: RMAT at P = 8", "",
             "| graph | layers | link | strategy | peak RSS per worker | epoch s | bytes/worker/epoch |",
             "|---|---|---|---|---|---|---|"]
    series = defaultdict(list)
    for k in keys:
        runs = g[k]
        scale = int(k[1].split("-")[1])
        series[k[4]].append((scale, med(runs, "peak_rss_bytes") / 2**30, med(runs, "epoch_seconds")))
        lines.append(f"| 2^{scale} nodes, 2^{scale + 4} edges | {k[3]} | {k[5]} | {k[4]} | "
                     f"{med(runs, 'peak_rss_bytes') / 2**30:.2f} GiB | {med(runs, 'epoch_seconds'):.2f} | "
                     f"{fmt_bytes(med(runs, 'bytes_per_worker_epoch'))} |")
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    for strategy, pts in series.items():
        pts.sort()
        a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=strategy)
        b.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=strategy)
    a.set_xlabel("RMAT scale (log2 nodes)")
    a.set_ylabel("peak RSS per worker (GiB)")
    b.set_xlabel("RMAT scale (log2 nodes)")
    b.set_ylabel("training seconds per epoch")
    b.set_yscale("log")
    a.legend()
    fig.tight_layout()
    fig.savefig(out / "bench-scaling.png", dpi=110)
    plt.close(fig)
    return lines + ["", "![scaling](bench-scaling.png)", ""]


def accuracy_section(g: dict, out: Path) -> list[str]:
    keys = sorted(k for k in g if k[0] == "accuracy")
    if not keys:
        return []
    dataset, p = keys[0][1], keys[0][2]
    presets = [pr for pr in PRESET_ORDER if any(k[5] == pr for k in keys)]
    layer_list = sorted({k[3] for k in keys})
    lines = [f"## Accuracy: fixed epochs and fixed wall-clock budget ({dataset}, P = {p})", "",
             "Test accuracy at the best validation epoch. Budget = the training time Grappa needs for "
             "all its epochs; the baseline gets the same seconds on the same link. Runs of "
             "`bench/strategies.py` (`strategy-runs.json`).", "",
             "| link | layers | epochs | Grappa test | full test (same epochs) | budget s | full test within budget "
             "| full epochs within budget |", "|---|---|---|---|---|---|---|---|"]
    fig, axes = plt.subplots(len(presets), len(layer_list), figsize=(4.2 * len(layer_list), 3.4 * len(presets)),
                             squeeze=False)
    for row, preset in zip(axes, presets):
        for ax, layers in zip(row, layer_list):
            gr = g.get(("accuracy", dataset, p, layers, "grappa", preset))
            fu = g.get(("accuracy", dataset, p, layers, "full", preset))
            if not (gr or fu):
                ax.set_axis_off()  # not measured on this link
                continue
            for name, runs in (("grappa", gr), ("full", fu)):
                if runs:
                    ax.plot(runs[0]["cum_seconds"], runs[0]["test_acc_curve"], label=name)
            ax.set_title(f"{layers} layers, {preset}")
            ax.set_xlabel("training seconds")
            ax.set_ylabel("test accuracy")
            ax.legend(fontsize=7)
            if gr and fu:
                a, b = gr[0], fu[0]
                budget = a["cum_seconds"][-1]
                within = [i for i, t in enumerate(b["cum_seconds"]) if t <= budget]
                lines.append(f"| {preset} | {layers} | {len(a['cum_seconds'])} | {100 * best_test(a, None):.1f} | "
                             f"{100 * best_test(b, None):.1f} | {budget:.0f} | "
                             f"{100 * best_test(b, within[-1] + 1) if within else float('nan'):.1f} | "
                             f"{len(within)} |")
    fig.tight_layout()
    fig.savefig(out / "bench-accuracy.png", dpi=110)
    plt.close(fig)
    return lines + ["", "![accuracy vs time](bench-accuracy.png)", ""]


def best_test(curve: dict, upto) -> float:
    vals, tests = curve["val_acc_curve"][:upto], curve["test_acc_curve"][:upto]
    i = max(range(len(vals)), key=lambda j: vals[j])
    return tests[i]


def failures(runs: dict) -> list[str]:
    bad = [f"- `{k}`: {r['error']}" for k, r in sorted(runs.items()) if "error" in r]
    return ["## Runs that failed", ""] + bad + [""] if bad else []


def machine() -> str:
    """CPU model, cores, memory and kernel of the machine rendering (= measuring) the report."""
    model, mem = platform.processor() or platform.machine(), 0.0
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
        mem = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal"))) / 2**20
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU cores ({model}), {mem:.0f} GiB, Linux {platform.release()}"


def render(runs: dict, out: Path, notes: str = "", strategy_runs: Optional[dict] = None) -> Path:
    g = parse(runs, strategy_runs)
    lines = ["# Benchmarks: gradient-only (Grappa) vs full communication, on throttled links", "",
             f"Machine: {machine()}, no GPU; every rank "
             "in its own network namespace, veth + bridge, `tbf` rate shaping on both ends of each link "
             "(no added latency: `netem` is unavailable here). Raw numbers: `network-runs.json`.", ""]
    if notes:
        lines += [notes, ""]
    for dataset in sorted({k[1] for k in g if k[0] == "grid"}):
        lines += [f"## {dataset}", ""] + grid_table(g, dataset) + [""]
        if plot_bytes(g, dataset, out / f"bench-bytes-{dataset}.png"):
            lines += [f"![bytes]({f'bench-bytes-{dataset}.png'})", ""]
        if plot_time(g, dataset, out / f"bench-time-{dataset}.png"):
            lines += [f"![epoch time]({f'bench-time-{dataset}.png'})", ""]
    lines += scaling_section(g, out)
    lines += accuracy_section(g, out)
    lines += failures(runs)
    path = out / "benchmarks.md"
    path.write_text("\n".join(lines) + "\n")
    return path
