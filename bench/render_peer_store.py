"""docs/results/peer-store.md from docs/results/peer-store-runs.json (bench/peer_store.py): the
peer benchmark with rounds inside the measured window and, with store s3, Grappa's chunk store on
a storage machine behind a shaped link. Every figure is computed here from the runs; none is typed.

Definitions, one for both systems:
- an epoch's time: Grappa's, its steps plus its round's set-up (the workers' fetch and build, in an
  epoch that starts a round), evaluation excluded; DistDGL's, its steps (it has no rounds);
- an epoch starts a round when its index (from 0) is a positive multiple of grappa.rounds.every;
- steady: the median (statistics.median) of the epochs after the first that start no round;
  boundary: the median of those that start one; their ratio is the round boundary's cost;
- epoch time with rounds included: the mean of every epoch after the first, boundaries included
  (a mean, since over a run rounds cost what they cost on average); DistDGL ÷ Grappa is its ratio.
"""
from __future__ import annotations

import statistics
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, also when loaded by path
import cluster_model as cm  # noqa: E402
from netns import PRESETS, rate_bytes_per_s  # noqa: E402
from probe import QUIET_READINGS  # noqa: E402
import provenance  # noqa: E402
from render_peer import MB, QUIET_LOAD, SHORT, busy, fmt, med, times  # noqa: E402

BOUNDARY_TARGET = 1.5  # issue 37: a round boundary at most this many steady epochs
RATIO_TARGETS = {"coauthor-physics": 3.0, "coauthor-physics-auto": 3.0, "coauthor-physics-sparse": 3.0,
                 "coauthor-physics-sparse-as-read": 3.0, "coauthor-physics-sparse-reach": 3.0,
                 "rmat": 4.0, "rmat-20": 4.0}  # issue 37, P = 8 at 1 Gbit/s
PROJECT_P = 64
EVAL_WORD_SINCE = "13e1e8e"  # the commit from which workers evaluate on the aggregator's word


def starts_round(epoch: int, every: int) -> bool:
    """Whether epoch `epoch` (from 0) starts a round: a positive multiple of the period (0: never)."""
    return every > 0 and epoch > 0 and epoch % every == 0


def parse_key(key: str) -> dict:
    exp, ds, p, layers, system, preset, store, every, epochs, rep = key.split("|")
    return {"experiment": exp, "dataset": ds, "p": int(p), "layers": int(layers), "system": system,
            "preset": preset, "store": store, "every": int(every[1:]), "epochs": int(epochs[1:]), "rep": int(rep)}


def later(rec: dict) -> list[dict]:
    """The epochs after the first (process and allocator warm-up, round 0's set-up)."""
    return rec["epochs"][1:]


def epoch_figures(rec: dict) -> dict:
    """A job's epoch times by the module's definitions."""
    after = later(rec)
    steady = med(e["seconds"] for e in after if not e.get("boundary"))
    boundary = med(e["seconds"] for e in after if e.get("boundary"))
    return {"steady": steady, "boundary": boundary,
            "boundary_ratio": boundary / steady if boundary is not None and steady else None,
            "mean": statistics.mean(e["seconds"] for e in after) if after else None,
            "boundaries": sum(1 for e in after if e.get("boundary"))}


def cpu_figures(rec: dict, p: int) -> dict:
    """A job's CPU-s per epoch (mean of the epochs after the first) by who spent it: Grappa's
    workers (ranks 1..p), its aggregator (rank 0) and the storage machine (its `storage_rank`);
    DistDGL's machines (trainers and servers) together; and all of them per second of epoch."""
    after = later(rec)
    if not after:
        return {}
    machines = [[m["cpu_seconds"] for m in e["machines"]] for e in after]
    out = {"all": statistics.mean(sum(m) for m in machines)}
    if rec["system"] == "grappa":
        rank = rec.get("storage_rank")
        out["workers"] = statistics.mean(sum(c for i, c in enumerate(m[:p + 1]) if i and i != rank) for m in machines)
        out["aggregator"] = statistics.mean(m[0] for m in machines)
        out["storage"] = statistics.mean(m[rank] for m in machines) if rank is not None else None
    out["busy_cores"] = out["all"] / statistics.mean(e["seconds"] for e in after)
    return out


def modelled_mean(rec: dict, preset: str, behind: bool = False) -> Optional[float]:
    """PROJECTION (cluster_model): a job's mean epoch, after the first, had every machine cores of
    its own: each epoch's busiest machine's CPU-seconds plus its busiest link's bytes at the
    preset's rate. The storage machine is one of the machines, its link one of the links: in series
    (`modelled_epoch`) or, `behind`, beside the steps as a prefetch runs (`modelled_epoch_behind`)."""
    after, rate = later(rec), PRESETS.get(preset)
    if not after or rate is None:
        return None
    rate, rank = rate_bytes_per_s(rate), rec.get("storage_rank")
    if behind and rank is not None:
        return statistics.mean(cm.modelled_epoch_behind(e["machines"], rec["system"], rate, rank) for e in after)
    return statistics.mean(cm.modelled_epoch(e["machines"], rec["system"], rate) for e in after)


