"""docs/results/peer.md and its plots, from docs/results/peer-runs.json (bench/peer.py)."""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, also when loaded by path
import cluster_model as cm  # noqa: E402
from netns import PRESETS, rate_bytes_per_s  # noqa: E402

SYSTEMS = ("grappa", "grappa-star", "distdgl", "full")
# "grappa-star": the previous exchange (every step's gradients up to the aggregator and the
# parameters back), measured before the all-reduce and kept as its own column
GRAPPAS = ("grappa", "grappa-star")
LABEL = {"grappa": "Grappa", "grappa-star": "Grappa, previous star exchange", "distdgl": "DistDGL",
         "distdgl-random": "DistDGL, random partitions", "full": "full-comm (full-graph)"}
# DistDGL ÷ Grappa to reach, measured (issue 25): (dataset, P, link) -> ratio
TARGETS = {("coauthor-physics", 8, "1gbit"): 2.5, ("rmat", 8, "1gbit"): 2.0}
SCALARS = 5  # float32 scalars in a step message (runtime/exchange.py)
SHORT = {"coauthor-physics": "Physics", "rmat": "RMAT-17", "rmat-20": "RMAT-20"}
PROJECT_TO = (8, 16, 32, 64)
PROJECT_RATES = ("1gbit", "10gbit")
SYSTEM_COLOUR = {"grappa": "tab:blue", "grappa-star": "tab:orange", "distdgl": "tab:green"}
LATENCY = 1e-4  # seconds per round trip, for the latency column of the projections
MB = 1e6


def groups(runs: dict, experiment: str) -> dict:
    out = defaultdict(list)
    for key, rec in runs.items():
        exp, ds, p, layers, system, preset, _ = key.split("|")
        if exp == experiment and "error" not in rec:
            out[(ds, int(p), int(layers), system, preset)].append(rec)
    return out


def errors(runs: dict) -> list[str]:
    return [f"`{k}`: {r['error'].strip().splitlines()[-1][:200]}" for k, r in sorted(runs.items()) if "error" in r]


def med(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec=".2f", none="–") -> str:
    return none if v is None else format(v, spec)


def times(v) -> str:
    """A ratio as `2.40x`; a missing one (no run to compare with) as a bare dash."""
    return "–" if v is None else f"{v:.2f}x"


def in_g(v) -> str:
    """Bytes in units of G (one step message), or a bare dash."""
    return "–" if v is None else f"{v:.2f} G"


def steady_epochs(rec: dict) -> list[dict]:
    return rec["epochs"][1:] or rec["epochs"]


