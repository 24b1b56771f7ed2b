"""Grappa vs DistDGL vs our full-communication mode, on the same graphs, model and throttled links.

Every machine is a network namespace (bench/netns.py) with tbf-shaped links. Grappa: one
aggregator machine plus P worker machines, mini-batch GraphSAGE. DistDGL (bench/distdgl_job.py,
its own environment): P machines, each with one DistGraph server and one trainer, DGL's METIS
partitions, the same model, fanouts, batch size, learning rate and epochs. The full-communication
mode has no mini-batch path: it runs full-graph GraphSAGE on the same partitions (labelled so).
Bytes and CPU come from bench/probe.py for every system (kernel counters of each namespace's link,
CPU seconds of its processes), beside Grappa's own exact counters and, per worker and round, the
bytes each Grappa worker read from the chunk store (which no link here carries). Every run of every
system waits for a quiet machine (1-minute load average at most --quiet-load) and is refused when it
stays busy; the load averages before and after each run are in its record. Results accumulate in
docs/results/peer-runs.json (delete entries to re-measure); bench/render_peer.py writes
docs/results/peer.md, its plots and the cluster-time projections (bench/cluster_model.py).

    python bench/peer.py --datasets rmat --partitions 4,8 --presets 1gbit --layers 3 --repeats 3
    python bench/peer.py --experiment accuracy --datasets rmat --layers 2,3,4 --epochs 10
    python bench/peer.py --smoke          # seconds: a tiny graph, P = 2, both systems
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "trainer"), os.environ.get("PYTHONPATH")]))

import distdgl_job  # noqa: E402
from grappa.config import TrainConfig  # noqa: E402
from grappa.data.datasets import load_dataset  # noqa: E402
from grappa.data.store.preparation import prepare_store  # noqa: E402
from grappa.runtime.local_job import LocalJob  # noqa: E402
from netns import PRESETS, NetnsUnavailable, ThrottledNetwork, reap_stale  # noqa: E402
from network import save  # noqa: E402
from probe import Probe  # noqa: E402
from render_peer import QUIET_LOAD, best_val_test, render  # noqa: E402

RESULTS = ROOT / "docs" / "results"
SHOWN = ("epoch_seconds", "kernel_bytes_per_epoch", "test_acc", "error")  # printed per run
DATASETS = {
    "coauthor-physics": {"name": "coauthor-physics"},
    "rmat": {"name": "rmat", "synthetic": {"scale": 17, "numFeatures": 64}},  # 131K nodes, 2.1M edges
    # 1M nodes, 16.8M edges: a graph on which P = 64 still leaves each machine real work
    "rmat-20": {"name": "rmat", "synthetic": {"scale": 20, "numFeatures": 64}},
    "tiny": {"name": "csbm", "synthetic": {"numNodes": 2000, "numFeatures": 16}},
}


QUIET_WAIT_S = 600  # how long a run waits for the machine to be quiet before it is refused


class MachineBusy(RuntimeError):
    """The machine was not quiet before a run: the cell is refused, not measured."""


def load_now() -> list[float]:
    """The 1-, 5- and 15-minute load averages."""
    return [round(x, 3) for x in os.getloadavg()]


def wait_quiet(limit: float = QUIET_LOAD, wait_s: float = QUIET_WAIT_S, read=load_now,
               sleep=time.sleep, clock=time.monotonic, poll_s: float = 10.0) -> list[float]:
    """The load averages once the 1-minute one is at most `limit`, read every `poll_s` for up to
    `wait_s` (the previous job's processes leave it as e^(-t/60): from 8 to 1 in about 2 minutes);
    raises MachineBusy, naming the load, when the machine stays busy."""
    deadline = clock() + wait_s
    while True:
        load = read()
        if load[0] <= limit:
            return load
        if clock() >= deadline:
            raise MachineBusy(f"machine busy: 1-minute load average {load[0]:.2f} > {limit:.2f} "
                              f"after waiting {wait_s:.0f} s (load {load}); the cell is refused")
        sleep(poll_s)


def grappa_config(dataset: str, strategy: str, partitions: int, layers: int, epochs: int,
                  eval_every: int, work: Path, batch_size: int = 1000) -> TrainConfig:
    mini = strategy == "grappa"  # the full-communication mode trains full-graph only
    return TrainConfig.model_validate({
        "strategy": strategy, "partitions": partitions, "dataset": DATASETS[dataset],
        "model": {"arch": "sage", "layers": layers, "hidden": 128, "dropout": 0.5},
        "training": {"mode": "mini-batch" if mini else "full-graph", "batchSize": batch_size,
                     "epochs": epochs, "evalEvery": eval_every, "evalMode": "exact"},
        "checkpoint": {"interval": 0},
        "runDir": str(work / f"run-{strategy}-{partitions}-{layers}"),
        "storeDir": str(work / f"store-{dataset}-{partitions}"),
    })


def distdgl_model(cfg: TrainConfig, classes: int) -> dict:
    """DistDGL's trainer arguments, read off the Grappa run's configuration."""
    t = cfg.training
    return {"classes": classes, "layers": cfg.model.layers, "hidden": cfg.model.hidden,
            "dropout": cfg.model.dropout, "fanouts": cfg.fanouts, "batch_size": t.batch_size,
            "lr": t.lr, "weight_decay": t.weight_decay, "epochs": t.epochs, "seed": t.seed}


def steady(values: list[float], warmup: int = 1) -> float:
    """Median after the first epoch (process and allocator warm-up)."""
    return statistics.median(values[warmup:] or values)


def per_epoch(probe: Probe, epochs: list[dict]) -> list[dict]:
    return [{"train_seconds": e["train_seconds"], "steps": e.get("steps"),
             "machines": probe.window(e["started_at"], e["ended_at"])} for e in epochs]


def summary(system: str, epochs: list[dict], curve: list[dict], extra: dict) -> dict:
    """One job: its steady epoch time, the busiest machine's kernel bytes per epoch, the curve."""
    kernel = [max(m["sent_bytes"] + m["received_bytes"] for m in e["machines"]) for e in epochs]
    return {"system": system, "epoch_seconds": steady([e["train_seconds"] for e in epochs]),
            "kernel_bytes_per_epoch": int(steady(kernel)), "epochs": epochs, "curve": curve, **extra}


class Peer:
    """Caches what several runs share: loaded graphs, their npz export, DGL partitions."""

    def __init__(self, work: Path):
        self.work = work
        self.data: dict[str, object] = {}
        self._python: Optional[str] = None

    @property
    def python(self) -> str:
        if self._python is None:
            self._python = distdgl_job.peer_python()
        return self._python

    def graph(self, dataset: str) -> tuple[object, Path]:
        path = self.work / f"{dataset}.npz"
        if dataset not in self.data:
            self.data[dataset] = load_dataset(grappa_config(dataset, "grappa", 2, 2, 1, 1, self.work).dataset)
            distdgl_job.export_graph(self.data[dataset], path)
        return self.data[dataset], path

    def dgl_partitions(self, dataset: str, parts: int, method: str = "metis") -> str:
        out = self.work / f"dgl-{dataset}-{parts}-{method}"
        if not (out / "g.json").exists():
            distdgl_job.partition(self.python, self.graph(dataset)[1], parts, method, out)
        return str(out / "g.json")

    def run_grappa(self, cfg: TrainConfig, net: ThrottledNetwork) -> dict:
        prepare_store(cfg, progress=False)
        with Probe(net) as probe:
            report = LocalJob(cfg, progress=False, threads=1, placement=net).run()
        hist = report["history"]
        epochs = per_epoch(probe, hist)
        whole = probe.window(probe.times[0], probe.times[-1])
        for e, h in zip(epochs, hist):  # our exact counters, per worker, both directions
            e["ours_worker_bytes"] = [t + f for t, f in zip(h["worker_train_bytes"], h["worker_fetch_bytes"])]
            # beside the kernel's bytes, what no link here carries: each worker's reads from the
            # chunk store in the epoch's round so far (structure, own and halo rows; all, distinct)
            e["store_read_bytes"] = h.get("worker_store_read_bytes")
        curve, t = [], 0.0
        for h in hist:
            t += h["train_seconds"]
            curve.append({"epoch": h["epoch"], "cum_seconds": t, "val_acc": h.get("val_acc"),
                          "test_acc": h.get("test_acc")})
        ours = [max(e["ours_worker_bytes"]) for e in epochs]
        return summary(cfg.strategy, epochs, curve, {
            "ours_worker_bytes_per_epoch": int(steady(ours)), "parameters": report["parameters"],
            "job_machines": whole, "ours_worker_bytes_total": [sum(col) for col in zip(
                *(e["ours_worker_bytes"] for e in epochs))],
            # the aggregator's own counters of every kind, over its epochs (set-up before excluded)
            "ours_aggregator_bytes_total": sum(h["train_bytes"] + h["eval_bytes"] + h["control_bytes"]
                                               for h in hist),
            "test_acc": report["result"]["test_acc"],
            # per worker and round: bytes read from the chunk store (report.json's store_reads)
            "store_reads": report.get("store_reads")})

    def run_distdgl(self, dataset: str, cfg: TrainConfig, net: ThrottledNetwork, out: Path,
                    method: str = "metis") -> dict:
        data, graph = self.graph(dataset)
        model = distdgl_model(cfg, int(data.y.max()) + 1)
        part = self.dgl_partitions(dataset, cfg.partitions, method)
        with Probe(net) as probe:
            records = distdgl_job.DistDGLJob(self.python, net, part, model).run(out)
        # the train nodes DGL's node_split handed the trainers: the exported split, all of it?
        split = sum(r["train_nodes"] for r in records)
        trainers = [r["epochs"] for r in records]
        first = trainers[0]
        epochs = per_epoch(probe, first)
        for e, rows in zip(epochs, zip(*trainers)):  # the trainers' own reads of the same counters
            e["trainer_kernel_bytes"] = [r["machine_sent_bytes"] + r["machine_received_bytes"] for r in rows]
        acc = {a["epoch"]: a for a in distdgl_job.evaluate(self.python, graph, out, model)}
        curve, t = [], 0.0
        for e in first:
            t += e["train_seconds"]
            a = acc.get(e["epoch"], {})
            curve.append({"epoch": e["epoch"], "cum_seconds": t, "val_acc": a.get("val_acc"),
                          "test_acc": a.get("test_acc")})
        return summary("distdgl" if method == "metis" else f"distdgl-{method}", epochs, curve, {
            "test_acc": best_val_test(curve), "job_machines": probe.window(probe.times[0], probe.times[-1]),
            "dgl_train_nodes": split})


def network(ranks: int, preset: str) -> ThrottledNetwork:
    stale = reap_stale() + distdgl_job.reap_stale_shm()
    if stale:
        print(f"removed leftovers of killed runs: {', '.join(stale)}", file=sys.stderr)
    return ThrottledNetwork(ranks, PRESETS[preset])


def run_one(peer: Peer, system: str, dataset: str, p: int, layers: int, preset: str, epochs: int,
            eval_every: int, quiet: Optional[float] = QUIET_LOAD) -> dict:
    """One job of any system. Before it the machine must be quiet (1-minute load average at most
    `quiet`, waited for; None: not required): else MachineBusy and no measurement. The load
    averages before and after the job are part of the record, for every system."""
    cfg = grappa_config(dataset, "full" if system == "full" else "grappa", p, layers, epochs, eval_every,
                        peer.work)
    dgl = system.startswith("distdgl")  # distdgl: METIS partitions; distdgl-random: random ones
    ranks = p if dgl else p + 1  # Grappa's aggregator is a machine of its own
    if dgl:
        peer.dgl_partitions(dataset, p, "random" if system == "distdgl-random" else "metis")  # not timed
    else:
        prepare_store(cfg, progress=False)
    load_before = load_now() if quiet is None else wait_quiet(quiet)
    t0 = time.perf_counter()
    with network(ranks, preset) as net:
        if dgl:
            rec = peer.run_distdgl(dataset, cfg, net, peer.work / f"dgl-out-{p}-{layers}-{time.time_ns()}",
                                   "random" if system == "distdgl-random" else "metis")
        else:
            rec = peer.run_grappa(cfg, net)
    return {**rec, "wall_seconds": time.perf_counter() - t0, "network_tag": net.tag, "fanouts": cfg.fanouts,
            # 1-, 5- and 15-minute load averages right before the job (what else ran: the cell is
            # refused above `quiet`) and at its end (which counts the job's own processes too)
            "load_before": load_before, "load_after": load_now(), "quiet_limit": quiet,
            "batch_size": cfg.training.batch_size, "train_nodes": int(peer.graph(dataset)[0].train_mask.sum())}


def smoke(work: Path) -> dict:
    """Both systems on a tiny graph, P = 2, 2 epochs, 100 Mbit/s."""
    peer = Peer(work)
    return {s: run_one(peer, s, "tiny", 2, 2, "100mbit", 2, 1, quiet=None) for s in ("grappa", "distdgl")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", choices=["timing", "accuracy"], default="timing",
                    help="timing: epoch time and bytes (evaluation at the end only); accuracy: "
                         "evaluation after every epoch, for the same-epochs / same-time comparison")
    ap.add_argument("--datasets", default="rmat,coauthor-physics")
    ap.add_argument("--partitions", default="4,8")
    ap.add_argument("--layers", default="3")
    ap.add_argument("--presets", default="1gbit,100mbit")
    ap.add_argument("--systems", default="grappa,distdgl,full",
                    help="grappa, distdgl (DGL's METIS partitions), distdgl-random, full")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--quiet-load", type=float, default=QUIET_LOAD,
                    help="a run starts only when the 1-minute load average is at most this (waited for "
                         f"up to {QUIET_WAIT_S} s, else the cell is refused and tried again next time)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind through the namespaces' cleanup
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(smoke(Path(tmp)), indent=1)[:4000])
        return
    out = Path(args.out)
    runs_path = out / "peer-runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    if not args.render_only:
        preflight(args.systems.split(","))
        with tempfile.TemporaryDirectory(dir=os.environ.get("GRAPPA_BENCH_TMP")) as tmp:
            measure(args, runs, runs_path, Peer(Path(tmp)))
    notes = ROOT / "bench" / "peer-notes.md"
    print("wrote", render(runs, out, notes.read_text() if notes.exists() else ""))