def store_floor(rec: dict, preset: str) -> Optional[dict]:
    """PROJECTION (cluster_model): the least a job's mean epoch could be were the workers' own cost of
    the store (their fetch and build CPU, its bytes on their links) nothing, with the storage machine
    as it was: each epoch after the first the longer of the job's steps at their cheapest (the least
    modelled epoch of the machines but the storage one, over the job's epochs) and that epoch's
    storage machine working beside them (its CPU plus its link's bytes at the rate), as the prefetch
    runs. Also the storage machine's busiest epoch, split into its CPU and its link's seconds."""
    after, rate, rank = later(rec), PRESETS.get(preset), rec.get("storage_rank")
    if not after or rate is None or rank is None:
        return None
    rate = rate_bytes_per_s(rate)
    sides = [cm.split_behind(e["machines"], rec["system"], rate, rank) for e in after]
    steps = min(rest for rest, _ in sides)
    busiest = max(range(len(after)), key=lambda i: sides[i][1])
    cpu = after[busiest]["machines"][rank]["cpu_seconds"]
    return {"steps": steps, "floor": statistics.mean(max(steps, own) for _, own in sides),
            "storage_cpu": cpu, "storage_link": sides[busiest][1] - cpu}


def machines_of(system: str, p: int, store: str) -> int:
    """Machines a cell's job occupies on a cluster: Grappa's aggregator is one more, and its
    storage machine (store s3) one more again; DistDGL's P machines also serve its partitions."""
    return cm.machines_charged(system, p) + (1 if system == "grappa" and store == "s3" else 0)


def round_bytes(rec: dict) -> dict:
    """Store traffic per round: the storage machine's link over each round's epochs (kernel; with
    prefetch a round's epochs carry the next round's fetch), and the workers' own count of what
    each round fetched (report.json's store_reads)."""
    link = defaultdict(int)
    for e in rec["epochs"]:
        if e.get("storage_bytes") is not None:
            link[e["round"]] += e["storage_bytes"]
    rounds = (rec.get("store_reads") or {}).get("rounds") or []
    fetched = [sum(r["worker_bytes"].get("fetched", [])) for r in rounds]
    ahead = [sum(r["worker_bytes"].get("fetched_ahead", [])) for r in rounds]
    per_worker = [b for r in rounds for b in r["worker_bytes"].get("fetched", [])]
    later = [b for r in rounds if r["round"] > 0 for b in r["worker_bytes"].get("fetched", [])]
    rows = [b for r in rounds for b in r["worker_bytes"].get("fetched_rows", [])]
    as_read = [b for r in rounds for b in r["worker_bytes"].get("fetched_on_demand", [])]
    reused = [b for r in rounds for b in r["worker_bytes"].get("fetched_reused", [])]  # none in older jobs
    held = (rec.get("store_reads") or {}).get("peak_held_bytes") or {}
    return {"link_per_round": [link[k] for k in sorted(link)],
            "link_mean": statistics.mean(link.values()) if link else None,
            "fetched_per_round": fetched, "fetched_mean": statistics.mean(fetched) if fetched else None,
            "ahead_share": sum(ahead) / sum(fetched) if fetched and sum(fetched) else None,
            "per_worker_mean": statistics.mean(per_worker) if per_worker else None,
            "later_per_worker_mean": statistics.mean(later) if later else None,
            "rows_per_worker_mean": statistics.mean(rows) if rows else None,
            "as_read_share": sum(as_read) / sum(rows) if rows and sum(rows) else None,
            "reused_per_worker_mean": statistics.mean(reused) if reused else None,
            "prefetch_memory_peak": max(held.get("prefetch_memory") or [0]) or None,
            "local_disk_peak": max(held.get("local_disk") or [0]) or None}


