"""docs/results/accuracy.md and accuracy.png, from accuracy-runs.json and fidelity.json (bench/accuracy.py)."""
from __future__ import annotations

import itertools
import os
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METHODS = ["single", "Grappa", "UW", "FP"]
ARCHS, DEPTHS = ["gcn", "sage"], [2, 3]
TARGET_POINTS = 1.0  # issue 2: Grappa within 1 point of single-process


def collect(runs: dict, field: str = "test_acc") -> dict:
    """{(dataset, arch, layers): {method: [field per seed]}} from 'dataset|arch|layers|method|seed' keys."""
    rows: dict = {}
    for key, run in sorted(runs.items()):
        dataset, arch, layers, method, _seed = key.split("|")
        rows.setdefault((dataset, arch, int(layers)), {m: [] for m in METHODS})[method].append(run[field])
    return rows


def before_first_round(best_epochs: dict, round_every: int) -> list[str]:
    """Runs whose best-validation epoch precedes the first repartition: Grappa and FP are the same run there."""
    grappa = [e for by_method in best_epochs.values() for e in by_method["Grappa"]]
    early = sum(e <= round_every for e in grappa)
    return [f"In {early} of {len(grappa)} Grappa runs the best-validation epoch comes before the first "
            f"repartition round (epoch <= {round_every}); up to that round Grappa and FP are the same run "
            "(same seed and chunks), so only the later-peaking settings (last column) can show what "
            "rounds add.", ""]


