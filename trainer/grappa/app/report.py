"""The run's report: `report.json` and a PNG of loss and accuracy per epoch, rounds marked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import matplotlib

from grappa.util.cgroup_memory import CGROUP_PEAKS

matplotlib.use("Agg")  # headless: pods and CI have no display
import matplotlib.pyplot as plt  # noqa: E402


def write_report(run_dir: str | Path, config: dict, history: list[dict], result: dict,
                 extra: Optional[dict] = None, cgroup: Optional[dict] = None) -> Path:
    """`cgroup`: the writer's memory cgroup (CgroupPeaks.describe()), named beside its figures."""
    run_dir = Path(run_dir)
    evals = [h for h in history if h.get("val_acc") is not None or h.get("val_mrr") is not None]
    extra = {"evaluation": describe_evaluation(config), "resumed_at": resumes(run_dir), **(extra or {})}
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
        "memory": memory_summary(history, cgroup),
        "store_reads": store_reads_summary(history, extra["resumed_at"],
                                           fetched=(config.get("storage") or {}).get("fetch", "direct") != "direct"),
        "history": history,
        **extra,
    }
    path = run_dir / "report.json"
    path.write_text(json.dumps(report, indent=2))
    plot_history(history, run_dir / "training.png", title=config.get("title") or describe_run(config),
                 evaluation=extra["evaluation"], best_epoch=result.get("best_epoch"),
                 resumed_at=extra["resumed_at"])
    return path


def describe_evaluation(config: dict) -> str:
    """How the accuracies were measured, as the trainer decides it (config.sampled_eval)."""
    t = config.get("training") or {}
    mode = t.get("evalMode") or ("sampled" if t.get("mode") == "mini-batch" else "exact")
    if mode != "sampled":
        return "exact evaluation"
    fraction = t.get("evalFraction", 1.0)
    share = "all nodes" if fraction >= 1 else f"{fraction:.0%} of nodes"
    return f"sampled evaluation, {share}"


def resumes(run_dir: Path) -> list[int]:
    """Epochs after which the run was resumed from a checkpoint (metrics.jsonl's resume events)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by a kill
            continue
        if rec.get("event") == "resume":
            out.append(int(rec["epoch"]))
    return out


CGROUP_WHAT = ("each rank's memory cgroup (page cache included; 0: none readable): the peak of its usage, "
               "the largest working set (usage less inactive file pages: what kubelet evicts on and "
               "`kubectl top` shows) and page cache sampled; in a pod the container's cgroup, what its "
               "memory limit is enforced on; outside a container the cgroup of the whole session "
               "(`cgroup.path`), shared by every rank and whatever else runs there, and its kernel peak "
               "spans the cgroup's life: the container's in a pod, locally earlier jobs of the session too")


def memory_summary(history: list[dict], cgroup: Optional[dict] = None) -> Optional[dict]:
    """Per worker: peak RSS and PSS over the run, the local graph of the last epoch, and bytes
    of memory per local edge (PSS counts the memory-mapped store and libraries once per machine);
    per rank, its memory cgroup's peaks (CGROUP_WHAT), and which cgroup the aggregator's is."""
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
        **{f"worker_{k}_bytes": [max(r.get(f"worker_{k}_bytes", [0] * len(rss))[i] for r in recs)
                                 for i in range(len(rss))] for k in CGROUP_PEAKS},
        **{f"aggregator_{k}_bytes": max(r.get(f"aggregator_{k}_bytes") or 0 for r in recs) for k in CGROUP_PEAKS},
        "cgroup": {"what": CGROUP_WHAT, **(cgroup or {"path": None})},
    }


STORE_READ_KINDS = ("verify", "structure", "own_features", "halo_features")
FETCHED_KINDS = ("fetched", "fetched_ahead", "fetched_rows", "fetched_on_demand", "fetched_reused")  # bytes, summed over rounds
HELD_KINDS = ("local_disk", "prefetch_disk", "prefetch_memory")     # bytes held, their peak kept


def store_reads_summary(history: list[dict], resumed_at: list[int], fetched: bool = False) -> Optional[dict]:
    """Bytes each worker read from the chunk store, per round: the last epoch's round-so-far counts
    of each stretch of epochs on one local graph (a round, or what of it ran after a resume, which
    rebuilds the graph), every read (`total`) and the distinct bytes, by kind; and the run's sums.
    `fetched` (storage.fetch is not direct): the rounds read worker-local copies, so those counts
    are local reads and the store's bytes are `fetched`; `from_store` is whichever applies."""
    recs = [h for h in history if h.get("worker_store_read_bytes")]
    if not recs:
        return None
    stretches: list[list[dict]] = []
    for h in recs:
        fresh = not stretches or h["round"] != stretches[-1][-1]["round"] or \
            h["epoch"] - 1 in resumed_at or h["epoch"] != stretches[-1][-1]["epoch"] + 1
        if fresh:
            stretches.append([h])
        else:
            stretches[-1].append(h)
    rounds = []
    for part in stretches:
        last = part[-1]["worker_store_read_bytes"]
        zeros = [0] * len(next(iter(last.values())))
        per_worker = {k: last.get(k, zeros) for k in (kind + suffix for kind in STORE_READ_KINDS
                                                      for suffix in ("", "_distinct"))}
        per_worker["total"] = [sum(v) for v in zip(*(per_worker[k] for k in STORE_READ_KINDS))]
        per_worker["total_distinct"] = [sum(v) for v in zip(*(per_worker[k + "_distinct"]
                                                                for k in STORE_READ_KINDS))]
        per_worker.update({k: last.get(k, zeros) for k in FETCHED_KINDS + HELD_KINDS})
        per_worker["from_store"] = per_worker["fetched"] if fetched else per_worker["total"]
        rounds.append({"round": part[0]["round"], "epochs": [part[0]["epoch"], part[-1]["epoch"]],
                       "worker_bytes": per_worker})
    keys = [k for k in rounds[0]["worker_bytes"] if k not in HELD_KINDS]
    width = len(rounds[0]["worker_bytes"]["total"])
    return {"what": "bytes read from the chunk store per worker and round: verify (whole files read once "
                    "per process to check their sha256), structure (the local graph's build), own_features "
                    "and halo_features (the rows the steps read); every read counted, and *_distinct: each "
                    "byte once (what the store holds for what was read)" + (
                        "; the rounds were fetched (storage.fetch), so those are reads of the worker-local "
                        "copy and the store's bytes are `fetched` (of them `fetched_ahead` during the round "
                        "before, `fetched_rows` the halo's feature rows, `fetched_on_demand` the rows fetched "
                        "as a mini-batch round's steps first read them; `fetched_reused`, not in `fetched`: the store's "
                        "bytes taken from the worker's folder, which held them from the rounds before: halo rows, "
                        "chunks' index files, a new variable chunk's feature rows); local_disk, prefetch_disk (the next round's share) and prefetch_memory "
                        "(the background fetch's peak buffers, or the next round's local graph it built): bytes held at the round's last epoch report "
                        "(the prefetch ones: or, if more, what a fetch ahead held when it completed since the "
                        "report before)"
                        if fetched else ""),
            "fetched": fetched,
            "rounds": rounds,
            "total_bytes": {k: sum(sum(r["worker_bytes"][k]) for r in rounds) for k in keys},
            "peak_held_bytes": {k: [max(h["worker_store_read_bytes"].get(k, [0] * width)[w] for h in recs)
                                    for w in range(width)] for k in HELD_KINDS}}


