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

With --store s3 (Grappa's chunk store on a storage machine behind a shaped link) or --rounds-every
(rounds inside the measured window), the store experiment of bench/peer_store.py runs instead:
its own runs file (docs/results/peer-store-runs.json) and page (docs/results/peer-store.md).

    python bench/peer.py --store s3 --rounds-every 2 --epochs 5 --datasets rmat --partitions 8 \
        --presets 1gbit --layers 3 --systems grappa,distdgl --repeats 1
    python bench/peer.py --store s3 --smoke
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
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
from grappa.runtime.protocol import EVAL_QUIET  # noqa: E402
from netns import PRESETS, NetnsUnavailable, ThrottledNetwork, reap_stale  # noqa: E402
from network import save, trained_here  # noqa: E402
from probe import QUIET_READINGS, Probe  # noqa: E402
import provenance  # noqa: E402
from render_peer import QUIET_LOAD, best_val_test, render  # noqa: E402

RESULTS = ROOT / "docs" / "results"
SHOWN = ("epoch_seconds", "kernel_bytes_per_epoch", "test_acc", "error")  # printed per run
DATASETS = {
    # float32 rows (33.7 KB), as this cell has always been measured; featureDtype auto (the
    # default) would store sparse rows, as the next cells do
    "coauthor-physics": {"name": "coauthor-physics", "featureDtype": "float32"},
    # the same graph, Grappa's store keeping its word counts as sparse rows (dataset.featureDtype:
    # sparse); DistDGL reads the same float32 features as for coauthor-physics
    "coauthor-physics-sparse": {"name": "coauthor-physics", "featureDtype": "sparse"},
    # the store a Physics job gets by default: featureDtype auto picks the encoding (its runs
    # record which: store_encoding)
    "coauthor-physics-auto": {"name": "coauthor-physics"},
    # and with the halo's rows fetched as the steps read them (STORAGE), not whole each round
    "coauthor-physics-sparse-as-read": {"name": "coauthor-physics", "featureDtype": "sparse"},
    # and with the halo rows the next round's seeds can reach fetched ahead with it (the rest as read)
    "coauthor-physics-sparse-reach": {"name": "coauthor-physics", "featureDtype": "sparse"},
    "rmat": {"name": "rmat", "synthetic": {"scale": 17, "numFeatures": 64}},  # 131K nodes, 2.1M edges
    # 1M nodes, 16.8M edges: a graph on which P = 64 still leaves each machine real work
    "rmat-20": {"name": "rmat", "synthetic": {"scale": 20, "numFeatures": 64}},
    "tiny": {"name": "csbm", "synthetic": {"numNodes": 2000, "numFeatures": 16}},
}
# Grappa's storage settings of a dataset's store experiment (peer_store.py), beside fetch and s3
STORAGE = {"coauthor-physics-sparse-as-read": {"haloRows": "as-read"},
           "coauthor-physics-sparse-reach": {"haloRows": "reachable"}}

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
                  eval_every: int, work: Path, batch_size: int = 1000, rounds_every: Optional[int] = None,
                  run_tag: str = "") -> TrainConfig:
    """`rounds_every`: grappa.rounds.every (None: its default); `run_tag` makes the runDir the
    run's own (the store experiment's runs each fetch into a fresh local folder)."""
    mini = strategy == "grappa"  # the full-communication mode trains full-graph only
    rounds = {} if rounds_every is None else {"grappa": {"rounds": {"every": rounds_every}}}
    return TrainConfig.model_validate({**rounds,
        "strategy": strategy, "partitions": partitions, "dataset": DATASETS[dataset],
        "model": {"arch": "sage", "layers": layers, "hidden": 128, "dropout": 0.5},
        "training": {"mode": "mini-batch" if mini else "full-graph", "batchSize": batch_size,
                     "epochs": epochs, "evalEvery": eval_every, "evalMode": "exact"},
        "checkpoint": {"interval": 0},
        "runDir": str(work / f"run-{strategy}-{partitions}-{layers}{run_tag}"),
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


def round_seconds(epoch: dict) -> float:
    """What a Grappa epoch spent before its steps: the round's set-up (the workers' fetch and
    build of their local graphs) in an epoch that starts a round, next to nothing otherwise;
    the aggregator's epoch time less its training and evaluation (DistDGL's epochs: 0)."""
    if "epoch_seconds" not in epoch:
        return 0.0
    return max(0.0, epoch["epoch_seconds"] - epoch["train_seconds"] - epoch.get("eval_seconds", 0.0))


@contextmanager
def quiet_before_eval(seconds: float):
    """The workers' evaluation held back `seconds` after an epoch ends: the probe splits each
    reading's counts between two times linearly, so evaluation starting at once would be partly
    counted in the epoch before it."""
    before = os.environ.get(EVAL_QUIET)
    os.environ[EVAL_QUIET] = str(seconds)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(EVAL_QUIET, None)
        else:
            os.environ[EVAL_QUIET] = before


def per_epoch(probe: Probe, epochs: list[dict], with_round: bool = False) -> list[dict]:
    """Per epoch, the machines' counters over its steps; `with_round`: over its round's set-up too."""
    return [{"train_seconds": e["train_seconds"], "steps": e.get("steps"),
             "machines": probe.window(e["started_at"] - (round_seconds(e) if with_round else 0.0),
                                      e["ended_at"])} for e in epochs]


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
        self.prepared: dict[str, float] = {}  # storeDir -> seconds its prepare took (not timed in a job)
        self.last_job: dict = {}

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
            done = distdgl_job.partition(self.python, self.graph(dataset)[1], parts, method, out)
            (out / "partition.json").write_text(json.dumps(done))
        return str(out / "g.json")

    def partition_seconds(self, part_config: str) -> Optional[float]:
        """DGL's partition_graph seconds for these partitions (DistDGL's prepare)."""
        done = Path(part_config).parent / "partition.json"
        return json.loads(done.read_text()).get("partition_seconds") if done.exists() else None

    def prepare(self, cfg: TrainConfig) -> float:
        """prepare_store, timed the first time a storeDir is prepared in this invocation."""
        key = str(cfg.store_path)
        if key not in self.prepared:
            t0 = time.perf_counter()
            prepare_store(cfg, progress=False)
            self.prepared[key] = time.perf_counter() - t0
        return self.prepared[key]

    def run_grappa(self, cfg: TrainConfig, net: ThrottledNetwork, with_round: bool = False) -> dict:
        """`with_round`: each epoch's counters include its round's set-up (the store experiment)."""
        prepare_seconds = self.prepare(cfg) if cfg.storage.bucket_store is None else None
        with Probe(net) as probe, quiet_before_eval(QUIET_READINGS * probe.interval):
            t0 = time.time()
            report = LocalJob(cfg, progress=False, threads=1, placement=net).run()
        hist = report["history"]
        trained_here(hist, t0, cfg.run_dir)
        self.last_job = {"history": hist, "probe": probe}  # for callers that derive more (peer_store.py)
        epochs = per_epoch(probe, hist, with_round)
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
            "store_reads": report.get("store_reads"),
            # the job's start: from the launcher's start to the first epoch's steps (processes,
            # torch, the ring, round 0's fetch and build); prepare apart, before it and not timed
            "setup": {"prepare_seconds": prepare_seconds,
                      "job_start_seconds": hist[0]["started_at"] - t0 if hist else None}})

    def run_distdgl(self, dataset: str, cfg: TrainConfig, net: ThrottledNetwork, out: Path,
                    method: str = "metis") -> dict:
        data, graph = self.graph(dataset)
        model = distdgl_model(cfg, int(data.y.max()) + 1)
        part = self.dgl_partitions(dataset, cfg.partitions, method)
        with Probe(net) as probe:
            t0 = time.time()
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
            "dgl_train_nodes": split, "setup": distdgl_setup(records, t0, self.partition_seconds(part))})


