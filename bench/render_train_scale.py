"""The "training" section of docs/results/scale.md, from scale-train-runs.json (bench/train_scale.py)."""
from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GIB = 2 ** 30
FLOOR_SCALE = 10
COMMAND = ("python bench/train_scale.py --design previous --scales 10,17,18 --archs sage --modes mini-batch,full-graph\n"
           "python bench/train_scale.py --scales 10,19,20 --archs sage,gcn --modes full-graph\n"
           "python bench/train_scale.py --scales 10,19,20,22,24 --archs sage,gcn --modes mini-batch")


def ok(runs: dict) -> list[dict]:
    return sorted((r for r in runs.values() if "worker_peak_rss_bytes" in r),
                  key=lambda r: (r["design"], r["mode"], r["arch"], r["scale"]))


def floor(runs: dict, r: dict, field: str) -> float:
    """The runtime floor: the same design, mode and architecture on RMAT-10 (max over workers)."""
    f = runs.get(f"{r['design']}/{r['mode']}/{r['arch']}/rmat-{FLOOR_SCALE}")
    return max(f[field]) if f and f.get(field) else 0.0


def per_edge(runs: dict, r: dict) -> float | None:
    """Bytes of PSS per local edge above the floor, worst worker."""
    pss, edges = r.get("worker_peak_pss_bytes"), r.get("worker_local_edges")
    if not pss or not edges or r["scale"] == FLOOR_SCALE:
        return None
    base = floor(runs, r, "worker_peak_pss_bytes")
    return max((p - base) / e for p, e in zip(pss, edges) if e)


def step_time(r: dict) -> str:
    t = statistics.median(r["train_seconds"][1:] or r["train_seconds"])
    if r["mode"] == "mini-batch":
        steps = r.get("steps_per_epoch")
        return f"{t:.0f} s / {steps} steps" if steps else f"{t:.0f} s / epoch"
    return f"{t:.1f} s / epoch"


def gib(value) -> str:
    return f"{value / GIB:.2f} GiB" if value else "n/a"


def table(runs: dict) -> list[str]:
    lines = ["| design | mode | arch | scale | worker peak RSS | worker peak PSS | job (sum of PSS) | job tree RSS | local edges / worker | B / local edge above floor | time | test acc |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok(runs):
        pss, edges, b, acc = r.get("worker_peak_pss_bytes"), r.get("worker_local_edges"), per_edge(runs, r), r.get("test_acc")
        cells = [r["design"], r["mode"], r["arch"], str(r["scale"]), gib(max(r["worker_peak_rss_bytes"])),
                 gib(max(pss) if pss else None),
                 gib(sum(pss) + (r.get("aggregator_peak_pss_bytes") or 0) if pss else None),
                 gib(r["tree_peak_rss_bytes"]), f"{max(edges):,}" if edges else "n/a",
                 f"{b:.0f} B" if b is not None else ("(floor)" if r["scale"] == FLOOR_SCALE else "n/a"),
                 step_time(r), f"{acc:.3f}" if acc is not None else "n/a"]
        lines.append("| " + " | ".join(cells) + " |")
    for r in (r for r in runs.values() if "failed" in r):
        why = r["failed"].strip().splitlines()[-1][:120]
        lines.append(f"| {r['design']} | {r['mode']} | {r['arch']} | {r['scale']} | failed: {why} |||||||||")
    return lines


def verdicts(runs: dict) -> list[str]:
    out = []
    mb24 = [r for r in ok(runs) if r["design"] == "streaming" and r["mode"] == "mini-batch" and r["scale"] == 24]
    out.append(f"- **RMAT-24 at P = 8 mini-batch: {'met' if mb24 else 'not measured or failed'}**"
               + (f" ({', '.join(r['arch'] for r in mb24)}: job tree peak "
                  f"{max(r['tree_peak_rss_bytes'] for r in mb24) / GIB:.1f} GiB of 24)." if mb24 else "."))
    per = [(r, per_edge(runs, r)) for r in ok(runs) if r["design"] == "streaming"]
    per = [(r, b) for r, b in per if b is not None]
    if per:
        worst = max(per, key=lambda t: t[1])
        fl = max(floor(runs, r, "worker_peak_pss_bytes") for r, _ in per)
        out.append(f"- **≤ 128 B per local edge above a floor ≤ 0.5 GiB: "
                   f"{'met' if worst[1] <= 128 and fl <= 0.5 * GIB else 'missed'}**: worst "
                   f"{worst[1]:.0f} B ({worst[0]['mode']} {worst[0]['arch']} RMAT-{worst[0]['scale']}); "
                   f"floor (worker PSS on RMAT-{FLOOR_SCALE}) up to {fl / GIB:.2f} GiB.")
    fg19 = [r for r in ok(runs) if r["design"] == "streaming" and r["mode"] == "full-graph" and r["scale"] == 19]
    if fg19:
        rss = max(max(r["worker_peak_rss_bytes"]) for r in fg19)
        pss = max(max(r["worker_peak_pss_bytes"]) for r in fg19)
        out.append(f"- **RMAT-19 full-graph at P = 8 within 1 GiB per worker: "
                   f"{'met' if rss <= GIB else 'missed'}**: peak RSS {rss / GIB:.2f} GiB, PSS {pss / GIB:.2f} GiB.")
    return out


def plot(runs: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for (design, mode), marker in ((("streaming", "mini-batch"), "o"), (("streaming", "full-graph"), "^"),
                                   (("previous", "mini-batch"), "s"), (("previous", "full-graph"), "D")):
        for arch in ("sage", "gcn"):
            rs = [r for r in ok(runs) if (r["design"], r["mode"], r["arch"]) == (design, mode, arch)]
            if rs:
                ax.plot([r["scale"] for r in rs], [max(r["worker_peak_rss_bytes"]) / GIB for r in rs],
                        marker=marker, label=f"{design} {mode} {arch}")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("R-MAT scale s (2^s nodes, 2^(s+4) edges drawn)")
    ax.set_title("peak RSS per worker, P = 8 (GiB)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def training_section(runs: dict, results: Path) -> list[str]:
    plot(runs, results / "scale-train.png")
    return [
        "## training", "",
        "```sh", COMMAND, "```", "",
        "`grappa train` with P = 8 workers and an aggregator as local processes on this 2-core machine: "
        "3-layer SAGE and GCN, hidden 128, fanouts 15/10/5, batch 1,000, float16 features in the store. "
        "Mini-batch runs are time-boxed to 100 steps (`training.maxStepsPerEpoch`) and end with a sampled "
        "evaluation of 1% of the nodes (`training.evalFraction`); full-graph runs train 3 epochs and "
        "evaluate exactly. *Worker peak RSS/PSS*: the largest over the 8 workers (the report's memory "
        "section; PSS counts the memory-mapped store and the shared libraries once per machine). *Job*: "
        "the sum of every rank's peak PSS, and the sampled peak RSS of the launcher's whole process tree. "
        "*B / local edge above floor*: (worker peak PSS - the same job's worker PSS on RMAT-10) / the "
        "worker's local edges, worst worker. *previous* is the design before this change (commit "
        "b557111), measured by the same harness on its own tree where it fits in memory.", "",
        *verdicts(runs), "",
        *table(runs), "",
        "![peak RSS per worker](scale-train.png)", "",
    ]