def median_job(recs: list[dict]) -> dict:
    return sorted(recs, key=lambda r: r["epoch_seconds"])[len(recs) // 2]


def median_epoch(rec: dict) -> dict:
    eps = sorted(steady_epochs(rec), key=lambda e: e["train_seconds"])
    return eps[len(eps) // 2]


def train_nodes(runs: dict, dataset: str) -> Optional[int]:
    for key, rec in runs.items():
        if key.split("|")[1] == dataset and rec.get("train_nodes"):
            return rec["train_nodes"]
    return None


def validation(g: dict) -> list[dict]:
    """Model at the measured link rate, no latency (the links have none), against the measured
    epoch, per job: the median over its steady epochs of model / measured - 1."""
    rows = []
    for (ds, p, layers, system, preset), recs in sorted(g.items()):
        if system not in cm.DUPLEX or PRESETS.get(preset) is None:
            continue
        rate = rate_bytes_per_s(PRESETS[preset])
        errs, model, measured = [], [], []
        for rec in recs:
            per = [(cm.modelled_epoch(e["machines"], system, rate, e["steps"] or 1, layers), e["train_seconds"])
                   for e in steady_epochs(rec)]
            errs.append(med(m / t - 1 for m, t in per))
            model.append(med(m for m, _ in per))
            measured.append(med(t for _, t in per))
        rows.append({"dataset": ds, "p": p, "layers": layers, "system": system, "preset": preset,
                     "model": med(model), "measured": med(measured), "error": med(errs), "jobs": len(recs)})
    return rows


def projections(g: dict, runs: dict) -> list[dict]:
    """From each (dataset, layers)'s largest measured P at 1 Gbit/s: both systems at PROJECT_TO."""
    rows = []
    keys = {(ds, layers) for (ds, _, layers, s, preset) in g if preset == "1gbit" and s != "full"}
    for ds, layers in sorted(keys):
        n_train = train_nodes(runs, ds)
        ps = [p for (d, p, l_, s, pr) in g if d == ds and l_ == layers and pr == "1gbit"
              and (d, p, l_, "distdgl", pr) in g and any((d, p, l_, x, pr) in g for x in GRAPPAS)]
        if not ps or not n_train:
            continue
        base = max(ps)
        profs = {}
        for system in GRAPPAS + ("distdgl",):
            if (ds, base, layers, system, "1gbit") not in g:
                continue
            rec = median_job(g[(ds, base, layers, system, "1gbit")])
            ep = median_epoch(rec)
            profs[system] = (cm.profile(system, ep["machines"], ep["steps"] or 1), rec["batch_size"])
        for p in PROJECT_TO:
            for preset in PROJECT_RATES:
                rate = rate_bytes_per_s(PRESETS[preset])
                row = {"dataset": ds, "layers": layers, "from_p": base, "p": p, "preset": preset}
                for system, (prof, batch) in profs.items():
                    machines, steps = cm.project(prof, p, n_train, batch)
                    row[system] = cm.modelled_epoch(machines, system, rate, steps, layers)
                    row[system + "_lat"] = cm.modelled_epoch(machines, system, rate, steps, layers, LATENCY)
                for system in GRAPPAS:
                    if system in row:
                        row[system + "_ratio"] = row["distdgl"] / row[system]
                        row[system + "_ratio_lat"] = row["distdgl_lat"] / row[system + "_lat"]
                rows.append(row)
    return rows


def accuracy_rows(runs: dict) -> list[dict]:
    g = groups(runs, "accuracy")
    rows = []
    for ds, p, layers, preset, variant in sorted({(k[0], k[1], k[2], k[4], x) for k in g for x in GRAPPAS}):
        found = {s: g.get((ds, p, layers, s, preset), [None])[0] for s in (variant, "distdgl")}
        if not all(found.values()):
            continue
        recs = {"grappa": found[variant], "distdgl": found["distdgl"]}
        totals = {s: r["curve"][-1]["cum_seconds"] for s, r in recs.items()}
        budget = min(totals.values())
        row = {"dataset": ds, "p": p, "layers": layers, "preset": preset, "budget": budget,
               "epochs": recs["grappa"]["epochs_run"], "variant": variant}
        for s, r in recs.items():
            row[s + "_epochs_acc"] = best_val_test(r["curve"])
            row[s + "_budget_acc"] = best_val_test(r["curve"], budget=budget)
            row[s + "_budget_epochs"] = sum(1 for c in r["curve"] if c["cum_seconds"] <= budget + 1e-9)
            row[s + "_total"] = totals[s]
            row[s + "_epoch_s"] = r["epoch_seconds"]
        rows.append(row)
    return rows


def best_val_test(curve: list[dict], budget: Optional[float] = None) -> Optional[float]:
    pts = [c for c in curve if c.get("val_acc") is not None and (budget is None or c["cum_seconds"] <= budget + 1e-9)]
    return max(pts, key=lambda c: c["val_acc"])["test_acc"] if pts else None


def timing_rows(g: dict) -> list[dict]:
    rows = []
    for (ds, p, layers, system, preset), recs in sorted(g.items()):
        ours = med(r.get("ours_worker_bytes_per_epoch") for r in recs)
        rows.append({"dataset": ds, "p": p, "layers": layers, "system": system, "preset": preset,
                     "jobs": len(recs), "epoch": med(r["epoch_seconds"] for r in recs),
                     "spread": (min(r["epoch_seconds"] for r in recs), max(r["epoch_seconds"] for r in recs)),
                     "kernel": med(r["kernel_bytes_per_epoch"] for r in recs), "ours": ours,
                     "acc": med(r.get("test_acc") for r in recs),
                     "cpu": med(max(m["cpu_seconds"] for m in median_epoch(r)["machines"]) for r in recs),
                     "steps": recs[0]["epochs"][-1].get("steps"),
                     "link_per_g": med(busiest_link_per_g(r) for r in recs) if system in GRAPPAS else None})
    return rows


def busiest_link_per_g(rec: dict) -> Optional[float]:
    """The busiest machine's sent + received per step (kernel counters, median epoch) in units of
    G, one step message (4 B x (parameters + scalars); SAGE has no float buffers)."""
    if not rec.get("parameters"):
        return None
    ep = median_epoch(rec)
    busiest = max(m["sent_bytes"] + m["received_bytes"] for m in ep["machines"])
    return busiest / max(ep["steps"] or 1, 1) / (4 * (rec["parameters"] + SCALARS))


def ratio_rows(rows: list[dict]) -> list[dict]:
    by = {(r["dataset"], r["p"], r["layers"], r["system"], r["preset"]): r for r in rows}
    out = []
    for (ds, p, layers, system, preset), d in sorted(by.items()):
        if system != "distdgl":
            continue
        g, star = by.get((ds, p, layers, "grappa", preset)), by.get((ds, p, layers, "grappa-star", preset))
        if g or star:
            out.append({"dataset": ds, "p": p, "layers": layers, "preset": preset, "grappa": g, "star": star,
                        "distdgl": d, "full": by.get((ds, p, layers, "full", preset)),
                        "ratio": d["epoch"] / g["epoch"] if g else None,
                        "star_ratio": d["epoch"] / star["epoch"] if star else None,
                        "target": TARGETS.get((ds, p, preset))})
    return out


def _save(fig, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def plot(rows: list[dict], proj: list[dict], acc_runs: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    cells = [r for r in rows if r["system"] in SYSTEMS]
    if cells:
        labels = sorted({(r["dataset"], r["p"], r["preset"]) for r in cells})
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        for ax, field, title in ((axes[0], "epoch", "epoch time, s (median of jobs)"),
                                 (axes[1], "kernel", "busiest machine's bytes per epoch, MB (kernel)")):
            width = 0.8 / len(SYSTEMS)
            for i, system in enumerate(SYSTEMS):
                vals = []
                for lab in labels:
                    r = next((c for c in cells if (c["dataset"], c["p"], c["preset"]) == lab
                              and c["system"] == system), None)
                    v = None if r is None else r[field]
                    vals.append(0 if v is None else (v / MB if field == "kernel" else v))
                ax.bar([x + (i - (len(SYSTEMS) - 1) / 2) * width for x in range(len(labels))], vals, width,
                       label=LABEL[system])
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels([f"{SHORT.get(d, d)}\nP={p}\n{pr.replace('bit', '')}" for d, p, pr in labels],
                               fontsize=7)
            ax.set_yscale("log")
            ax.set_title(title, fontsize=10)
            ax.legend(fontsize=8)
        written.append(_save(fig, out, "peer-time-bytes.png"))
    if proj:
        pairs = sorted({(r["dataset"], r["layers"]) for r in proj})
        fig, axes = plt.subplots(1, len(pairs), figsize=(5.5 * len(pairs), 4), squeeze=False)
        for ax, (ds, layers) in zip(axes[0], pairs):
            for preset, style in zip(PROJECT_RATES, ("-", "--")):
                pts = [r for r in proj if (r["dataset"], r["layers"], r["preset"]) == (ds, layers, preset)]
                for system in GRAPPAS + ("distdgl",):
                    if pts and system in pts[0]:  # a system keeps its colour in every panel
                        ax.plot([r["p"] for r in pts], [r[system] for r in pts], style, marker="o",
                                color=SYSTEM_COLOUR[system], label=f"{LABEL[system]} {preset}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("machines (P)")
            ax.set_ylabel("projected epoch time, s")
            ax.set_title(f"PROJECTION (cluster-time model): {ds}, {layers} layers", fontsize=9)
            ax.legend(fontsize=7)
        written.append(_save(fig, out, "peer-projection.png"))
    if acc_runs:
        keys = sorted(acc_runs)
        datasets = sorted({k[0] for k in keys})
        cols = max(sum(1 for k in keys if k[0] == d) for d in datasets)
        fig, axes = plt.subplots(len(datasets), cols, figsize=(4.2 * cols, 3.4 * len(datasets)), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        slots = [axes[datasets.index(d)][[k for k in keys if k[0] == d].index((d, p, la))] for d, p, la in keys]
        for ax, key in zip(slots, keys):
            ax.set_visible(True)
            for system, rec in sorted(acc_runs[key].items()):
                pts = [(c["cum_seconds"], c["test_acc"]) for c in rec["curve"] if c.get("test_acc") is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=LABEL[system])
            ds, p, layers = key
            ax.set_title(f"{ds}, P={p}, {layers} layers", fontsize=9)
            ax.set_xlabel("training time, s (1 Gbit/s)")
            ax.set_ylabel("test accuracy")
            ax.legend(fontsize=7)
        written.append(_save(fig, out, "peer-accuracy.png"))
    return written


def profile_section(path: Path) -> list[str]:
    """The worker step's CPU by phase, previous and current design (bench/profile_step.py)."""
    if not path.exists():
        return []
    import json
    prof = json.loads(path.read_text())
    prev, cur = prof["previous"], prof["current"]
    md = ["", "## Where a worker's step goes (profiled)", "",
          f"One Grappa worker of the RMAT-17 job at P = {cur['partitions']}, {cur['layers']} layers, "
          f"{cur['seeds_per_step']:.0f} seeds per step on {cur['local_nodes']:,} local nodes, one thread, "
          f"{cur['steps']} steps; CPU time per step by phase (`time.process_time`), both designs in one "
          f"run (`{prof['command']}`). The step's all-reduce is not in it (peer.md's probe measures the "
          "whole machine). *previous*: torch's dropout, SAGE projecting every source row before aggregating, "
          "a PSS reading after every step; *current*: `models/dropout.py` (16 random bits a mask entry), "
          "SAGE aggregating first where that is cheaper, PSS read in the background every 5 s.", "",
          "| phase | previous CPU ms | current CPU ms |", "|---|---|---|"]
    for phase in prev["phases_per_step"]:
        md.append(f"| {phase} | {prev['phases_per_step'][phase] * 1e3:.1f} | {cur['phases_per_step'][phase] * 1e3:.1f} |")
    md.append(f"| **step** | **{prev['cpu_per_step'] * 1e3:.1f}** | **{cur['cpu_per_step'] * 1e3:.1f}** |")
    md += ["", "Top functions by own CPU time (cProfile on the CPU clock, current design, round set-up included):", "",
           "| function | calls | own s | cumulative s |", "|---|---|---|---|"]
    for f in cur["top_functions"][:10]:
        md.append(f"| `{f['function']}` | {f['calls']} | {f['own_s']:.3f} | {f['cum_s']:.3f} |")
    return md


def render(runs: dict, out: Path, notes: str = "") -> Path:
    g = groups(runs, "timing")
    rows = timing_rows(g)
    ratios = ratio_rows(rows)
    val = validation(g)
    proj = projections(g, runs)
    acc = accuracy_rows(runs)
    acc_runs = defaultdict(dict)
    for (ds, p, layers, system, preset), recs in groups(runs, "accuracy").items():
        acc_runs[(ds, p, layers)][system] = recs[0]
    plots = plot(rows, proj, acc_runs, out)
    md = ["# Peer benchmark: Grappa vs DistDGL vs our full-communication mode", "",
          "Generated by `bench/render_peer.py` from `peer-runs.json`; the commands are in "
          "`make bench-peer`. Every figure below is measured on this machine (2 cores, every machine a "
          "network namespace with tbf-shaped links), except the rows and plots labelled **PROJECTION**, "
          "which come from the cluster-time model (`bench/cluster_model.py`).", ""]
    if notes:
        md += [notes.strip(), ""]
    md += ["## Epoch time against the target (measured)", "",
           "Grappa: the all-reduce exchange; *previous*: the star exchange it replaced, measured by the "
           "same harness on the previous design (kept as measured). Busiest link: the busiest machine's "
           "sent + received bytes per step by the kernel's counters, in units of G (one step message): "
           "the star put 2 x P x G on the aggregator's link, the all-reduce at most 4 x G on any. "
           "Targets (issue 25): DistDGL ÷ Grappa ≥ 2.5x on Physics and ≥ 2.0x on RMAT-17 at P = 8, 1 Gbit/s.", "",
           "| dataset | P | link | layers | Grappa s | previous s | DistDGL s | full-comm s | DistDGL ÷ Grappa | "
           "DistDGL ÷ previous | busiest link / step: Grappa, previous | jobs (G/prev/D) | target |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ratios:
        f, g, star = r["full"], r["grappa"] or {}, r["star"] or {}
        target = "–" if r["target"] is None else (
            f"≥ {r['target']:.1f}x: " + ("met" if r["ratio"] and r["ratio"] >= r["target"] else "missed"))
        md.append(f"| {r['dataset']} | {r['p']} | {r['preset']} | {r['layers']} | {fmt(g.get('epoch'))} | "
                  f"{fmt(star.get('epoch'))} | {fmt(r['distdgl']['epoch'])} | {fmt(f['epoch']) if f else '–'} | "
                  f"**{times(r['ratio'])}** | {times(r['star_ratio'])} | "
                  f"{in_g(g.get('link_per_g'))}, {in_g(star.get('link_per_g'))} | "
                  f"{g.get('jobs', 0)}/{star.get('jobs', 0)}/{r['distdgl']['jobs']} | {target} |")
    md += ["", "## Every cell (measured)", "",
           "Bytes: the busiest machine's link, sent + received, per epoch, by the kernel's counters "
           "(Grappa's aggregator is a machine); `ours`: Grappa's exact per-worker counters (payload only). "
           "CPU: the busiest machine's CPU seconds per epoch. Test accuracy after the epochs run (best "
           "validation epoch), one number per cell: the accuracy section below is the comparison.", "",
           "| dataset | P | link | layers | system | jobs | epoch s (min-max) | steps | kernel MB/epoch | ours MB/epoch | CPU s | test acc |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['dataset']} | {r['p']} | {r['preset']} | {r['layers']} | {LABEL[r['system']]} | {r['jobs']} | "
                  f"{fmt(r['epoch'])} ({fmt(r['spread'][0])}-{fmt(r['spread'][1])}) | {r['steps']} | "
                  f"{fmt(r['kernel'] / MB, '.1f')} | {fmt(None if r['ours'] is None else r['ours'] / MB, '.2f')} | "
                  f"{fmt(r['cpu'])} | {fmt(r['acc'], '.3f')} |")
    if acc:
        md += ["", "## Accuracy: same epochs, same wall-clock (measured)", "",
               "Test accuracy at the best validation epoch, both systems evaluated by exact full-neighbour "
               "inference. *Same wall-clock*: the epochs each system finished within the faster system's "
               "total training time. One job per row; its epoch times (median after the first) are a "
               "second, single-job reading of epoch time by depth at 1 Gbit/s.", "",
               "| dataset | P | layers | exchange | epochs | Grappa (same epochs) | DistDGL (same epochs) | budget s | "
               "Grappa (budget) | DistDGL (budget) | epochs in budget (G/D) | epoch s (G/D) | DistDGL ÷ Grappa |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in acc:
            exchange = "all-reduce" if r["variant"] == "grappa" else "previous star"
            md.append(f"| {r['dataset']} | {r['p']} | {r['layers']} | {exchange} | {r['epochs']} | "
                      f"{fmt(r['grappa_epochs_acc'], '.3f')} | {fmt(r['distdgl_epochs_acc'], '.3f')} | "
                      f"{fmt(r['budget'], '.1f')} | {fmt(r['grappa_budget_acc'], '.3f')} | "
                      f"{fmt(r['distdgl_budget_acc'], '.3f')} | {r['grappa_budget_epochs']}/{r['distdgl_budget_epochs']} | "
                      f"{fmt(r['grappa_epoch_s'])}/{fmt(r['distdgl_epoch_s'])} | "
                      f"{r['distdgl_epoch_s'] / r['grappa_epoch_s']:.2f}x |")
    md += ["", "## Cluster-time model: validation (measured vs model)", "",
           "Model at the measured link rate and no latency (the links add none) against the measured epoch; "
           "error = model ÷ measured − 1, median over a job's epochs after the first, then over jobs. "
           "At P = 2 the machine is least oversubscribed; above it the measured time includes waiting for "
           "the 2 shared cores, which the model leaves out by design.", "",
           "| dataset | P | link | layers | system | jobs | model s | measured s | error |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in val:
        md.append(f"| {r['dataset']} | {r['p']} | {r['preset']} | {r['layers']} | {LABEL[r['system']]} | {r['jobs']} | "
                  f"{fmt(r['model'])} | {fmt(r['measured'])} | {fmt(r['error'] * 100, '+.0f')}% |")
    if proj:
        md += ["", "## PROJECTION: epoch time on P machines", "",
               "**These are projections of the cluster-time model, not measurements**: per-step figures of "
               "the largest measured P at 1 Gbit/s, scaled as `bench/cluster_model.py` says. The last "
               f"columns add {LATENCY * 1e3:.1f} ms per round trip.", "",
               "| dataset | layers | from P | P | link | Grappa s | previous s | DistDGL s | DistDGL ÷ Grappa | "
               "DistDGL ÷ previous | with latency: Grappa s | DistDGL s | ratio |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in proj:
            md.append(f"| {r['dataset']} | {r['layers']} | {r['from_p']} | {r['p']} | {r['preset']} | "
                      f"{fmt(r.get('grappa'), '.3f')} | {fmt(r.get('grappa-star'), '.3f')} | "
                      f"{fmt(r['distdgl'], '.3f')} | {times(r.get('grappa_ratio'))} | "
                      f"{times(r.get('grappa-star_ratio'))} | {fmt(r.get('grappa_lat'), '.3f')} | "
                      f"{fmt(r['distdgl_lat'], '.3f')} | {times(r.get('grappa_ratio_lat'))} |")
    md += profile_section(out / "profile-step.json")
    failed = errors(runs)
    if failed:
        md += ["", "## Runs that failed", ""] + [f"- {e}" for e in failed]
    md += [""] + [f"![{p}]({p})" for p in plots] + [""]
    path = out / "peer.md"
    path.write_text("\n".join(md))
    return path
