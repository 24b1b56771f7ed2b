"""docs/results/peer.md and its plots, from docs/results/peer-runs.json (bench/peer.py).

One median for every figure: a job's value is the median (statistics.median: the mean of the two
middle values when there are two) of its per-epoch values over the epochs after the first, and a
cell's is the median of its jobs' values (`job_median`). The notes (bench/peer-notes.md) hold the
prose; every figure in them that comes from the runs is a placeholder `{{name args}}` that this
script computes (`NOTE_FIGURES`), so none is typed.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
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
SHORT = {"coauthor-physics": "Physics", "coauthor-physics-sparse": "Physics (sparse store)",
         "coauthor-physics-auto": "Physics (default store)",
         "coauthor-physics-sparse-as-read": "Physics (sparse store, halo rows as read)",
         "coauthor-physics-sparse-reach": "Physics (sparse store, reachable halo rows ahead)",
         "rmat": "RMAT-17", "rmat-20": "RMAT-20"}
PROJECT_TO = (8, 16, 32, 64)
PROJECT_RATES = ("1gbit", "10gbit")
SYSTEM_COLOUR = {"grappa": "tab:blue", "grappa-star": "tab:orange", "distdgl": "tab:green"}
LATENCY = 1e-4  # seconds per round trip, for the latency column of the projections
MB = 1e6
# A run counts only if the machine was quiet before it: 1-minute load average at most this
# (bench/peer.py waits for it and refuses the cell otherwise; here, a run recorded above it is left
# out of its cell and listed). Runs from before the load was recorded before a run count, flagged.
QUIET_LOAD = 1.0


def busy(rec: dict) -> bool:
    before = rec.get("load_before")
    return before is not None and before[0] > (rec.get("quiet_limit") or QUIET_LOAD)


def groups(runs: dict, experiment: str) -> dict:
    out = defaultdict(list)
    for key, rec in runs.items():
        exp, ds, p, layers, system, preset, _ = key.split("|")
        if exp == experiment and "error" not in rec and not busy(rec):
            out[(ds, int(p), int(layers), system, preset)].append(rec)
    return out


def refused(runs: dict) -> list[str]:
    return [f"`{k}`: 1-minute load average {r['load_before'][0]:.2f} before the run"
            for k, r in sorted(runs.items()) if "error" not in r and busy(r)]


def errors(runs: dict) -> list[str]:
    return [f"`{k}`: {r['error'].strip().splitlines()[-1][:200]}" for k, r in sorted(runs.items()) if "error" in r]


def med(values) -> Optional[float]:
    """The one median of this page (statistics.median), of the values that exist."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def job_median(recs: list[dict], per_epoch) -> Optional[float]:
    """A cell's figure: over its jobs, the median of each job's median over its steady epochs of
    `per_epoch(epoch, rec)`."""
    return med(med(per_epoch(e, r) for e in steady_epochs(r)) for r in recs)


def worker_machines(rec: dict, epoch: dict) -> list[dict]:
    """The machines that train: all of DistDGL's; Grappa's but its aggregator (machine 0)."""
    return epoch["machines"] if rec["system"].startswith("distdgl") else epoch["machines"][1:]


def cpu_per_step(e: dict, rec: dict) -> float:
    """The busiest training machine's CPU seconds per step in epoch `e`."""
    return max(m["cpu_seconds"] for m in worker_machines(rec, e)) / max(e["steps"] or 1, 1)


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


