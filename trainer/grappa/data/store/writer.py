"""Streaming prepare: a source -> the chunk store (layout in manifest.py), in bounded memory.

1. Read pass, in parallel: the node pass writes each chunk's x, y, split in id order; edge parts
   are validated and spilled into destination-range files (spill.py).
2. Finalise pass: ranges in ascending order, each sorted and deduplicated alone in a worker
   (finalise.py); the parent appends every chunk's nodes, indptr, indices (and graph-derived
   labels) so each file grows in id order, hashing as it writes.
3. manifest.json goes in last: an interrupted prepare leaves only a `.staging-*` folder, which
   the next prepare removes; an existing store is never touched.

Peak memory is about (workers + 1) x 64 bytes x block_edges plus the runtime, whatever n and E.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import sys
import time
import uuid
from collections import deque
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from grappa.data.errors import ChunkStoreError, DatasetError
from grappa.data.sources.base import GraphSource
from grappa.data.sources.checks import check_label_gaps
from grappa.data.store.assign import ChunkAssignment
from grappa.data.store.feature_codec import AUTO, ENCODINGS, Codec, choose_encoding
from grappa.data.store.finalise import RangeResult, RangeTask, finalise_range
from grappa.data.store.manifest import (
    CHUNK_OF, LINK_DIR, MANIFEST, chunk_dir, id_dtype, identity, is_prepared, read_manifest
)
from grappa.data.store.npywriter import NpyWriter
from grappa.data.store.passes import Plan, block_rows, edge_pass, node_pass
from grappa.data.store.prepare_progress import Counters, PhaseBar
from grappa.data.store.spill import plan_range_bits, spill_files
from grappa.util.process_memory import peak_rss_bytes
from grappa.util.spawned import GUARD, importing_main, unguarded

MAX_DEFAULT_WORKERS = 4
IDS_FILE = "node_ids.parquet"  # tables: the user's node ids in dense order (grappa.data.tables)

# Set in every worker process (and in the parent when it runs the tasks itself).
_COUNTERS: Optional[Counters] = None


def _init_worker(counters: Counters) -> None:
    global _COUNTERS
    _COUNTERS = counters


def _node_task(source: GraphSource, plan: Plan) -> tuple[dict[str, Any], int, int]:
    return node_pass(source, plan, _COUNTERS), os.getpid(), peak_rss_bytes()


def _edge_task(part, num_nodes: int, add_inverse: bool, plan: Plan) -> tuple[int, int, int]:
    return edge_pass(part, num_nodes, add_inverse, plan, _COUNTERS), os.getpid(), peak_rss_bytes()


def _finalise_task(task: RangeTask) -> tuple[RangeResult, int, int]:
    result = finalise_range(task)
    _COUNTERS.add(final=result.records)
    return result, os.getpid(), peak_rss_bytes()


class _Peaks:
    """Peak resident memory per process that ran a task, for the manifest."""

    def __init__(self) -> None:
        self.by_pid: dict[int, int] = {}

    def value(self, done: tuple[Any, int, int]) -> Any:
        value, pid, peak = done
        self.by_pid[pid] = max(peak, self.by_pid.get(pid, 0))
        return value


class _Inline:
    """The task runner for one worker: runs each task at once in this process."""

    def submit(self, fn: Callable, *args: Any) -> Future:
        done: Future = Future()
        done.set_result(fn(*args))
        return done

    def __enter__(self) -> "_Inline":
        return self

    def exit_codes(self) -> list[int]:
        return []

    def __exit__(self, *exc: object) -> None:
        pass


class _Workers(ProcessPoolExecutor):
    """Spawned worker processes (they import numpy only, never the caller's torch). A worker
    that dies (say, killed for memory) fails the prepare instead of hanging it; on any error
    the others are stopped at once rather than left to finish their tasks."""

    def __init__(self, count: int, counters: Counters) -> None:
        super().__init__(count, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_init_worker, initargs=(counters,))

    def exit_codes(self, wait: float = 5.0) -> list[int]:
        """The worker processes' exit codes, once they have ended (a broken pool ends them all;
        `wait` seconds in all). The pool's own thread reaps them too: a code it took first is
        read from the process when it has set it."""
        procs = list((self._processes or {}).values())  # no public way before 3.14
        deadline = time.monotonic() + wait
        for p in procs:
            while p.exitcode is None and time.monotonic() < deadline:
                p.join(0.05)
        return [p.exitcode for p in procs if p.exitcode is not None]

    def __exit__(self, exc_type, *exc: object) -> bool:
        if exc_type is not None:
            for proc in list((self._processes or {}).values()):  # no public way before 3.14
                proc.terminate()
            self.shutdown(wait=True, cancel_futures=True)
            return False
        return super().__exit__(exc_type, *exc)


def default_workers(source: GraphSource, block_edges: int, requested: Optional[int]) -> int:
    if source.in_memory:
        return 1
    if requested:
        return requested
    if source.stored_edges_estimate <= 2 * block_edges:  # small: not worth starting processes
        return 1
    return max(1, min(MAX_DEFAULT_WORKERS, len(os.sched_getaffinity(0))))


def prepare(source: GraphSource, out_dir: str | Path, num_chunks: int, seed: int, source_id: dict, *,
            feature_dtype: str = "float32", block_edges: int = 1 << 22, workers: Optional[int] = None,
            progress: bool = True, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Write the store for `source` and return its manifest. Idempotent: an existing store for the
    same `source_id`, K and seed is returned untouched; a different one raises ChunkStoreError.
    `extra` goes into the manifest as it is (e.g. the source files' fingerprints)."""
    if importing_main():  # before this prepare clears the caller's staging folder as a leftover
        raise ChunkStoreError(unguarded("prepare"))  # the caller says why it failed: _died
    out_dir = Path(out_dir)
    if is_prepared(out_dir, source_id, num_chunks, seed):
        return read_manifest(out_dir)
    if source.num_nodes:  # refuses K > n before anything is written (when the headers tell n)
        ChunkAssignment(source.num_nodes, num_chunks, seed)
    _clear_leftovers(out_dir)
    staging = out_dir / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    (staging / ".spill").mkdir(parents=True)
    started = time.perf_counter()
    try:
        staged = source.stage(staging, staging / ".spill" / "stage", block_edges)
        ChunkAssignment(source.num_nodes, num_chunks, seed)
        codec = _encoding(source, feature_dtype, block_edges, progress)
        plan = Plan(source.num_nodes, num_chunks, seed, id_dtype(source.num_nodes), codec.encoding,
                    plan_range_bits(source.num_nodes, source.stored_edges_estimate, block_edges),
                    block_edges, staging, staging / ".spill", sparse_width=codec.width)
        nworkers = default_workers(source, block_edges, workers)
        counters = Counters(multiprocessing.get_context("spawn"))
        _init_worker(counters)
        runner = _Workers(nworkers, counters) if nworkers > 1 else _Inline()
        peaks = _Peaks()
        with runner:
            try:
                nodes_out, edges_read = _read_pass(runner, source, plan, nworkers, counters, progress, peaks)
                files, stats = _finalise_pass(runner, source, plan, nworkers, counters, progress, peaks)
            except BrokenProcessPool:
                raise ChunkStoreError(_died(runner.exit_codes(), out_dir, block_edges, nworkers)) from None
        manifest = _manifest(source, plan, source_id, nodes_out, files, stats, edges_read)
        workers_peak = [v for pid, v in sorted(peaks.by_pid.items()) if pid != os.getpid()]
        manifest.update(staged)
        manifest.update(extra or {})
        manifest["prepare"] = {"block_edges": block_edges, "workers": nworkers,
                               "range_bits": plan.range_bits,
                               "seconds": round(time.perf_counter() - started, 2),
                               "peak_rss_bytes": {"parent": peak_rss_bytes(), "workers": workers_peak}}
        shutil.rmtree(plan.spill)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        for entry in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):  # manifest last
            os.replace(entry, out_dir / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _encoding(source: GraphSource, feature_dtype: str, block_edges: int, progress: bool) -> Codec:
    """The codec x.npy is written with: the one asked for, or auto's choice (one read of the
    features, feature_codec.choose_encoding), said on stderr since it sets the store's bytes."""
    f = source.num_features
    if feature_dtype != AUTO:
        return Codec(feature_dtype if feature_dtype in ENCODINGS else np.dtype(feature_dtype).name, f)
    from grappa.util.progress_bar import progress_bar

    def blocks(bar):
        for b in source.node_blocks(block_rows(block_edges)):
            yield b.x
            bar.update(b.x.shape[0])

    with progress_bar(source.num_nodes, "prepare: choose the feature encoding", "node",
                      disable=not progress) as bar:
        codec = choose_encoding(blocks(bar), f)
    if progress:
        print(f"prepare: dataset.featureDtype auto stores features as {codec.encoding} "
              f"({codec.row_bytes:,} bytes a row; float32: {4 * f:,})", file=sys.stderr, flush=True)
    return codec


def _died(codes: list[int], out_dir: Path, block_edges: int, nworkers: int) -> str:
    """Why a prepare worker process died, from the exit codes: killed (SIGKILL: the kernel's
    out-of-memory killer, or a container's limit), or an error of its own (a worker starts by
    importing the script that called prepare, which then starts a prepare of its own unless
    guarded)."""
    memory = (f"lower prepare.blockEdges (now {block_edges}) or prepare.workers (now {nworkers}), "
              "or give the prepare more memory")
    if -signal.SIGKILL in codes:
        return f"a prepare worker process was killed (SIGKILL: out of memory?) while writing {out_dir}; {memory}"
    failed = sorted({c for c in codes if c > 0})
    if failed:
        return (f"a prepare worker process exited with code {failed[0]} while writing {out_dir} (its "
                "error is above). Prepare's worker processes start by importing the script that "
                f"called prepare: if that is your script, put the call under `{GUARD}`, or set "
                "prepare.workers: 1")
    return f"a prepare worker process died (killed for memory?) while writing {out_dir}; {memory}"


def _read_pass(runner, source: GraphSource, plan: Plan, nworkers: int, counters: Counters,
               progress: bool, peaks: _Peaks) -> tuple[dict[str, Any], int]:
    def nodes_done() -> str:
        return f"nodes {counters.nodes.value / max(1, source.num_nodes):.0%}"

    with PhaseBar("prepare: read edges", source.num_edges, counters.edges, progress, nodes_done):
        node_job = runner.submit(_node_task, source, plan)
        edge_jobs = [runner.submit(_edge_task, part, source.num_nodes, source.add_inverse_edges, plan)
                     for part in source.edge_parts(2 * nworkers)]
        wait([node_job, *edge_jobs], return_when=FIRST_EXCEPTION)  # a bad row stops it at once
        edges_read = sum(peaks.value(job.result()) for job in edge_jobs)
        nodes_out = peaks.value(node_job.result())
    if edges_read != source.num_edges:
        raise DatasetError(f"{source.name}: read {edges_read} edges but the source declares "
                           f"{source.num_edges}; the files are truncated or the count is wrong")
    return nodes_out, edges_read


def _finalise_pass(runner, source: GraphSource, plan: Plan, nworkers: int, counters: Counters,
                   progress: bool, peaks: _Peaks) -> tuple[dict[str, list], dict[str, Any]]:
    assign = plan.assignment
    files = spill_files(plan.spill)
    spilled = sum(p.stat().st_size for ps in files.values() for p in ps) // (2 * plan.id_dtype.itemsize)
    width = 1 << plan.range_bits
    tasks = (RangeTask(lo, min(lo + width, plan.num_nodes), files.get(lo >> plan.range_bits, []),
                       plan.range_bits, assign, plan.id_dtype, 2 * plan.block_edges, source.labeller)
             for lo in range(0, plan.num_nodes, width))
    out = _ChunkWriters(plan, assign, graph_labels=source.labeller is not None)
    in_flight: deque = deque()
    with PhaseBar("prepare: finalise", spilled, counters.final, progress):
        for task in tasks:
            in_flight.append(runner.submit(_finalise_task, task))
            if len(in_flight) > 2 * nworkers:
                out.append(peaks.value(in_flight.popleft().result()))
        while in_flight:
            out.append(peaks.value(in_flight.popleft().result()))
    return out.close()


class _ChunkWriters:
    """The parent's per-chunk files of the finalise pass, appended one range at a time."""

    def __init__(self, plan: Plan, assign: ChunkAssignment, graph_labels: bool) -> None:
        self.plan = plan
        self.chunk_of = NpyWriter(plan.staging / CHUNK_OF, assign.dtype, (), plan.num_nodes)
        self.nodes, self.indptr, self.indices, self.labels = [], [], [], []
        self.offset = np.zeros(plan.num_chunks, dtype=np.int64)
        for k in range(plan.num_chunks):
            folder = plan.staging / chunk_dir(k)
            folder.mkdir(exist_ok=True)
            n_k = assign.size(k)
            self.nodes.append(NpyWriter(folder / "nodes.npy", plan.id_dtype, (), n_k))
            self.indptr.append(NpyWriter(folder / "indptr.npy", np.int64, (), n_k + 1))
            self.indptr[k].append(np.zeros(1, np.int64))
            self.indices.append(NpyWriter(folder / "indices.npy", plan.id_dtype))
            if graph_labels:
                self.labels.append(NpyWriter(folder / "y.npy", np.int32, (), n_k))

    def append(self, result: RangeResult) -> None:
        self.chunk_of.append(result.chunk_of)
        for k, piece in result.pieces.items():
            self.nodes[k].append(piece.nodes)
            self.indptr[k].append(self.offset[k] + np.cumsum(piece.degree))
            self.offset[k] += int(piece.degree.sum())
            self.indices[k].append(piece.src)
            if self.labels:
                self.labels[k].append(piece.labels)

    def close(self) -> tuple[dict[str, list], dict[str, Any]]:
        files = {"nodes.npy": [w.close() for w in self.nodes],
                 "indptr.npy": [w.close() for w in self.indptr],
                 "indices.npy": [w.close() for w in self.indices]}
        if self.labels:
            files["y.npy"] = [w.close() for w in self.labels]
        return files, {"chunk_of": self.chunk_of.close(), "edges": self.offset.tolist()}


def _manifest(source: GraphSource, plan: Plan, source_id: dict, nodes_out: dict[str, Any],
              files: dict[str, list], stats: dict[str, Any], edges_read: int) -> dict[str, Any]:
    if source.num_classes is None:
        check_label_gaps(nodes_out["labels_used"], source)
    num_classes = source.num_classes or nodes_out["max_label"] + 1
    if num_classes < 1 and source.labels_required:  # inference needs none: 0 classes recorded
        raise DatasetError(f"{source.label_origin}: no node has a label (all -1); label some nodes")
    all_files = {**nodes_out["files"], **files}
    chunks = []
    for k in range(plan.num_chunks):
        counts = nodes_out["split_counts"][k]
        chunks.append({"nodes": plan.assignment.size(k), "edges": stats["edges"][k],
                       "train": counts[1], "val": counts[2], "test": counts[3],
                       "files": {name: entries[k] for name, entries in sorted(all_files.items())}})
    manifest = identity(source_id, plan.num_chunks, plan.seed)
    manifest.update({
        "num_nodes": plan.num_nodes, "num_edges": int(sum(stats["edges"])),
        "source_edges": edges_read, "num_features": source.num_features, "num_classes": int(num_classes),
        "id_dtype": plan.id_dtype.str, "feature_dtype": Codec(plan.feature_dtype, 0).dtype.str,
        **nodes_out["codec"],  # binary and sparse rows: how x.npy encodes them (feature_codec)
        "chunk_of": {"file": CHUNK_OF, **stats["chunk_of"]}, "chunks": chunks,
    })
    return manifest


def _clear_leftovers(out_dir: Path) -> None:
    """Remove what an interrupted prepare left (no manifest): only names this module writes."""
    if not out_dir.exists():
        return
    ours = [p for p in out_dir.iterdir()
            if p.name in (CHUNK_OF, LINK_DIR, IDS_FILE) or p.name.startswith(("chunk-", ".staging-"))]
    others = [p.name for p in out_dir.iterdir() if p not in ours]
    if others:
        raise ChunkStoreError(
            f"storeDir {out_dir} is not empty and has no {MANIFEST} (found {', '.join(sorted(others)[:5])}); "
            "use another storeDir or empty it")
    for p in ours:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