def usable(runs: dict) -> dict:
    """(dataset, p, layers, preset, store, every, epochs) -> system -> the jobs that count."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for key, rec in runs.items():
        k = parse_key(key)
        if "error" in rec or busy(rec):
            continue
        cell = (k["dataset"], k["p"], k["layers"], k["preset"], k["store"], k["every"], k["epochs"])
        out[cell][k["system"]].append(rec)
    return out


def cell_rows(runs: dict) -> list[dict]:
    """One row a cell: each figure the median over its jobs."""
    rows = []
    for cell, systems in sorted(usable(runs).items()):
        ds, p, layers, preset, store, every, epochs = cell
        g, d = systems.get("grappa", []), systems.get("distdgl", [])
        gf = [epoch_figures(r) for r in g]
        df = [epoch_figures(r) for r in d]
        rb = [round_bytes(r) for r in g]
        row = {"dataset": ds, "p": p, "layers": layers, "preset": preset, "store": store, "every": every,
               "epochs": epochs, "jobs": (len(g), len(d)), "grappa": g, "distdgl": d}
        for name in ("steady", "boundary", "boundary_ratio", "mean"):
            row[name] = med(f[name] for f in gf)
        row["boundaries"] = med(f["boundaries"] for f in gf)
        row["distdgl_mean"] = med(f["mean"] for f in df)
        row["ratio"] = row["distdgl_mean"] / row["mean"] if row["mean"] and row["distdgl_mean"] else None
        for name in ("link_mean", "fetched_mean", "per_worker_mean", "later_per_worker_mean", "rows_per_worker_mean",
                     "reused_per_worker_mean", "as_read_share",
                     "ahead_share", "prefetch_memory_peak", "local_disk_peak"):
            row[name] = med(b[name] for b in rb)
        for who, recs in (("grappa", g), ("distdgl", d)):
            figs = [cpu_figures(r, p) for r in recs]
            for name in ("all", "workers", "aggregator", "storage", "busy_cores"):
                row[f"{who}_cpu_{name}"] = med(f.get(name) for f in figs)
        row["worker_kernel"] = med(med(e["busiest_worker_kernel_bytes"] for e in later(r)) for r in g)
        row["distdgl_kernel"] = med(med(e["busiest_worker_kernel_bytes"] for e in later(r)) for r in d)
        for who, recs in (("grappa", g), ("distdgl", d)):
            for name in ("prepare_seconds", "upload_seconds", "job_start_seconds", "partition_seconds",
                         "trainer_load_seconds"):
                row[f"{who}_{name}"] = med((r.get("setup") or {}).get(name) for r in recs)
        row["after_storage"] = med((r.get("after_training") or {}).get("storage_bytes") for r in g)
        row["model"] = med(modelled_mean(r, preset) for r in g)
        row["model_behind"] = med(modelled_mean(r, preset, behind=True) for r in g)
        row["distdgl_model"] = med(modelled_mean(r, preset) for r in d)
        floors = [f for f in (store_floor(r, preset) for r in g) if f is not None]
        for name in ("steps", "floor", "storage_cpu", "storage_link"):
            row[f"store_{name}"] = med(f[name] for f in floors)
        row["floor_ratio"] = row["distdgl_model"] / row["store_floor"] if row["store_floor"] and row["distdgl_model"] else None
        cost = machines_of("distdgl", p, store) / machines_of("grappa", p, store)
        for name, grappa in (("model_ratio", row["model"]), ("behind_ratio", row["model_behind"])):
            row[name] = row["distdgl_model"] / grappa if grappa and row["distdgl_model"] else None
            row[name.replace("ratio", "cost_ratio")] = row[name] * cost if row[name] else None
        rows.append(row)
    return rows


def storage_projection(row: dict, p_to: int = PROJECT_P) -> Optional[dict]:
    """PROJECTION (cluster_model.storage_round): the storage link's seconds per round at p_to
    workers, from the measured bytes each worker fetched per round after the first (round 0 is the
    job's start, with no round before it to hide behind; a job of one round: its own), against
    the round's training time at the measured P (every x steady epoch), which a prefetch can hide
    it behind."""
    rate = PRESETS.get(row["preset"])
    per_worker = row.get("later_per_worker_mean") or row["per_worker_mean"]
    if per_worker is None or rate is None or row["steady"] is None or row["store"] != "s3":
        return None
    seconds = cm.storage_round_seconds(per_worker, p_to, rate_bytes_per_s(rate))
    train = row["every"] * row["steady"]
    return {"p": p_to, "link_seconds": seconds, "round_train_seconds": train,
            "exposed_per_epoch": cm.exposed_store_seconds(seconds, train, row["every"])}


def mb(v) -> str:
    return fmt(None if v is None else v / MB, ".1f")


def label(row: dict) -> str:
    return f"{SHORT.get(row['dataset'], row['dataset'])} P={row['p']} every {row['every']}"


def target_cell(row: dict) -> str:
    t = RATIO_TARGETS.get(row["dataset"])
    if t is None or row["p"] != 8 or row["preset"] != "1gbit" or row["ratio"] is None:
        return "–"
    return f"≥ {t:.0f}x: " + ("met" if row["ratio"] >= t else "missed")


def boundary_cell(row: dict) -> str:
    if row["boundary_ratio"] is None:
        return "–"
    met = "met" if row["boundary_ratio"] <= BOUNDARY_TARGET else "missed"
    return f"{row['boundary_ratio']:.2f} (≤ {BOUNDARY_TARGET:.1f}: {met})"


def main_table(rows: list[dict]) -> list[str]:
    md = ["| dataset | P | link | layers | store | rounds every | epochs | jobs (G/D) | Grappa steady s | "
          "boundary s | boundary ÷ steady | Grappa mean s (rounds incl.) | DistDGL mean s | **DistDGL ÷ Grappa** | "
          "target | busiest worker kernel MB/epoch (G/D) | Grappa's code (measured) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {SHORT.get(r['dataset'], r['dataset'])} | {r['p']} | {r['preset']} | {r['layers']} | "
                  f"{r['store']} | {r['every']} | {r['epochs']} | {r['jobs'][0]}/{r['jobs'][1]} | "
                  f"{fmt(r['steady'])} | {fmt(r['boundary'])} | {boundary_cell(r)} | {fmt(r['mean'])} | "
                  f"{fmt(r['distdgl_mean'])} | **{times(r['ratio'])}** | {target_cell(r)} | "
                  f"{mb(r['worker_kernel'])} / {mb(r['distdgl_kernel'])} | {provenance.describe(r['grappa'])} |")
    return md


def store_table(rows: list[dict]) -> list[str]:
    md = ["| cell | storage link MB per round | workers' fetched MB per round (all) | per worker per round MB | "
          "per worker per round after the first MB | "
          "of it halo feature rows MB | from the folder MB | rows fetched as read | fetched ahead | "
          "peak prefetch memory MB | peak local folder MB | storage link MB after training |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["grappa"]:
            continue
        ahead, as_read = ("–" if r[k] is None else f"{100 * r[k]:.0f}%" for k in ("ahead_share", "as_read_share"))
        md.append(f"| {label(r)} ({r['store']}) | {mb(r['link_mean'])} | {mb(r['fetched_mean'])} | "
                  f"{mb(r['per_worker_mean'])} | {mb(r['later_per_worker_mean'])} | {mb(r['rows_per_worker_mean'])} | "
                  f"{mb(r['reused_per_worker_mean'])} | {as_read} | {ahead} | "
                  f"{mb(r['prefetch_memory_peak'])} | "
                  f"{mb(r['local_disk_peak'])} | {mb(r['after_storage'])} |")
    return md


def figures_table(rows: list[dict], columns: dict[str, str]) -> list[str]:
    """One line a cell: its label, then each column's figure (`columns`: header -> row key)."""
    md = ["| cell | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in rows:
        md.append(f"| {label(r)} ({r['store']}) | " + " | ".join(fmt(r[k]) for k in columns.values()) + " |")
    return md


def cpu_table(rows: list[dict]) -> list[str]:
    return figures_table(rows, {
        "Grappa workers CPU-s": "grappa_cpu_workers", "aggregator CPU-s": "grappa_cpu_aggregator",
        "storage machine CPU-s": "grappa_cpu_storage", "Grappa cores busy": "grappa_cpu_busy_cores",
        "DistDGL machines CPU-s": "distdgl_cpu_all", "DistDGL cores busy": "distdgl_cpu_busy_cores"})


def setup_table(rows: list[dict]) -> list[str]:
    return figures_table(rows, {
        "Grappa prepare s": "grappa_prepare_seconds", "upload s": "grappa_upload_seconds",
        "Grappa job start s": "grappa_job_start_seconds", "DGL partition s": "distdgl_partition_seconds",
        "DistDGL job start s": "distdgl_job_start_seconds", "DGL trainers' load s": "distdgl_trainer_load_seconds"})


def epoch_tables(rows: list[dict]) -> list[str]:
    md = []
    for r in rows:
        for system in ("grappa", "distdgl"):
            for i, rec in enumerate(r[system]):
                job = (rec.get("setup") or {}).get("load_before_job")
                between = "" if job is None else f", before the job (after the upload) {fmt(job[0], '.2f')}"
                md += ["", f"**{label(r)} ({r['store']}), {system}, job {i + 1}** (1-minute load before "
                       f"{fmt(rec['load_before'][0], '.2f')}{between}, after {fmt(rec['load_after'][0], '.2f')})", "",
                       "| epoch | round | starts a round | seconds | of them round set-up s | storage link MB | "
                       "busiest worker kernel MB |", "|---|---|---|---|---|---|---|"]
                for e in rec["epochs"]:
                    md.append(f"| {e['epoch']} | {e.get('round', '–')} | {'yes' if e.get('boundary') else ''} | "
                              f"{fmt(e['seconds'])} | {fmt(e.get('round_seconds'))} | {mb(e.get('storage_bytes'))} | "
                              f"{mb(e['busiest_worker_kernel_bytes'])} |")
    return md


def model_error(model: Optional[float], measured: Optional[float]) -> str:
    return "–" if model is None or not measured else f"{100 * (model / measured - 1):+.0f}%"


def model_lines(rows: list[dict]) -> list[str]:
    rows = [r for r in rows if r["model"] is not None or r["distdgl_model"] is not None]
    if not rows:
        return []
    md = ["", "## PROJECTION: the same cells on a cluster (cluster-time model)", "",
          "**A projection of `bench/cluster_model.py` from the measured epochs, not a measurement**: each "
          "epoch after the first as it would take if every machine (the storage machine too) had cores of its "
          "own, the busiest machine's CPU-seconds plus the busiest link's bytes at the link's rate (no latency: "
          "the links add none); the mean over those epochs, the median over the cell's jobs. Two bounds for "
          "Grappa's store: *in series*, the storage machine's CPU and link added to the steps like any "
          "machine's (what a round fetched on demand would cost), and *behind the steps*, the storage machine "
          "working beside the others as the prefetch does, the epoch the longer of the two (the workers' side "
          "of the fetch stays on their links and CPU). The CPU figures are those measured on this host, where "
          "a process waiting for a core also spends CPU waking and switching, so both systems are charged for "
          "this host's crowding. *Error*: model ÷ measured − 1; where few processes share the 2 cores (P = 2) "
          "it says how far the model can be trusted, above it the measured time includes the wait for those "
          "cores, which the model leaves out by design. *Machines*: Grappa P + 1, and + 1 for its storage "
          "machine with store s3; DistDGL P (its machines also serve its partitions); the ratio of "
          "machine-seconds is the comparison at equal cost.", "",
          "| cell | Grappa model s: in series / behind | measured s | error (in series) | DistDGL model s | "
          "measured s | error | DistDGL ÷ Grappa measured | **DistDGL ÷ Grappa (model): in series / behind** | "
          "target (P = 8, in series) | machines (G/D) | DistDGL ÷ Grappa (model, machine-s): in series / behind |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = RATIO_TARGETS.get(r["dataset"])
        target = ("–" if t is None or r["p"] != 8 or r["preset"] != "1gbit" or r["model_ratio"] is None
                  else f"≥ {t:.0f}x: " + ("met" if r["model_ratio"] >= t else "missed"))
        md.append(f"| {label(r)} ({r['store']}) | {fmt(r['model'])} / {fmt(r['model_behind'])} | {fmt(r['mean'])} | "
                  f"{model_error(r['model'], r['mean'])} | {fmt(r['distdgl_model'])} | {fmt(r['distdgl_mean'])} | "
                  f"{model_error(r['distdgl_model'], r['distdgl_mean'])} | {times(r['ratio'])} | "
                  f"**{times(r['model_ratio'])} / {times(r['behind_ratio'])}** | {target} | "
                  f"{machines_of('grappa', r['p'], r['store'])}/{machines_of('distdgl', r['p'], r['store'])} | "
                  f"{times(r['model_cost_ratio'])} / {times(r['behind_cost_ratio'])} |")
    return md


def store_free(rows: list[dict]) -> list[dict]:
    """Each `local` cell (Grappa's store on the host's disk: no store traffic on any link) paired with
    DistDGL's jobs of its s3 twin (same graph, P, depth, link, period and epochs; DistDGL never reads
    Grappa's store, so its jobs are the same either way): the ratio Grappa could reach if its store
    cost nothing, measured and modelled."""
    twins = {(r["dataset"], r["p"], r["layers"], r["preset"], r["every"], r["epochs"]): r
             for r in rows if r["store"] != "local" and r["distdgl_mean"] is not None}
    out = []
    for r in rows:
        d = twins.get((r["dataset"], r["p"], r["layers"], r["preset"], r["every"], r["epochs"]))
        if r["store"] != "local" or d is None or r["mean"] is None:
            continue
        model = d["distdgl_model"] / r["model"] if r["model"] and d["distdgl_model"] else None
        out.append({"row": r, "twin": d, "measured": d["distdgl_mean"] / r["mean"], "model": model,
                    "target": RATIO_TARGETS.get(r["dataset"]) if r["p"] == 8 and r["preset"] == "1gbit" else None,
                    "same_host": _hosts(r["grappa"]) == _hosts(d["distdgl"])})
    return out


def _hosts(records: list[dict]) -> set:
    """The hosts (CPU, vector units, cores, kernel) that ran `records` (None: not recorded)."""
    return {tuple((h or {}).get(k) for k in ("cpu", "simd", "cores", "kernel"))
            for h in ((rec.get("measured") or {}).get("host") for rec in records)}


def store_free_lines(rows: list[dict]) -> list[str]:
    pairs = store_free(rows)
    if not pairs:
        return []
    md = ["", "The ceiling a store lever can reach: a `local` cell's Grappa (its store on this host's disk, so none "
              "of its bytes cross a link) against DistDGL's jobs of the s3 cell beside it.", ""]
    for f in pairs:
        r, t = f["row"], f["target"]
        line = (f"- {label(r)}: Grappa with no store traffic {fmt(r['mean'])} s an epoch measured, "
                f"{fmt(r['model'])} s modelled; DistDGL ÷ Grappa {times(f['measured'])} measured, "
                f"**{times(f['model'])} modelled**")
        if not f["same_host"]:
            line += (": not a ceiling, the two ran on different hosts (the table of hosts below); "
                     "measure the local cell again beside the s3 cell's DistDGL jobs")
        elif t is not None and f["model"] is not None:
            line += (f": at or above the {t:.0f}x target, so a cut in the store's cost can close the gap"
                     if f["model"] >= t else
                     f": below the {t:.0f}x target even so, so no cut in the store's bytes alone meets it; "
                     "only cheaper steps (Grappa's CPU a step on this host) can")
        md.append(line + ".")
    return md


def floor_lines(rows: list[dict]) -> list[str]:
    rows = [r for r in rows if r["floor_ratio"] is not None]
    if not rows:
        return []
    md = ["", "## PROJECTION: what the storage machine leaves (cluster-time model)", "",
          "**A projection of `bench/cluster_model.py` from the measured epochs, not a measurement**: how far "
          "a cut in the workers' own cost of the store (their fetch and build CPU, its bytes on their links) "
          "could take a cell, the storage machine kept as measured. Each epoch after the first is taken as the "
          "longer of the job's steps at their cheapest (the least modelled epoch over the job's epochs, the "
          "storage machine left out) and that epoch's storage machine "
          "working beside them (its CPU plus its link's bytes at the rate, as the prefetch runs); the mean of "
          "those is the floor, and DistDGL's modelled mean over it the most Grappa's workers could reach. The "
          "storage machine's busiest epoch is shown split into its CPU (SeaweedFS serving the round) and its "
          "link. Medians over the cell's jobs. In a job with a round every 2 epochs every epoch after the first "
          "fetches ahead or starts a round, so its cheapest epoch still holds some of a round's work: its floor "
          "is above what the steps alone would give (compare the same graph's cell with a round every 10).", "",
          "| cell | steps at their cheapest s | storage machine, busiest epoch: CPU s + link s | floor s | "
          "**DistDGL ÷ Grappa at most (model)** | DistDGL ÷ Grappa now (model, behind) | target (P = 8) |",
          "|---|---|---|---|---|---|---|"]
    verdicts = []
    for r in rows:
        t = RATIO_TARGETS.get(r["dataset"]) if r["p"] == 8 and r["preset"] == "1gbit" else None
        target = "–" if t is None else f"≥ {t:.0f}x: " + ("reachable" if r["floor_ratio"] >= t else "out of reach")
        md.append(f"| {label(r)} ({r['store']}) | {fmt(r['store_steps'])} | {fmt(r['store_storage_cpu'])} + "
                  f"{fmt(r['store_storage_link'])} | {fmt(r['store_floor'])} | **{times(r['floor_ratio'])}** | "
                  f"{times(r['behind_ratio'])} | {target} |")
        if t is not None and r["behind_ratio"] is not None and r["behind_ratio"] < t:
            verdicts.append(
                f"- {label(r)}: misses {t:.0f}x on the model ({times(r['behind_ratio'])} behind the steps); "
                + (f"a cut in the workers' fetch and build alone could reach {times(r['floor_ratio'])}, so that "
                   "is where the gap lies." if r["floor_ratio"] >= t else
                   f"even with the workers' fetch and build free it reaches {times(r['floor_ratio'])}: the storage "
                   "machine's own time per round (its CPU and its link's bytes) must shrink too, that is fewer "
                   "store bytes a round or a cheaper store server."))
        elif t is not None and r["model_ratio"] is not None and r["model_ratio"] < t:
            verdicts.append(
                f"- {label(r)}: misses {t:.0f}x in series ({times(r['model_ratio'])}) and meets it behind the "
                f"steps ({times(r['behind_ratio'])}). The in-series bound charges the storage machine's CPU and "
                f"link as though the steps waited for them (its busiest epoch: {fmt(r['store_storage_cpu'])} s + "
                f"{fmt(r['store_storage_link'])} s), where the prefetch runs them beside the steps; it is met "
                "in series only if the store's own time a round shrinks, or the workers' fetch and build.")
    return md + ([""] + verdicts if verdicts else [])


def plot_ratios(rows: list[dict], out: Path) -> Optional[str]:
    """peer-store.png: per cell with both systems, DistDGL ÷ Grappa measured and modelled (in
    series, behind the steps), each cell's target a tick beside it (P = 8 at 1 Gbit/s only)."""
    rows = [r for r in rows if r["ratio"] is not None]
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from render_peer import _save
    series = (("ratio", "measured (2 cores shared)"), ("model_ratio", "PROJECTION: store in series"),
              ("behind_ratio", "PROJECTION: store behind the steps"))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(rows)), 4.5))
    width = 0.8 / len(series)
    for i, (key, name) in enumerate(series):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], [r[key] or 0 for r in rows], width, label=name)
    for x, r in enumerate(rows):
        t = RATIO_TARGETS.get(r["dataset"]) if r["p"] == 8 and r["preset"] == "1gbit" else None
        if t:
            ax.hlines(t, x - 0.4, x + 0.4, colors="black", linewidth=2,
                      label="target" if "target" not in ax.get_legend_handles_labels()[1] else None)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(["\n".join(textwrap.wrap(SHORT.get(r["dataset"], r["dataset"]), 14))
                        + f"\nP={r['p']} every {r['every']}" for r in rows], fontsize=6.5)
    ax.set_ylabel("DistDGL ÷ Grappa, epoch time (rounds incl.)")
    ax.set_title(f"The store on a {rows[0]['preset']} link: measured and modelled", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, out, "peer-store.png")