def median_profile(recs: list[dict], system: str, **kw) -> cm.StepProfile:
    """The step profile of a cell: each per-step figure the cell's median (job_median)."""
    per = [[cm.profile(system, e["machines"], e["steps"] or 1, **kw) for e in steady_epochs(r)] for r in recs]
    first = per[0][0]
    figures = {f.name: med(med(getattr(p, f.name) for p in job) for job in per)
               for f in dataclasses.fields(cm.StepProfile) if isinstance(getattr(first, f.name), float)}
    return dataclasses.replace(first, **figures)


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
    """From each (dataset, layers)'s largest measured P at 1 Gbit/s: both systems at PROJECT_TO.
    DistDGL's fixed per-step work (the all-reduce and the optimizer of the same model) is the
    ring's aggregator's, measured in the same cell; machine-seconds charge Grappa P + 1 machines."""
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
        for system in GRAPPAS:
            if (ds, base, layers, system, "1gbit") in g:
                recs = g[(ds, base, layers, system, "1gbit")]
                profs[system] = (median_profile(recs, system), recs[0]["batch_size"])
        ring = profs.get("grappa", (None,))[0]
        params = next((r.get("parameters") for s_ in GRAPPAS for r in g.get((ds, base, layers, s_, "1gbit"), [])
                       if r.get("parameters")), None)
        recs = g[(ds, base, layers, "distdgl", "1gbit")]
        profs["distdgl"] = (median_profile(recs, "distdgl", fixed_cpu=ring.fixed_cpu if ring else None,
                                           message_bytes=4.0 * params if params else 0.0), recs[0]["batch_size"])
        for p in PROJECT_TO:
            for preset in PROJECT_RATES:
                rate = rate_bytes_per_s(PRESETS[preset])
                row = {"dataset": ds, "layers": layers, "from_p": base, "p": p, "preset": preset,
                       "fixed_cpu": ring.fixed_cpu if ring else None}
                for system, (prof, batch) in profs.items():
                    machines, steps = cm.project(prof, p, n_train, batch)
                    row[system] = cm.modelled_epoch(machines, system, rate, steps, layers)
                    row[system + "_lat"] = cm.modelled_epoch(machines, system, rate, steps, layers, LATENCY)
                    row[system + "_cost"] = cm.machine_seconds(row[system], system, p)
                for system in GRAPPAS:
                    if system in row:
                        row[system + "_ratio"] = row["distdgl"] / row[system]
                        row[system + "_ratio_lat"] = row["distdgl_lat"] / row[system + "_lat"]
                        row[system + "_cost_ratio"] = row["distdgl_cost"] / row[system + "_cost"]
                        row[system + "_cost_ratio_lat"] = (cm.machine_seconds(row["distdgl_lat"], "distdgl", p)
                                                           / cm.machine_seconds(row[system + "_lat"], system, p))
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
            row[s + "_epoch_s"] = job_median([r], lambda e, _: e["train_seconds"])
        rows.append(row)
    return rows


def best_val_test(curve: list[dict], budget: Optional[float] = None) -> Optional[float]:
    pts = [c for c in curve if c.get("val_acc") is not None and (budget is None or c["cum_seconds"] <= budget + 1e-9)]
    return max(pts, key=lambda c: c["val_acc"])["test_acc"] if pts else None


def timing_rows(g: dict) -> list[dict]:
    rows = []
    for (ds, p, layers, system, preset), recs in sorted(g.items()):
        ours = job_median(recs, lambda e, r: max(e["ours_worker_bytes"]) if "ours_worker_bytes" in e else None)
        rows.append({"dataset": ds, "p": p, "layers": layers, "system": system, "preset": preset,
                     "jobs": len(recs), "epoch": job_median(recs, lambda e, r: e["train_seconds"]),
                     "spread": (min(job_median([r], lambda e, _: e["train_seconds"]) for r in recs),
                                max(job_median([r], lambda e, _: e["train_seconds"]) for r in recs)),
                     "kernel": job_median(recs, lambda e, r: max(m["sent_bytes"] + m["received_bytes"]
                                                                  for m in e["machines"])),
                     "ours": ours, "acc": med(r.get("test_acc") for r in recs),
                     "cpu": job_median(recs, lambda e, r: max(m["cpu_seconds"] for m in e["machines"])),
                     "cpu_step": job_median(recs, cpu_per_step),
                     "load_before": med(r["load_before"][0] for r in recs if r.get("load_before")),
                     # runs from before `load_before` recorded the 1-minute load at their end only
                     "load_after": med((r.get("load_after") or [r.get("load_average")])[0] for r in recs),
                     "load_unrecorded": sum(1 for r in recs if not r.get("load_before")),
                     "steps": recs[0]["epochs"][-1].get("steps"),
                     "link_per_g": med(busiest_link_per_g(r) for r in recs) if system in GRAPPAS else None})
    return rows