def dataset_label(dataset: dict) -> str:
    """The graph as its user knows it: a built-in's name, or for a user's own files (arrays, file)
    the folder or file they named, not the format."""
    name, path = dataset["name"], dataset.get("path")
    if name in ("arrays", "file") and path:
        return f"{Path(path.rstrip('/')).name} ({name})"
    return name


def describe_run(config: dict) -> str:
    try:
        m = config["model"]
        return (f"{dataset_label(config['dataset'])} - {m['arch'].upper()} x{m['layers']} - "
                f"P={config['partitions']} - " + (f"correction={config['grappa']['correction']}"
                if config.get("strategy", "grappa") == "grappa" else f"strategy {config['strategy']}"))
    except (KeyError, TypeError):
        return "Grappa training"


def plot_history(history: list[dict], path: Path, title: Optional[str] = None,
                 evaluation: str = "exact evaluation", best_epoch: Optional[int] = None,
                 resumed_at: Optional[list[int]] = None) -> None:
    if not history:
        return
    fig = history_figure(history, title, evaluation, best_epoch, resumed_at or [])
    fig.savefig(path, dpi=110)
    plt.close(fig)


def history_figure(history: list[dict], title: Optional[str], evaluation: str,
                   best_epoch: Optional[int], resumed_at: list[int]):
    """Loss and accuracy per epoch; rounds (grey), resumes (dashed) and the best epoch marked."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ep = [h["epoch"] for h in history]
    ax_loss.plot(ep, [h["loss"] for h in history], label="train loss (seeds)")
    # link prediction plots MRR (val, test), node classification accuracy (train, val, test)
    metric = "mrr" if any(h.get("val_mrr") is not None for h in history) else "acc"
    ev = [h for h in history if h.get(f"val_{metric}") is not None]
    for split, style in (("train", ":"), ("val", "-"), ("test", "--")):
        if any(f"{split}_{metric}" in h for h in ev):
            ax_acc.plot([h["epoch"] for h in ev], [h[f"{split}_{metric}"] for h in ev], style, label=split)
    best = next((h for h in ev if h["epoch"] == best_epoch), None)
    if best is not None:
        ax_acc.plot([best_epoch], [best[f"val_{metric}"]], "*", color="black", markersize=11,
                    label=f"best val {best[f'val_{metric}']:.3f} (epoch {best_epoch}, model.pt)")
    starts = sorted({h["round_start"] for h in history if h.get("round_start", 0) > 0})
    for ax in (ax_loss, ax_acc):
        for s in starts:
            ax.axvline(s + 0.5, color="grey", alpha=0.3, lw=1)
        for i, r in enumerate(resumes_in(resumed_at, ep)):
            ax.axvline(r + 0.5, color="tab:red", ls="--", lw=1,
                       label="resumed from a checkpoint" if i == 0 else None)
        ax.set_xlabel("epoch")
        ax.legend(loc="best", fontsize=8)
    ax_loss.set_ylabel("loss")
    ax_acc.set_ylabel(f"{'MRR' if metric == 'mrr' else 'accuracy'} ({evaluation})")
    fig.suptitle((title or "Grappa training") + ("  (grey lines: repartition rounds)" if starts else ""))
    fig.tight_layout()
    return fig


def resumes_in(resumed_at: list[int], epochs: list[int]) -> list[int]:
    """Resumes inside the plotted epochs (a resume of a finished run adds nothing to show)."""
    last = max(epochs, default=0)
    return sorted({r for r in resumed_at if 0 < r < last})