def preflight(systems: list[str]) -> None:
    """Stops before the grid, with the fix, where every cell would fail the same way."""
    try:
        ThrottledNetwork(1, None).__enter__().close()
    except (NetnsUnavailable, FileNotFoundError) as err:
        sys.exit(f"bench/peer.py needs network namespaces (root, or CAP_NET_ADMIN and iproute2): {err}")
    if any(s.startswith("distdgl") for s in systems):
        try:
            distdgl_job.peer_python()
        except distdgl_job.PeerUnavailable as err:
            sys.exit(f"{err}\nFix: run `make peer-env` (needs PyPI), or leave distdgl out of --systems")


def measure(args, runs: dict, runs_path: Path, peer: Peer) -> None:
    accuracy = args.experiment == "accuracy"
    eval_every = 1 if accuracy else args.epochs
    for dataset in args.datasets.split(","):
        for p in map(int, args.partitions.split(",")):
            for preset in args.presets.split(","):
                for layers in map(int, args.layers.split(",")):
                    for rep in range(args.repeats):
                        for system in args.systems.split(","):
                            key = f"{args.experiment}|{dataset}|{p}|{layers}|{system}|{preset}|{rep}"
                            if key in runs and not runs[key].get("refused"):  # a refused cell is tried again
                                continue
                            try:
                                runs[key] = run_one(peer, system, dataset, p, layers, preset, args.epochs,
                                                    eval_every, quiet=args.quiet_load)
                            except MachineBusy as err:
                                runs[key] = {"system": system, "error": str(err), "refused": True}
                            except Exception as err:  # noqa: BLE001 - recorded, the grid goes on
                                runs[key] = {"system": system, "error": str(err)[-2000:]}
                            runs[key]["epochs_run"] = args.epochs
                            save(runs, runs_path, key, SHOWN)


if __name__ == "__main__":
    main()