def busiest_link_per_g(rec: dict) -> Optional[float]:
    """The busiest machine's sent + received per step (kernel counters) in units of G, one step
    message (4 B x (parameters + scalars); SAGE has no float buffers); a job's median over its
    steady epochs."""
    if not rec.get("parameters"):
        return None
    g = 4 * (rec["parameters"] + SCALARS)
    return job_median([rec], lambda e, r: max(m["sent_bytes"] + m["received_bytes"] for m in e["machines"])
                      / max(e["steps"] or 1, 1) / g)


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


PLACEHOLDER = re.compile(r"\{\{([a-z_]+)((?: +[^ }]+)*) *\}\}")


class NoteFigures:
    """The figures the notes may name, each computed from the rendered tables. A placeholder is
    `{{name arg ...}}`; an argument holding commas is a list, and the figure becomes the range of
    its values ("9.0-9.1x"); a last argument `:spec` overrides the number's format."""

    def __init__(self, rows, ratios, val, proj, acc, profile: Optional[dict] = None):
        self.profile = profile or {}
        self.cell = {(r["dataset"], r["p"], r["preset"], r["layers"], r["system"]): r for r in rows}
        self.ratio_row = {(r["dataset"], r["p"], r["preset"], r["layers"]): r for r in ratios}
        self.val = {(r["dataset"], r["p"], r["preset"], r["layers"], r["system"]): r for r in val}
        self.proj = {(r["dataset"], r["layers"], r["p"], r["preset"]): r for r in proj}
        self.acc_rows = {(r["dataset"], r["p"], r["layers"], r["variant"]): r for r in acc}

    def _cell(self, ds, p, preset, layers, system):
        r = self.cell.get((ds, int(p), preset, int(layers), system))
        if r is None:
            raise KeyError(f"no measured cell {ds} P={p} {preset} {layers} layers {system}")
        return r

    def _proj(self, ds, layers, p, preset):
        r = self.proj.get((ds, int(layers), int(p), preset))
        if r is None:
            raise KeyError(f"no projection {ds} {layers} layers P={p} {preset}")
        return r

    # each: (value, format, suffix)
    def ratio(self, ds, p, preset, layers, system="grappa"):
        d, x = self._cell(ds, p, preset, layers, "distdgl"), self._cell(ds, p, preset, layers, system)
        return d["epoch"] / x["epoch"], ".2f", "x"

    def epoch(self, ds, p, preset, layers, system):
        return self._cell(ds, p, preset, layers, system)["epoch"], ".2f", ""

    def cpu_epoch(self, ds, p, preset, layers, system):
        """The busiest machine's CPU seconds per epoch (the "CPU s" column)."""
        return self._cell(ds, p, preset, layers, system)["cpu"], ".2f", ""

    def profile_ms(self, design, phase="step"):
        """bench/profile_step.py's CPU per step of a worker, by design and phase, in ms."""
        prof = self.profile.get(design)
        if prof is None:
            raise KeyError(f"no profile of the {design} design (profile-step.json)")
        return 1e3 * (prof["cpu_per_step"] if phase == "step" else prof["phases_per_step"][phase]), ".0f", " ms"

    def cpu_step(self, ds, p, preset, layers, system):
        return self._cell(ds, p, preset, layers, system)["cpu_step"], ".3g", ""

    def cpu_ratio(self, ds, p, preset, layers, system="grappa"):
        """system's CPU per step ÷ DistDGL's."""
        return (self._cell(ds, p, preset, layers, system)["cpu_step"]
                / self._cell(ds, p, preset, layers, "distdgl")["cpu_step"]), ".2f", "x"

    def cpu_times(self, ds, p, preset, layers, system="grappa"):
        """DistDGL's CPU per step ÷ system's."""
        v, _, _ = self.cpu_ratio(ds, p, preset, layers, system)
        return 1 / v, ".1f", "x"

    def link_g(self, ds, p, preset, layers, system="grappa"):
        return self._cell(ds, p, preset, layers, system)["link_per_g"], ".2f", " G"

    def acc(self, ds, p, preset, layers, system):
        return self._cell(ds, p, preset, layers, system)["acc"], ".3f", ""

    def acc_epochs(self, ds, p, layers, variant, system):
        r = self.acc_rows.get((ds, int(p), int(layers), variant))
        if r is None:
            raise KeyError(f"no accuracy row {ds} P={p} {layers} layers {variant}")
        return r[f"{system}_epochs_acc"], ".3f", ""

    def val_err(self, ds, p, preset, layers, system):
        r = self.val.get((ds, int(p), preset, int(layers), system))
        if r is None:
            raise KeyError(f"no validation row {ds} P={p} {preset} {layers} layers {system}")
        return r["error"] * 100, "+.0f", " %"

    def proj_time(self, ds, layers, p, preset, system="grappa"):
        return self._proj(ds, layers, p, preset)[system + "_ratio"], ".2f", "x"

    def proj_time_lat(self, ds, layers, p, preset, system="grappa"):
        return self._proj(ds, layers, p, preset)[system + "_ratio_lat"], ".2f", "x"

    def proj_cost(self, ds, layers, p, preset, system="grappa"):
        return self._proj(ds, layers, p, preset)[system + "_cost_ratio"], ".2f", "x"

    def proj_cost_lat(self, ds, layers, p, preset, system="grappa"):
        return self._proj(ds, layers, p, preset)[system + "_cost_ratio_lat"], ".2f", "x"

    def fixed_cpu(self, ds, layers):
        rows = [r for (d, la, _, _), r in self.proj.items() if d == ds and la == int(layers)]
        if not rows or rows[0]["fixed_cpu"] is None:
            raise KeyError(f"no fixed per-step CPU for {ds} {layers} layers")
        return rows[0]["fixed_cpu"], ".3f", ""

    def figure(self, name: str, args: list[str]) -> str:
        if name.startswith("_") or name == "figure" or not callable(getattr(type(self), name, None)):
            raise KeyError(f"unknown figure {name!r}")
        spec = args.pop()[1:] if args and args[-1].startswith(":") else None
        values, fmt_, suffix = [], ".2f", ""
        combos = list(itertools.product(*(a.split(",") for a in args)))
        for combo in combos:
            try:
                v, fmt_, suffix = getattr(self, name)(*combo)
            except KeyError:
                if len(combos) == 1:
                    raise
                continue  # a range covers the cells that exist
            if v is None:
                raise KeyError(f"figure {name} {' '.join(combo)} has no value")
            values.append(v)
        if not values:
            raise KeyError(f"no cell of {name} {' '.join(args)} exists")
        spec = spec or fmt_
        lo, hi = format(min(values), spec), format(max(values), spec)
        return (lo if lo == hi else f"{lo}-{hi}") + suffix