def mean_sd(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{100 * xs[0]:.1f}"
    return f"{100 * statistics.mean(xs):.1f} ± {100 * statistics.stdev(xs):.1f}"


def gap_points(accs: dict, against: str = "single") -> float | None:
    """Grappa's mean minus another method's, in points; None while either has no run."""
    if not (accs["Grappa"] and accs[against]):
        return None
    return 100 * (statistics.mean(accs["Grappa"]) - statistics.mean(accs[against]))


def has_all_seeds(accs: dict, methods: tuple[str, ...], seeds: int) -> bool:
    return all(len(accs[m]) >= seeds for m in methods)


def setting_name(setting: tuple) -> str:
    dataset, arch, layers = setting
    return f"{dataset} {arch.upper()}-{layers}"


def target_summary(rows: dict, seeds: int, datasets: list[str]) -> list[str]:
    """Judge only settings where both single and Grappa have every seed; list the rest as pending."""
    complete = {s: a for s, a in rows.items() if has_all_seeds(a, ("single", "Grappa"), seeds)}
    misses = {s: gap_points(a) for s, a in complete.items() if gap_points(a) < -TARGET_POINTS}
    pending = sorted(set(itertools.product(datasets, ARCHS, DEPTHS)) - set(complete))
    lines = ["## Target", "",
             f"Grappa within {TARGET_POINTS:g} point of single-process (mean over {seeds} seeds): "
             f"**{len(complete) - len(misses)} of {len(complete)}** fully measured settings."]
    for setting, gap in sorted(misses.items()):
        accs = complete[setting]
        lines.append(f"- Miss: {setting_name(setting)}, {gap:+.1f} points (single {mean_sd(accs['single'])}, "
                     f"Grappa {mean_sd(accs['Grappa'])}, UW {mean_sd(accs['UW'])}).")
    if pending:
        lines.append("- Not judged yet (seeds missing): " + ", ".join(setting_name(s) for s in pending) + ".")
    return lines + [""]


CONTRASTS = [("UW", "the node correction (same rounds, no weights)"),
             ("FP", "repartition rounds (same correction, fixed partitions)")]


def contrasts(rows: dict, seeds: int) -> list[str]:
    """Grappa minus each ablation, over settings where both have every seed: what each component adds."""
    lines = ["## What each component adds", "",
             "Grappa minus the ablation, in points of mean test accuracy, over settings where both have "
             f"all {seeds} seeds. A single setting can move the mean: compare it with the median.", "",
             "| Grappa vs | isolates | settings | Grappa higher in | mean | median | range |",
             "|---|---|---|---|---|---|---|"]
    for other, isolates in CONTRASTS:
        gaps = [gap_points(a, other) for a in rows.values() if has_all_seeds(a, ("Grappa", other), seeds)]
        if not gaps:
            lines.append(f"| {other} | {isolates} | 0 | - | - | - | - |")
            continue
        lines.append(f"| {other} | {isolates} | {len(gaps)} | {sum(g > 0 for g in gaps)} | "
                     f"{statistics.mean(gaps):+.1f} | {statistics.median(gaps):+.1f} | "
                     f"{min(gaps):+.1f} to {max(gaps):+.1f} |")
    return lines + [""]


def plot(rows: dict, path: Path) -> None:
    # Points with sd bars rather than bars: the accuracy axis does not start at zero.
    datasets = sorted({s[0] for s in rows})
    settings = list(itertools.product(ARCHS, DEPTHS))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 3.4), squeeze=False)
    offset = 0.6 / len(METHODS)
    for ax, dataset in zip(axes[0], datasets):
        for i, method in enumerate(METHODS):
            xs, ys, errs = [], [], []
            for j, (arch, depth) in enumerate(settings):
                accs = rows.get((dataset, arch, depth), {}).get(method)
                if accs:
                    xs.append(j + (i - (len(METHODS) - 1) / 2) * offset)
                    ys.append(100 * statistics.mean(accs))
                    errs.append(100 * statistics.stdev(accs) if len(accs) > 1 else 0.0)
            ax.errorbar(xs, ys, yerr=errs, fmt="o", ms=4, capsize=2, color=f"C{i}",
                        label=method if ax is axes[0][0] else None)
        ax.set_xlim(-0.5, len(settings) - 0.5)
        ax.set_xticks(range(len(settings)), [f"{a.upper()}-{n}" for a, n in settings])
        ax.set_title(dataset)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("test accuracy % (mean, sd over seeds)")
    fig.legend(loc="upper center", ncol=len(METHODS), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fidelity_section(fidelity: dict) -> list[str]:
    lines = ["## Gradient fidelity", "",
             "Relative error ||G - G*|| / ||G*|| and cosine similarity of each reducer's aggregated "
             "gradient G against the exact single-process full-graph gradient G*, at fixed parameters "
             "(at initialisation, and 'early': after 5 epochs of single-process training), P = 4, dropout off, "
             "averaged over 3 partition seeds x 2 rounds. Lower error is better. The last column "
             "shows UW with *local* degrees in GCN normalisation (what the method doc warns against).", ""]
    if not fidelity:
        return lines + ["Not measured yet (`python bench/accuracy.py --only fidelity`).", ""]
    reducers = list(next(iter(fidelity.values()))["global"].keys())
    lines.append("| dataset | model | layers | params | " + " | ".join(reducers) + " | UW, local degrees |")
    lines.append("|" + "---|" * (5 + len(reducers)))
    for key, v in sorted(fidelity.items()):
        dataset, arch, layers, when = key.split("|")
        cells = [f"{v['global'][r]['rel_error']:.3f} / {v['global'][r]['cosine']:.3f}" for r in reducers]
        loc = v.get("local", {}).get("UW")
        cells.append(f"{loc['rel_error']:.3f} / {loc['cosine']:.3f}" if loc else "-")
        lines.append(f"| {dataset} | {arch.upper()} | {layers} | {when} | " + " | ".join(cells) + " |")
    return lines + [""]


def grid_status(measured: int, planned: int) -> str:
    status = f"Grid status: {measured} of {planned} (dataset, model, depth, method, seed) runs measured"
    if measured >= planned:
        return status + "."
    return status + "; cells with '-' or without '±' are not (fully) measured yet."


def render(runs: dict, fidelity: dict, epochs: int, seeds: int, datasets: list[str], out: Path,
           torch_version: str = "", round_every: int = 10) -> Path:
    """runs: {'dataset|arch|layers|method|seed': {'test_acc', 'best_epoch', ...}} for one epoch budget."""
    rows, best_epochs = collect(runs), collect(runs, "best_epoch")
    lines = ["# Accuracy: Grappa vs single-process, UW and fixed partitions", "",
             f"Regenerate with `make bench-accuracy` (= `python bench/accuracy.py --epochs {epochs}`; "
             "runs resume from `accuracy-runs.json` / `fidelity.json`, delete them to start over). "
             f"Measured on this project's CI machine kind ({os.cpu_count()} CPU cores, 24 GiB, "
             f"torch {torch_version}, CPU only), shared with other work while it ran, so the "
             "seconds in the JSON are indicative only.", "",
             "P = 4 workers, full-graph steps, hidden 128, dropout 0.5, Adam lr 0.01, weight decay 5e-4, "
             f"{epochs} epochs, exact evaluation every epoch, test accuracy at the best validation "
             "epoch. Grappa = rounds every 10 epochs + node-level correction; UW = rounds, no "
             "correction; FP = fixed partitions (no rounds) + correction. Mean ± sd over seeds "
             "(the seed sets model initialisation and the node-to-chunk assignment), in %.", ""]
    lines += target_summary(rows, seeds, datasets)
    lines += before_first_round(best_epochs, round_every)
    lines += ["| dataset | model | layers | " + " | ".join(METHODS) + " | Grappa - single | Grappa best epochs |",
              "|" + "---|" * (5 + len(METHODS))]
    for setting in sorted(rows):
        accs, gap = rows[setting], gap_points(rows[setting])
        dataset, arch, layers = setting
        lines.append(f"| {dataset} | {arch.upper()} | {layers} | "
                     + " | ".join(mean_sd(accs[m]) for m in METHODS)
                     + f" | {'-' if gap is None else f'{gap:+.1f}'} | "
                     + (" / ".join(map(str, best_epochs[setting]["Grappa"])) or "-") + " |")
    if rows:
        plot(rows, out / "accuracy.png")
        lines += ["", "![test accuracy per setting, mean and sd over seeds](accuracy.png)"]
    lines += [""] + contrasts(rows, seeds) + fidelity_section(fidelity)
    lines += ["## Default reducer", "",
              "`grappa.correction: node`, `grappa.shrinkage: 0.5` (trainer/grappa/config.py). In the "
              "fidelity table, node weights raise the error at initialisation (most at lambda = 1) and "
              "lower it after a few epochs in most settings (most at lambda = 1 for SAGE); batch-level "
              "weighting equals UW within 1-2%. Lambda = 0.5 keeps most of the later gain while costing "
              "little at initialisation. In accuracy, no correction is separable from UW within the "
              "seed spread of these graphs.", "",
              grid_status(len(runs), len(datasets) * len(ARCHS) * len(DEPTHS) * len(METHODS) * seeds)]
    path = out / "accuracy.md"
    path.write_text("\n".join(lines) + "\n")
    return path
