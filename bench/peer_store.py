"""The peer benchmark with the chunk store on a link (issue 37): Grappa vs DistDGL as bench/peer.py
measures them, with rounds inside the measured window and, with `--store s3`, Grappa's store on a
storage machine (bench/storage_machine.py: SeaweedFS's S3 gateway in a namespace of its own, rank
P + 1 after the aggregator 0 and the workers 1..P), so each worker's round fetch crosses that
machine's shaped link. bench/peer.py runs it when given --store s3 or --rounds-every:

    python bench/peer.py --store s3 --rounds-every 2 --epochs 5 --datasets rmat --partitions 8 \\
        --presets 1gbit --layers 3 --systems grappa,distdgl --repeats 1
    python bench/peer.py --store s3 --smoke        # a tiny graph, P = 2, both systems

A Grappa cell: the store prepared locally (timed apart, not in the job), uploaded to the bucket
from the aggregator's namespace (as `grappa prepare` uploads it: timed, Grappa's set-up), then
the job with storage.fetch prefetch and a fresh, empty storeDir (the bucket's local mirror), so
every byte of the store any process reads crosses the storage link. Evaluation runs after the
last epoch only (evalEvery = epochs; it cannot be turned off): with a bucket store it mirrors the
whole store, outside every epoch's window (the workers start it on the aggregator's word, which
peer.quiet_before_eval holds a few probe readings; recorded apart as `after_training`). DistDGL cells are
measured in the same invocation at the same epochs; their set-up is DGL's partition_graph and the
servers' loading of the partitions. Results: docs/results/peer-store-runs.json (keys below, apart
from peer-runs.json's), rendered by bench/render_peer_store.py into docs/results/peer-store.md.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Optional

import peer as pb
from grappa.config import TrainConfig, config_with, dump_config
from grappa.data.store.feature_codec import codec_of
from grappa.data.store.manifest import read_manifest
from probe import Probe
from render_peer import QUIET_LOAD
from render_peer_store import render, starts_round
from storage_machine import StorageMachine

RUNS = "peer-store-runs.json"
SHOWN = ("epoch_seconds", "setup", "error")  # printed per run


def key(dataset: str, p: int, layers: int, system: str, preset: str, store: str, every: int, epochs: int,
        rep: int) -> str:
    """A cell's key in peer-store-runs.json: peer-runs.json's fields, then the store, the rounds'
    period and the epochs, then the repeat."""
    return f"timing|{dataset}|{p}|{layers}|{system}|{preset}|{store}|r{every}|e{epochs}|{rep}"


def with_storage(cfg: TrainConfig, storage: dict, store_dir: Optional[Path] = None) -> TrainConfig:
    data = json.loads(dump_config(cfg))
    data["storage"] = storage
    if store_dir is not None:
        data["storeDir"] = str(store_dir)
    return config_with(data)


def storage_bytes(machines: list[dict], rank: Optional[int]) -> Optional[int]:
    return None if rank is None else machines[rank]["sent_bytes"] + machines[rank]["received_bytes"]


def grappa_epochs(rec: dict, hist: list[dict], p: int, every: int, storage: Optional[int]) -> None:
    """Each epoch's figures of the store experiment, beside peer.py's: its time with its round's
    set-up, whether it started a round, the storage machine's and the busiest worker's link bytes
    (kernel counters over the same window)."""
    for i, (e, h) in enumerate(zip(rec["epochs"], hist)):
        e.update({"epoch": h["epoch"], "round": h["round"], "boundary": starts_round(i, every),
                  "round_seconds": pb.round_seconds(h), "seconds": h["train_seconds"] + pb.round_seconds(h),
                  "round_build_seconds": h.get("round_build_seconds"),
                  "storage_bytes": storage_bytes(e["machines"], storage),
                  "busiest_worker_kernel_bytes": max(m["sent_bytes"] + m["received_bytes"]
                                                     for m in e["machines"][1:p + 1])})


def distdgl_epochs(rec: dict) -> None:
    for i, e in enumerate(rec["epochs"]):
        e.update({"epoch": i + 1, "boundary": False, "seconds": e["train_seconds"],
                  "busiest_worker_kernel_bytes": max(m["sent_bytes"] + m["received_bytes"] for m in e["machines"])})


def run_grappa(peer: pb.Peer, cfg: TrainConfig, net, p: int, store: str, tag: str, settle,
               storage: Optional[dict] = None) -> dict:
    """One Grappa job on `net`; with store s3, the storage machine on rank p + 1 first, the upload,
    and `settle()` (the machine quiet again after the upload's load) before the job. `storage`:
    more of the job's storage settings (peer.STORAGE)."""
    if store == "local":  # the store read in place (storage.fetch: direct), as peer.md's cells
        rec = peer.run_grappa(with_storage(cfg, storage) if storage else cfg, net, with_round=True)
        return {**rec, "storage_rank": None}
    storage = {"fetch": "prefetch", **(storage or {})}
    with StorageMachine(net, p + 1, peer.work / f"weed{tag}") as machine:
        s3 = machine.s3(prefix=f"{tag.strip('-')}/")
        with Probe(net) as probe:  # the upload's bytes on the storage link
            upload = machine.upload(with_storage(cfg, {**storage, "s3": s3}), rank=0)
        upload["storage_link_bytes"] = storage_bytes(probe.window(probe.times[0], probe.times[-1]), p + 1)
        job = with_storage(cfg, {**storage, "s3": s3}, store_dir=peer.work / f"mirror{tag}")
        upload["load_before_job"] = settle()
        with machine.credentials():
            rec = peer.run_grappa(job, net, with_round=True)
    rec["setup"].update(upload, prepare_seconds=peer.prepare(cfg))
    return {**rec, "storage_rank": p + 1, "storage_address": machine.address}


def after_training(probe, end: float, storage: Optional[int]) -> dict:
    """From the last epoch's end to the job's: the final evaluation (with a bucket store, its mirror
    of the whole store) and the shutdown; the storage link's bytes there."""
    window = probe.window(end, probe.times[-1])
    return {"seconds": probe.times[-1] - end, "storage_bytes": storage_bytes(window, storage)}


def run_cell(peer: pb.Peer, system: str, dataset: str, p: int, layers: int, preset: str, epochs: int,
             every: int, store: str, quiet: Optional[float] = QUIET_LOAD) -> dict:
    """One job of the store experiment; refused (MachineBusy) when the machine is not quiet."""
    if system.startswith("distdgl"):  # the same cell as peer.py's: DistDGL reads no chunk store
        rec = pb.run_one(peer, system, dataset, p, layers, preset, epochs, epochs, quiet=quiet)
        distdgl_epochs(rec)
        return {**rec, "store": None, "rounds_every": None}
    tag = f"-{dataset}-{p}-{store}-r{every}-{time.time_ns() % 10**9}"
    cfg = pb.grappa_config(dataset, "grappa", p, layers, epochs, epochs, peer.work, rounds_every=every, run_tag=tag)
    peer.prepare(cfg)  # not timed in the job

    def settle() -> list[float]:
        return pb.load_now() if quiet is None else pb.wait_quiet(quiet)

    load_before = settle()
    t0 = time.perf_counter()
    with pb.network(p + (2 if store == "s3" else 1), preset) as net:
        rec = run_grappa(peer, cfg, net, p, store, tag, settle, pb.STORAGE.get(dataset))
    hist, probe = peer.last_job["history"], peer.last_job["probe"]
    grappa_epochs(rec, hist, p, every, rec["storage_rank"])
    rec["after_training"] = after_training(probe, hist[-1]["ended_at"], rec["storage_rank"])
    return {**rec, "store": store, "rounds_every": every, "wall_seconds": time.perf_counter() - t0,
            "network_tag": net.tag, "fanouts": cfg.fanouts, "load_before": load_before, "load_after": pb.load_now(),
            "quiet_limit": quiet, "batch_size": cfg.training.batch_size,
            "train_nodes": int(peer.graph(dataset)[0].train_mask.sum()),
            # how the store keeps the features (featureDtype auto records its choice)
            "store_encoding": codec_of(read_manifest(cfg.store_path)).encoding}


def measure(args, runs: dict, runs_path: Path, peer: pb.Peer) -> None:
    every = args.rounds_every if args.rounds_every is not None else 10
    pb.measure_grid(args, runs, runs_path,
                    lambda ds, p, layers, system, preset, rep: key(ds, p, layers, system, preset, args.store, every,
                                                                  args.epochs, rep),
                    lambda system, ds, p, layers, preset: run_cell(peer, system, ds, p, layers, preset, args.epochs,
                                                                   every, args.store, quiet=args.quiet_load), SHOWN)


def smoke(store: str) -> dict:
    """Both systems on a tiny graph, P = 2, 3 epochs with a round boundary at epoch 2, 100 Mbit/s."""
    with tempfile.TemporaryDirectory() as tmp:
        peer = pb.Peer(Path(tmp))
        return {s: run_cell(peer, s, "tiny", 2, 2, "100mbit", 3, 2, store, quiet=None) for s in ("grappa", "distdgl")}


def main(args, out: Path) -> Path:
    """bench/peer.py's entry for the store experiment: measure (unless --render-only), render."""
    runs_path = out / RUNS
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    if not args.render_only:
        with tempfile.TemporaryDirectory(dir=os.environ.get("GRAPPA_BENCH_TMP")) as tmp:
            measure(args, runs, runs_path, pb.Peer(Path(tmp)))
    return render(runs, out)