def projection_lines(rows: list[dict]) -> list[str]:
    proj = [(r, storage_projection(r)) for r in rows]
    proj = [(r, p) for r, p in proj if p]
    if not proj:
        return []
    md = ["", f"## PROJECTION: the storage link at P = {PROJECT_P}", "",
          "**A projection of `bench/cluster_model.py`, not a measurement**: the storage machine's one link "
          "carries every worker's round fetch, so at P workers a round's store traffic takes P x (bytes a worker "
          "fetched per round after the first, as measured: round 0 is the job's start, with no round to hide "
          "behind) ÷ rate, the per-worker bytes kept as measured (a worker's chunks "
          "shrink with P, its halo does not). Beside it, the round's training time at the measured P, behind "
          "which the prefetch can hide it; what it leaves uncovered, per epoch of the round, is the last "
          f"column (at P = {PROJECT_P} a round's training is shorter than at the measured P: an optimistic cover).", "",
          "| cell | storage link s per round (projected) | round's training s (measured P) | "
          "uncovered s per epoch (projected) |", "|---|---|---|---|"]
    for r, p in proj:
        md.append(f"| {label(r)} | {fmt(p['link_seconds'])} | {fmt(p['round_train_seconds'])} | "
                  f"{fmt(p['exposed_per_epoch'])} |")
    return md


