"""docs/results/strategies.md and its plot, from strategy-runs.json (bench/strategies.py)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

PRESET_ORDER = ["10gbit", "1gbit", "100mbit", "unshaped", "none"]


def collect(runs: dict) -> dict:
    """{(dataset, layers): {label: {preset: (run, P)}}}."""
    rows: dict = {}
    for key, run in runs.items():
        dataset, p, layers, label, preset = key.split("|")
        rows.setdefault((dataset, int(layers)), {}).setdefault(label, {})[preset] = (run, int(p))
    return rows


def accuracy(by_preset: dict) -> str:
    # Same seeds on every preset; the link rate changes timing only, so differing values flag
    # nondeterminism rather than an effect of the network.
    accs = sorted({f"{100 * run['test_acc']:.1f}" for run, _ in by_preset.values()})
    return " / ".join(accs)


def table(by_label: dict, presets: list[str]) -> list[str]:
    lines = ["| strategy | P | test acc % | training bytes | bytes vs full | "
             + " | ".join(f"training s, {p}" for p in presets) + " |",
             "|---|---|---|---|---|" + "---|" * len(presets)]
    full = next(iter(by_label.get("full", {}).values()), None)
    for label, by_preset in sorted(by_label.items()):
        if label == "single":
            continue
        run, p = next(iter(by_preset.values()))
        ratio = f"{run['total_bytes'] / full[0]['total_bytes']:.3g}x" if full else "-"
        times = [f"{by_preset[pr][0]['cum_seconds'][-1]:.1f}" if pr in by_preset else "-" for pr in presets]
        lines.append(f"| {label} | {p} | {accuracy(by_preset)} | {run['total_bytes'] / 1e6:,.1f} MB | "
                     f"{ratio} | " + " | ".join(times) + " |")
    if "single" in by_label:
        run, _ = next(iter(by_label["single"].values()))
        lines.append(f"| single process | 1 | {100 * run['test_acc']:.1f} | 0 | - | "
                     + " | ".join(f"{run['seconds']:.1f} (no network)" for _ in presets) + " |")
    return lines


def plot(rows: dict, path: Path) -> None:
    keys = sorted(rows)
    labels = sorted({label for by_label in rows.values() for label in by_label if label != "single"})
    colour = {label: plt.cm.tab20(i % 20) for i, label in enumerate(labels)}  # same colour in every panel
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 4), squeeze=False, sharey=True)
    for ax, (dataset, layers) in zip(axes[0], keys):
        for label, by_preset in sorted(rows[(dataset, layers)].items()):
            run, _ = next(iter(by_preset.values()))
            if label == "single":
                ax.axhline(100 * run["test_acc"], color="grey", linestyle=":", label="single process")
                continue
            ax.scatter(run["total_bytes"] / 1e9, 100 * run["test_acc"], label=label, color=colour[label],
                       marker="s" if label.startswith("varco") else "o")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("training GB of the run (log)")
        ax.set_title(f"{dataset}, GCN x{layers}")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(runs: dict, out: Path) -> Path:
    rows = collect(runs)
    presets = [p for p in PRESET_ORDER if p != "none" and any(
        p in bp for by_label in rows.values() for bp in by_label.values())]
    lines = ["# Strategies side by side", "",
             "Same chunks, model (GCN, hidden 128, dropout 0.5), optimizer (Adam, lr 0.01) and epochs for "
             "every strategy; test accuracy of the job's result (at the best validation epoch; RETEXO: "
             "of its last stage); bytes = training traffic of the whole run on the wire (evaluation "
             "excluded; identical on every link preset); seconds = training time of the run on the "
             "throttled links (evaluation excluded; single process: including its evaluation). "
             "One job per cell. Regenerate: `python bench/strategies.py` (see the commands below).", ""]
    for (dataset, layers), by_label in sorted(rows.items()):
        lines += [f"## {dataset}, {layers} layers", ""] + table(by_label, presets) + [""]
    plot(rows, out / "strategies-accuracy-bytes.png")
    lines += ["![accuracy vs bytes](strategies-accuracy-bytes.png)", ""]
    path = out / "strategies.md"
    notes = Path(__file__).with_name("strategies-notes.md")
    path.write_text("\n".join(lines) + ("\n" + notes.read_text() if notes.exists() else "") + "\n")
    return path
