"""The run's report: `report.json` and a PNG of loss and accuracy per epoch, rounds marked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # headless: pods and CI have no display
import matplotlib.pyplot as plt  # noqa: E402


def write_report(run_dir: str | Path, config: dict, history: list[dict], result: dict,
                 extra: Optional[dict] = None) -> Path:
    run_dir = Path(run_dir)
    evals = [h for h in history if h.get("val_acc") is not None]
    report = {
        "config": config,
        "result": result,
        "epochs": len(history),
        "rounds": sorted({h["round"] for h in history if "round" in h}),
        "seconds_total": sum(h.get("epoch_seconds", 0.0) for h in history),
        "train_bytes_total": sum(h.get("train_bytes", 0) for h in history),
        "eval_bytes_total": sum(h.get("eval_bytes", 0) for h in history),
        # worker-to-worker rows (strategy full): each byte is counted once, at its sender
        "fetch_bytes_total": sum(sum(h.get("worker_fetch_bytes", [])) for h in history) // 2,
        "final": evals[-1] if evals else None,
        "memory": memory_summary(history),
        "history": history,
        **(extra or {}),
    }
    path = run_dir / "report.json"
    path.write_text(json.dumps(report, indent=2))
    plot_history(history, run_dir / "training.png", title=config.get("title") or describe_run(config))
    return path


def memory_summary(history: list[dict]) -> Optional[dict]:
    """Per worker: peak RSS and PSS over the run, the local graph of the last epoch, and bytes
    of memory per local edge (PSS counts the memory-mapped store and libraries once per machine)."""
    recs = [h for h in history if h.get("worker_peak_rss_bytes")]
    if not recs:
        return None
    last = recs[-1]
    rss = [max(r["worker_peak_rss_bytes"][i] for r in recs) for i in range(len(last["worker_peak_rss_bytes"]))]
    pss = [max(r.get("worker_peak_pss_bytes", [0] * len(rss))[i] for r in recs) for i in range(len(rss))]
    edges = last.get("worker_local_edges") or [0] * len(rss)
    return {
        "worker_peak_rss_bytes": rss, "worker_peak_pss_bytes": pss,
        "worker_local_nodes": last.get("worker_local_nodes"), "worker_local_edges": edges,
        "worker_rss_bytes_per_local_edge": [r / e if e else None for r, e in zip(rss, edges)],
        "worker_pss_bytes_per_local_edge": [p / e if e else None for p, e in zip(pss, edges)],
        "aggregator_peak_rss_bytes": last.get("aggregator_peak_rss_bytes"),
        "aggregator_peak_pss_bytes": last.get("aggregator_peak_pss_bytes"),
        "job_peak_pss_bytes": sum(pss) + (last.get("aggregator_peak_pss_bytes") or 0),
    }


def describe_run(config: dict) -> str:
    try:
        m = config["model"]
        return (f"{config['dataset']['name']} - {m['arch'].upper()} x{m['layers']} - "
                f"P={config['partitions']} - " + (f"correction={config['grappa']['correction']}"
                if config.get("strategy", "grappa") == "grappa" else f"strategy {config['strategy']}"))
    except (KeyError, TypeError):
        return "Grappa training"


def plot_history(history: list[dict], path: Path, title: Optional[str] = None) -> None:
    if not history:
        return
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ep = [h["epoch"] for h in history]
    ax_loss.plot(ep, [h["loss"] for h in history], label="train loss (seeds)")
    ev = [h for h in history if h.get("val_acc") is not None]
    for split, style in (("train", ":"), ("val", "-"), ("test", "--")):
        ax_acc.plot([h["epoch"] for h in ev], [h[f"{split}_acc"] for h in ev], style, label=split)
    starts = sorted({h["round_start"] for h in history if h.get("round_start", 0) > 0})
    for ax in (ax_loss, ax_acc):
        for s in starts:
            ax.axvline(s + 0.5, color="grey", alpha=0.3, lw=1)
        ax.set_xlabel("epoch")
        ax.legend(loc="best", fontsize=8)
    ax_loss.set_ylabel("loss")
    ax_acc.set_ylabel("accuracy (exact evaluation)")
    fig.suptitle((title or "Grappa training") + ("  (grey lines: repartition rounds)" if starts else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