def distdgl_setup(records: list[dict], t0: float, partition_seconds: Optional[float]) -> dict:
    """DistDGL's set-up beside Grappa's: partition_graph (its prepare, before the job, not timed
    in it), the job's start to the first epoch's steps (servers load their partitions, trainers
    connect), and the trainers' own wait for the DistGraph (the slowest's)."""
    loads = [r["setup"]["load_seconds"] for r in records if r.get("setup")]
    return {"partition_seconds": partition_seconds,
            "job_start_seconds": min(r["epochs"][0]["started_at"] for r in records) - t0 if records else None,
            "trainer_load_seconds": max(loads) if loads else None}


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
    # each job its own run folder: a finished run found in it would be resumed, not trained again
    cfg = grappa_config(dataset, "full" if system == "full" else "grappa", p, layers, epochs, eval_every,
                        peer.work, run_tag=f"-{time.time_ns() % 10**9}")
    dgl = system.startswith("distdgl")  # distdgl: METIS partitions; distdgl-random: random ones
    ranks = p if dgl else p + 1  # Grappa's aggregator is a machine of its own
    if dgl:
        peer.dgl_partitions(dataset, p, "random" if system == "distdgl-random" else "metis")  # not timed
    else:
        peer.prepare(cfg)
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
    ap.add_argument("--store", choices=["local", "s3"], default="local",
                    help="where Grappa's chunk store is: local (the host's disk, as the peer.md cells) or s3 "
                         "(SeaweedFS on a storage machine of its own behind a shaped link); with s3 or "
                         "--rounds-every, the store experiment (bench/peer_store.py, peer-store.md)")
    ap.add_argument("--rounds-every", type=int, default=None,
                    help="grappa.rounds.every (default 10; the peer.md cells' 3 epochs hold no boundary)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind through the namespaces' cleanup
    if args.store != "local" or args.rounds_every is not None:
        import peer_store
        if args.smoke:
            print(json.dumps(peer_store.smoke(args.store), indent=1)[:6000])
            return
        if not args.render_only:
            preflight(args.systems.split(","), store=args.store)
        print("wrote", peer_store.main(args, Path(args.out)))
        return
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
    # the notes cite figures of docs/results (the step profile among them): elsewhere, the tables only
    notes = ROOT / "bench" / "peer-notes.md"
    mine = out.resolve() == RESULTS.resolve() and notes.exists()
    print("wrote", render(runs, out, notes.read_text() if mine else ""))


def preflight(systems: list[str], store: str = "local") -> None:
    """Stops before the grid, with the fix, where every cell would fail the same way."""
    try:
        ThrottledNetwork(1, None).__enter__().close()
    except (NetnsUnavailable, FileNotFoundError) as err:
        sys.exit(f"bench/peer.py needs network namespaces (root, or CAP_NET_ADMIN and iproute2): {err}")
    if store == "s3" and "grappa" in systems:
        import storage_machine
        try:
            storage_machine.weed_server.weed_path()
        except storage_machine.weed_server.WeedUnavailable as err:
            sys.exit(f"{err}\nFix: hack/seaweedfs.sh (needs Go and the Go module proxy), or --store local")
    if any(s.startswith("distdgl") for s in systems):
        try:
            distdgl_job.peer_python()
        except distdgl_job.PeerUnavailable as err:
            sys.exit(f"{err}\nFix: run `make peer-env` (needs PyPI), or leave distdgl out of --systems")


def measure_grid(args, runs: dict, runs_path: Path, key_of, run, shown: tuple[str, ...]) -> None:
    """Every job of the grid not measured yet (a refused one again), in the order of the nested
    options, saved as it ends; a failure is recorded and the grid goes on. `key_of(dataset, p,
    layers, system, preset, rep)` names a job, `run(system, dataset, p, layers, preset)` runs it."""
    jobs = itertools.product(args.datasets.split(","), map(int, args.partitions.split(",")),
                             args.presets.split(","), map(int, args.layers.split(",")), range(args.repeats),
                             args.systems.split(","))
    for dataset, p, preset, layers, rep, system in jobs:
        key = key_of(dataset, p, layers, system, preset, rep)
        if key in runs and not runs[key].get("refused"):
            continue
        try:
            runs[key] = run(system, dataset, p, layers, preset)
        except MachineBusy as err:
            runs[key] = {"system": system, "error": str(err), "refused": True}
        except Exception as err:  # noqa: BLE001 - recorded, the grid goes on
            runs[key] = {"system": system, "error": str(err)[-2000:]}
        runs[key]["epochs_run"] = args.epochs
        runs[key]["measured"] = provenance.stamp()
        save(runs, runs_path, key, shown)


def measure(args, runs: dict, runs_path: Path, peer: Peer) -> None:
    eval_every = 1 if args.experiment == "accuracy" else args.epochs
    measure_grid(args, runs, runs_path,
                 lambda ds, p, layers, system, preset, rep:
                     f"{args.experiment}|{ds}|{p}|{layers}|{system}|{preset}|{rep}",
                 lambda system, ds, p, layers, preset: run_one(peer, system, ds, p, layers, preset, args.epochs,
                                                               eval_every, quiet=args.quiet_load), SHOWN)


if __name__ == "__main__":
    main()