def default_store(runs: dict) -> str:
    """What the default store (featureDtype auto) chose for Physics, as its runs recorded it."""
    chosen = sorted({r["store_encoding"] for k, r in runs.items()
                     if k.split("|")[1] == "coauthor-physics-auto" and r.get("store_encoding")})
    what = " and ".join(f"`{c}`" for c in chosen) if chosen else "(no run recorded yet)"
    return (f"*Physics (default store)* is the job as a user gets it, featureDtype left at `auto`, the "
            f"smallest lossless encoding: its runs' stores chose {what}.")


def render(runs: dict, out: Path) -> Path:
    rows = cell_rows(runs)
    md = ["# Peer benchmark with the store on a link: Grappa vs DistDGL, rounds included", "",
          "Generated by `bench/render_peer_store.py` from `peer-store-runs.json` (`bench/peer.py --store ...`, "
          "`make bench-peer-store`). As in `peer.md`, every machine is a network namespace with tbf-shaped links "
          "on this 2-core machine. With store `s3`, Grappa's chunk store is on a storage machine of its own "
          "(SeaweedFS's S3 gateway in its namespace, behind the same shaped link), uploaded there before the job "
          "from the aggregator's namespace, and the workers fetch each round's data from it by ranged requests, "
          "the next round's in the background (storage.fetch prefetch); their storeDir is an empty mirror, so "
          "every store byte any process reads crosses that link. With store `local`, the store is on the host's "
          "disk as in `peer.md`. DistDGL loads its partitions from the host's disk at its start (its set-up).", "",
          "*Physics* keeps its feature rows as float32 (`dataset.featureDtype: float32`, 33.7 KB a row). "
          "*Physics (sparse store)* is the same graph and job with Grappa's store keeping each feature row, "
          "word counts mostly 0, as its non-zero (column, value) pairs padded to the fullest row "
          "(`dataset.featureDtype: sparse`). " + default_store(runs) + " The workers compute on the same "
          "float32 values in each. DistDGL reads the same float32 features in all; its own runs are "
          "measured again beside each. Two variants "
          "change only how a round's halo feature rows come (`storage.haloRows`): *halo rows as read* fetches "
          "each row when a step first reads it, *reachable halo rows ahead* fetches with the next round the rows "
          "its seeds' L-hop in-neighbourhood can reach (the rest as read); the sparse store's own cell brings "
          "the whole halo's rows.", "",
          "Evaluation runs after the last epoch only (evalEvery = epochs; it cannot be off): with a bucket store it "
          "mirrors the whole store. The workers start it on the aggregator's word, sent once every report of the "
          f"last epoch is in and held {QUIET_READINGS} probe readings by the harness (the probe splits a "
          "reading between two times linearly), so it is outside every epoch's window and shown apart (storage "
          f"link MB after training). In jobs on code before {EVAL_WORD_SINCE} a worker started it as soon as it "
          "had sent its last report, so part of it could fall in the last epoch's window.", "",
          "Definitions (one for both systems): an epoch's time is Grappa's steps plus its round's set-up (fetch "
          "and build, in an epoch that starts a round), DistDGL's steps; an epoch starts a round when its index "
          "from 0 is a positive multiple of the period; *steady* is the median of the epochs after the first that "
          "start none, *boundary* the median of those that start one; *mean (rounds incl.)* is the mean of every "
          "epoch after the first, boundaries included, and **DistDGL ÷ Grappa is the ratio of those means**. "
          "A cell's figure is the median over its jobs. Targets (issue 37): a boundary at most "
          f"{BOUNDARY_TARGET:.1f} steady epochs; at P = 8 and 1 Gbit/s, DistDGL ÷ Grappa at least "
          + ", ".join(f"{t:.0f}x on {SHORT.get(d, d)}" for d, t in RATIO_TARGETS.items()) + ". "
          f"A run counts only when the 1-minute load average was at most {QUIET_LOAD:.1f} before it "
          "(the harness waits, else refuses the cell); each job's load before and after is in its epoch table. "
          "*Grappa's code (measured)*: the commit its jobs ran (+changes: with uncommitted edits) and the date; "
          "*before X* for a job recorded before jobs carried it: X is the commit that first holds its record, so "
          "the code that ran is X's parent or older (bench/provenance.py).", "",
          "## Epoch time with rounds (measured)", ""]
    md += main_table(rows)
    md += ["", "## CPU per epoch (measured)", "",
           "Each machine's CPU-seconds in an epoch by the probe (every process in its namespace), the mean of "
           "the epochs after the first, the median over the cell's jobs: Grappa's workers together, its "
           "aggregator, the storage machine (SeaweedFS, with store s3); DistDGL's machines together (each a "
           "trainer and a server). *Cores busy* is all of a system's CPU-seconds in an epoch over the epoch's "
           "seconds: every machine shares this host's cores, so where it is near their count the epoch is as "
           "long as its CPU makes it, the storage machine's included (on a cluster that machine has cores of "
           "its own).", ""]
    md += cpu_table(rows)
    md += ["", "## The store's traffic (measured)", "",
           "Storage link: the storage machine's sent + received bytes by the kernel's counters over a round's "
           "epochs (set-up included; with prefetch a round's epochs carry the next round's fetch), mean over the "
           "job's rounds. Workers' fetched: their own count of the store bytes each round's fetch read (report.json "
           "`store_reads`), summed over workers, mean over rounds; per worker: the mean over workers and rounds, "
           "and the same mean over the rounds after the first (round 0 copies the base chunks, once a job); "
           "of it the halo's feature rows (per worker per round), and the share of those fetched as the steps "
           "first read them (a mini-batch round's: the rest of its data comes at its start or ahead); "
           "from the folder (per worker per round, not in what was fetched): the store bytes the worker's folder "
           "held from the rounds before, taken from there instead of the store: halo rows (the runs its last halo "
           "was read in, its last chunk copies; in jobs from the code that keeps it, the halo of its base chunks, "
           "fetched once a job, whose rows a round's halo points at rather than copies), and, in jobs from the code that keeps them, the chunks' index "
           "files and a new variable chunk's feature rows its last halo held (halo rows only in jobs run on "
           "4f62d5c or d8a0670; – for jobs from before it was counted); "
           "fetched ahead: the share fetched during the round before. Peak prefetch memory: the more of the background fetch's buffers and the next round's local graph it built, held until that round starts (in jobs from before it built the graph, the buffers alone); it and the folder: the largest worker's.",
           ""]
    md += store_table(rows)
    md += ["", "## Set-up (measured, not in any epoch)", "",
           "Grappa: prepare (the chunk store written on the host, before the job), upload (that store into the "
           "bucket from the aggregator's namespace over the storage link, as `grappa prepare` with storage.s3 "
           "uploads it), "
           "job start (launcher start to the first epoch's steps: processes, the ring, round 0's fetch and build). "
           "DistDGL: DGL's partition_graph (before the job), job start (servers start and load their partitions, "
           "trainers connect, to the first epoch's steps), and the trainers' own wait for the DistGraph.", ""]
    md += setup_table(rows)
    md += model_lines(rows)
    md += store_free_lines(rows)
    md += floor_lines(rows)
    if plot_ratios(rows, out):
        md += ["", "![DistDGL ÷ Grappa per cell: measured, and the two model bounds, against the targets]"
                   "(peer-store.png)"]
    md += projection_lines(rows)
    hosts = provenance.hosts_table((f"{label(r)} ({r['store']})", r["grappa"] + r["distdgl"]) for r in rows)
    if hosts:
        md += ["", "## The hosts the jobs ran on (measured)", "",
               "Each job records its host (bench/provenance.py): the CPU, its widest vector units, the cores, "
               "the kernel release, and what a system call and a minor page fault cost on it (CPU µs, measured "
               "when the job was recorded). A kernel that makes those dear charges every message between "
               "processes more CPU (each ring pass of an all-reduce, each RPC), so cells measured on different "
               "hosts compare less well than cells of one host. Jobs "
               "recorded before a field was kept show it as not recorded; earlier jobs have no host at all.", ""]
        md += hosts
    md += ["", "## Every epoch (measured)"] + epoch_tables(rows)
    left = [f"- `{k}`: {r['error'].strip().splitlines()[-1][:200]}" for k, r in sorted(runs.items()) if "error" in r]
    left += [f"- `{k}`: 1-minute load average {r['load_before'][0]:.2f} before the run"
             for k, r in sorted(runs.items()) if "error" not in r and busy(r)]
    if left:
        md += ["", "## Runs left out (failed, refused, or busy)", ""] + left
    path = out / "peer-store.md"
    path.write_text("\n".join(md) + "\n")
    return path
