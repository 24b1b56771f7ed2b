"""A predict/evaluate worker process: `python -m grappa.inference.predict_worker JOB.json RANK`.

Rank r owns chunks k with k mod P = r (training's base chunks). Layer by layer it computes its
chunks' rows into per-chunk row files, after waiting until every chunk's previous layer exists
(file markers on the shared volume: no network between workers). Then it writes its range of the
output rows and, for evaluate, scores its chunks' labelled nodes. Rank 0 publishes the outputs
once every worker is done. A rerun skips every row file already complete.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from grappa.data.rowfiles import LayerRows, layer_complete, layer_file
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.assign import base_chunks
from grappa.data.store.chunk_store import ChunkStore
from grappa.inference import link_outputs
from grappa.inference.job import PredictJob
from grappa.inference.out_folder import EVALUATION, FORMAT, MANIFEST
from grappa.inference.outputs import assemble, id_range, output_specs
from grappa.inference.status import Status, read_status
from grappa.models.layerwise import StoreGraph, write_chunk
from grappa.models.model_file import load_model
from grappa.util.cgroup_memory import CGROUP_PEAKS
from grappa.util.files import atomic_write

log = logging.getLogger("grappa.predict")
POLL_S = 0.05
# Testing hook: SIGKILL this worker once this layer (1-based) is complete, as a crash or an
# evicted pod would, to show that a rerun resumes from the completed layers.
KILL_AFTER_LAYER = "GRAPPA_PREDICT_KILL_AFTER_LAYER"
LAUNCHED = "launched_at"  # written by the launcher: wall time includes the workers' start-up


def wait_until(ready, what: str, say_every: float = 60.0) -> None:
    """Poll the shared volume until `ready()`; say what it waits for now and then (a worker that
    died elsewhere shows as a wait that never ends: the launcher, or the operator, stops it)."""
    said = time.monotonic()
    while not ready():
        time.sleep(POLL_S)
        if time.monotonic() - said > say_every:
            log.info("waiting for %s", what)
            said = time.monotonic()


def compute_layers(job: PredictJob, model, g: StoreGraph, rank: int, status: Status) -> None:
    K, scratch = g.store.num_chunks, job.scratch
    mine = base_chunks(rank, job.workers, K)
    sizes = {k: int(g.store.manifest["chunks"][k]["nodes"]) for k in mine}
    for l in range(model.passes):
        todo = [k for k in mine if not layer_file(scratch, l + 1, k).exists()]
        status.update(phase="layer", layer=l + 1, rows=sum(sizes.values()) - sum(sizes[k] for k in todo),
                      rows_total=sum(sizes.values()), force=True)
        if not todo:
            status.state["skipped_layers"].append(l + 1)
            continue
        if l > 0:
            wait_until(lambda: layer_complete(scratch, l, range(K)), f"layer {l}")
        source = g if l == 0 else LayerRows(scratch, l)
        for k in todo:
            written = write_chunk(model, l, g, source, k, layer_file(scratch, l + 1, k), job.block_edges,
                                  lambda n: status.update(rows=status.state["rows"] + n, bytes_read=g.bytes_read))
            status.add("bytes_written", written)
        if os.environ.get(KILL_AFTER_LAYER) == str(l + 1):  # once every worker's rows are in: the
            # same layers done in every run, however the workers' pace differs
            wait_until(lambda: layer_complete(scratch, l + 1, range(K)), f"layer {l + 1}")
            os.kill(os.getpid(), signal.SIGKILL)


def split_sums(model, g: StoreGraph, scratch: Path, chunks: list[int], block_rows: int) -> dict:
    """Loss sum, correct and count per split over the labelled nodes of `chunks`, a block of
    rows at a time."""
    from grappa.tasks.node_classification import split_stats
    last = LayerRows(scratch, model.passes)
    total = torch.zeros(9, dtype=torch.float64)
    for k in chunks:
        n = int(g.store.manifest["chunks"][k]["nodes"])
        for a in range(0, n, block_rows):
            b = min(n, a + block_rows)
            logits = torch.from_numpy(np.array(last.rows(k)[a:b]))
            y = torch.from_numpy(np.asarray(g.array(k, "y.npy")[a:b], dtype=np.int64))
            split = torch.from_numpy(np.asarray(g.array(k, "split.npy")[a:b]))
            total += split_stats(logits, y, tuple(split == c for c in (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST)))
            last.release()
            g.release()
    return {name: total[3 * i:3 * i + 3].tolist() for i, name in enumerate(("train", "val", "test"))}


def run_worker(job: PredictJob, rank: int) -> None:
    loaded = load_model(job.model, job.code_path)
    model = loaded.model
    store = ChunkStore(job.store)
    g = StoreGraph(store)
    scratch, L, K = job.scratch, model.passes, store.num_chunks
    status = Status(scratch, rank)
    compute_layers(job, model, g, rank, status)
    wait_until(lambda: layer_complete(scratch, L, range(K)), "the last layer")
    specs = output_specs(job, model.widths)
    marker = scratch / f"assembled-{rank}"
    if specs and not marker.exists():
        lo, hi = id_range(rank, job.workers, int(store.manifest["num_nodes"]))
        status.update(phase="assemble", force=True)
        written = assemble(job, g, specs, model.widths, lo, hi,
                           tick=lambda n: status.add("assembled_rows", n))
        status.add("bytes_written", written)
        marker.write_text("")
    marker = scratch / f"link-outputs-{rank}"
    if job.task == link_outputs.LINK and (job.pairs or job.queries) and not marker.exists():
        status.update(phase="pairs", force=True)  # pair scores and top-k: this rank's rows
        status.add("bytes_written", link_outputs.write_rank_outputs(job, model, store, rank))
        marker.write_text("")
    if job.evaluate and job.task == link_outputs.LINK:
        status.state["link_sums"] = link_outputs.evaluation_sums(job, model, store, rank)
    elif job.evaluate:
        status.state["split_sums"] = split_sums(model, g, scratch, base_chunks(rank, job.workers, K),
                                                job.block_rows)
    status.update(phase="done", bytes_read=g.bytes_read, force=True)
    status.memory.stop()
    if rank == 0:
        wait_until(lambda: all(read_status(scratch, r).get("phase") == "done" for r in range(job.workers)),
                   "every worker")
        publish(job, loaded, store, specs)


def evaluation(sums: list[dict]) -> dict:
    out = {}
    for split in ("train", "val", "test"):
        loss, correct, count = (sum(s[split][i] for s in sums) for i in range(3))
        out[split] = {"acc": correct / count if count else None, "loss": loss / count if count else None,
                      "nodes": int(count)}
    return out


def publish(job: PredictJob, loaded, store: ChunkStore, specs) -> dict:
    """Move the complete outputs into `out`, manifest last, and drop the scratch folder."""
    import shutil
    out, scratch = Path(job.out), job.scratch
    workers = [read_status(scratch, r) for r in range(job.workers)]
    started = min(w["started_at"] for w in workers)  # the pass itself: every worker up
    launched = float((scratch / LAUNCHED).read_text()) if (scratch / LAUNCHED).exists() else started
    n = int(store.manifest["num_nodes"])
    meta = loaded.meta
    training_graph = job.store_fingerprint == (meta.get("store") or {}).get("fingerprint")
    files = {s.name: {"file": s.file, "dtype": s.dtype, "shape": [n] if s.width is None else [n, s.width],
                      "holds": s.holds} for s in specs}
    link_specs = link_outputs.output_specs(job, n)
    files.update({s.name: {"file": s.file, "dtype": s.dtype, "shape": [rows] if s.width is None else
                           [rows, s.width], "holds": s.holds} for s, rows in link_specs})
    manifest = {
        "format": FORMAT, "command": "predict" if job.predict else "evaluate", "job": job.identity,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "num_nodes": n, "rows": "row v of every file is node v in the dataset's own numbering"
                                + ("; pair_scores.npy follows --pairs' order, topk*.npy --queries'"
                                   if link_specs else ""),
        "task": job.task, "files": files,
        "model": {"file": str(Path(job.model).resolve()), "sha256": job.model_sha256, **meta["model"],
                  "widths": meta["widths"], "num_classes": meta["num_classes"],
                  "strategy": meta["strategy"], "grappa_version": meta["grappa_version"]},
        "dataset": {"store": str(Path(job.store).resolve()), "fingerprint": job.store_fingerprint,
                    "source": store.manifest.get("source"), "num_features": store.manifest["num_features"],
                    # false: a graph the user named, not the one the model was trained on
                    "training_graph": training_graph},
        "workers": job.workers, "seconds": time.time() - launched, "pass_seconds": time.time() - started,
        "per_worker": [{k: w.get(k) for k in ("peak_rss_bytes", "peak_pss_bytes", "peak_anon_bytes", "bytes_read",
                                              "bytes_written", "seconds", "skipped_layers",
                                              *(f"{c}_bytes" for c in CGROUP_PEAKS))} for w in workers],
    }
    manifest["nodes_per_second"] = n / max(manifest["seconds"], 1e-9)  # start-up included
    if job.evaluate:
        manifest["evaluation"] = link_outputs.evaluation([w["link_sums"] for w in workers]) \
            if job.task == link_outputs.LINK else evaluation([w["split_sums"] for w in workers])
        atomic_write(out / EVALUATION, json.dumps({"model": manifest["model"], "dataset": manifest["dataset"],
                                                   **manifest["evaluation"]}, indent=1).encode())
    if specs and "tables" in store.manifest:  # a graph from tables: results keyed by the user's ids
        # (a link model's specs are its embeddings: the table holds the ids and the embeddings)
        from grappa.data.tables.results import TABLE_FILE, write_results
        entry = write_results(Path(job.store), store.manifest, {s.name: scratch / s.file for s in specs},
                              scratch / TABLE_FILE, label_names=meta.get("label_names"))
        manifest["files"]["table"] = entry
        os.replace(scratch / TABLE_FILE, out / TABLE_FILE)
    for s in [*specs, *(s for s, _ in link_specs)]:
        os.replace(scratch / s.file, out / s.file)
    atomic_write(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def main(argv: list[str]) -> int:
    logging.basicConfig(level=os.environ.get("GRAPPA_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s predict-{argv[1]} %(levelname)s %(message)s")
    threads = os.environ.get("GRAPPA_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    run_worker(PredictJob.load(argv[0]), int(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