def fill_notes(notes: str, figures: NoteFigures) -> str:
    """The notes with every `{{...}}` replaced by its computed figure; an unknown or missing one
    stops the render, naming it (a figure is computed or absent, never typed)."""
    def one(m: re.Match) -> str:
        try:
            return figures.figure(m.group(1), m.group(2).split())
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"bench/peer-notes.md: {m.group(0)}: {err}") from None
    return PLACEHOLDER.sub(one, notes)


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
    if notes:
        import json
        prof_path = out / "profile-step.json"
        prof = json.loads(prof_path.read_text()) if prof_path.exists() else None
        notes = fill_notes(notes, NoteFigures(rows, ratios, val, proj, acc, prof))
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
           "Every figure is the median over a job's epochs after the first, then over the cell's jobs "
           "(`statistics.median`: with two values, their mean). "
           "Bytes: the busiest machine's link, sent + received, per epoch, by the kernel's counters "
           "(Grappa's aggregator is a machine); `ours`: Grappa's exact per-worker counters (payload only). "
           "CPU: the busiest machine's CPU seconds per epoch; CPU / step: the busiest training machine's "
           "(Grappa's workers, not its aggregator; every DistDGL machine) CPU seconds per step. Load: the "
           "1-minute load average before and after each run (median over jobs; a run is refused when it is "
           f"above {QUIET_LOAD:.1f} before; `n/r`: not recorded before the run, which the harness did not do "
           "then; the load after counts the job's own processes). Test accuracy after the epochs run (best "
           "validation epoch), one number per cell: the accuracy section below is the comparison.", "",
           "| dataset | P | link | layers | system | jobs | epoch s (min-max) | steps | kernel MB/epoch | ours MB/epoch | "
           "CPU s | CPU s / step | load before / after | test acc |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        before = "n/r" if r["load_unrecorded"] == r["jobs"] else fmt(r["load_before"], ".1f") + \
            (f" ({r['load_unrecorded']} n/r)" if r["load_unrecorded"] else "")
        md.append(f"| {r['dataset']} | {r['p']} | {r['preset']} | {r['layers']} | {LABEL[r['system']]} | {r['jobs']} | "
                  f"{fmt(r['epoch'])} ({fmt(r['spread'][0])}-{fmt(r['spread'][1])}) | {r['steps']} | "
                  f"{fmt(r['kernel'] / MB, '.1f')} | {fmt(None if r['ours'] is None else r['ours'] / MB, '.2f')} | "
                  f"{fmt(r['cpu'])} | {fmt(r['cpu_step'], '.4f')} | {before} / {fmt(r['load_after'], '.1f', 'n/r')} | "
                  f"{fmt(r['acc'], '.3f')} |")
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
               "the largest measured P at 1 Gbit/s (each the cell's median), scaled as `bench/cluster_model.py` "
               "says: both systems keep their fixed per-step work (the all-reduce and the optimizer of the same "
               "model; *fixed CPU*: the ring aggregator's CPU per step, measured in the same cell) and shrink the "
               "rest with the seeds a machine gets. *Machine-s*: epoch time x machines, Grappa charged P + 1 "
               "(its aggregator), DistDGL P; **the ratio of machine-seconds is the comparison at equal cost**. "
               f"The last columns add {LATENCY * 1e3:.1f} ms per round trip.", "",
               "| dataset | layers | from P | P | link | fixed CPU s / step | Grappa s | previous s | DistDGL s | "
               "DistDGL ÷ Grappa (time) | DistDGL ÷ previous (time) | Grappa machine-s | DistDGL machine-s | "
               "**DistDGL ÷ Grappa (machine-s)** | with latency: Grappa s | DistDGL s | ratio (machine-s) |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in proj:
            md.append(f"| {r['dataset']} | {r['layers']} | {r['from_p']} | {r['p']} | {r['preset']} | "
                      f"{fmt(r.get('fixed_cpu'), '.4f')} | "
                      f"{fmt(r.get('grappa'), '.3f')} | {fmt(r.get('grappa-star'), '.3f')} | "
                      f"{fmt(r['distdgl'], '.3f')} | {times(r.get('grappa_ratio'))} | "
                      f"{times(r.get('grappa-star_ratio'))} | {fmt(r.get('grappa_cost'), '.2f')} | "
                      f"{fmt(r['distdgl_cost'], '.2f')} | **{times(r.get('grappa_cost_ratio'))}** | "
                      f"{fmt(r.get('grappa_lat'), '.3f')} | "
                      f"{fmt(r['distdgl_lat'], '.3f')} | {times(r.get('grappa_cost_ratio_lat'))} |")
    md += profile_section(out / "profile-step.json")
    left_out = refused(runs)
    if left_out:
        md += ["", f"## Runs left out: the machine was busy (1-minute load average above {QUIET_LOAD:.1f} before)",
               ""] + [f"- {e}" for e in left_out]
    failed = errors(runs)
    if failed:
        md += ["", "## Runs that failed or were refused", ""] + [f"- {e}" for e in failed]
    md += [""] + [f"![{p}]({p})" for p in plots] + [""]
    path = out / "peer.md"
    path.write_text("\n".join(md))
    return path
