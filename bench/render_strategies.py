"""docs/results/strategies.md and its plot, from strategy-runs.json (bench/strategies.py)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def render(runs: dict, out: Path) -> Path:
    rows = {}
    for key, run in runs.items():
        dataset, p, layers, label, preset = key.split("|")
        rows.setdefault((dataset, int(layers)), {})[label] = (run, int(p), preset)
    lines = ["# Strategies side by side", "",
             "Same chunks, model (GCN, hidden 128, dropout 0.5), optimizer (Adam, lr 0.01) and epochs for "
             "every strategy; test accuracy of the job's result (at the best validation epoch; RETEXO: "
             "of its last stage); bytes = training traffic of "
             "the whole run on the wire (evaluation excluded); seconds = training time of the run on "
             "the throttled links (evaluation excluded; single process: including its evaluation). Regenerate: `python bench/strategies.py`.", ""]
    for (dataset, layers), by_label in sorted(rows.items()):
        single = by_label.get("single")
        lines += [f"## {dataset}, {layers} layers", "",
                  "| strategy | test acc | training bytes | training s | bytes vs full |",
                  "|---|---|---|---|---|"]
        full = by_label.get("full")
        for label, (run, p, preset) in sorted(by_label.items()):
            if label == "single":
                continue
            ratio = f"{run['total_bytes'] / full[0]['total_bytes']:.3g}x" if full else "-"
            lines.append(f"| {label} (P = {p}, {preset}) | {100 * run['test_acc']:.1f} | "
                         f"{run['total_bytes'] / 1e6:,.1f} MB | {run['cum_seconds'][-1]:.1f} | {ratio} |")
        if single:
            lines.append(f"| single process | {100 * single[0]['test_acc']:.1f} | 0 | "
                         f"{single[0]['seconds']:.1f} | - |")
        lines.append("")
    # accuracy versus bytes at the depth with the most variants
    (dataset, layers), by_label = max(rows.items(), key=lambda kv: len(kv[1]))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, (run, _, _) in sorted(by_label.items()):
        if label == "single":
            ax.axhline(100 * run["test_acc"], color="grey", linestyle=":", label="single process")
            continue
        ax.scatter(run["total_bytes"], 100 * run['test_acc'], label=label,
                   marker="s" if label.startswith("varco") else "o")
    ax.set_xscale("log")
    ax.set_xlabel("training bytes of the run (log)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{dataset}, GCN x{layers}: accuracy vs bytes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "strategies-accuracy-bytes.png", dpi=110)
    plt.close(fig)
    lines += ["![accuracy vs bytes](strategies-accuracy-bytes.png)", ""]
    path = out / "strategies.md"
    notes = Path(__file__).with_name("strategies-notes.md")
    path.write_text("\n".join(lines) + ("\n" + notes.read_text() if notes.exists() else "") + "\n")
    return path
