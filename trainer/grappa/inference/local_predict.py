"""`grappa predict` / `grappa evaluate` on one machine: P worker processes and a progress bar.

The same workers run as pods on Kubernetes (one per rank, the scratch folder on the job's
volume). A failed worker stops the others and names its rank and log; a rerun resumes.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from grappa.data.rowfiles import LAYER_PREFIX
from grappa.data.store.manifest import read_manifest
from grappa.inference.job import PredictJob
from grappa.inference.predict_worker import LAUNCHED, MANIFEST
from grappa.inference.status import read_status, status_file
from grappa.runtime.local_job import LaunchError, tail
from grappa.runtime.zygote import FORK_ENV, Zygote, die_with, forking_enabled, signal_group
from grappa.util.cgroup_memory import CGROUP_PEAKS
from grappa.util.files import atomic_write
from grappa.util.process_memory import PeakMemory

# What a predict worker imports, loaded once by the zygote that forks them (runtime/zygote.py)
WORKER_MODULES = ["torch", "grappa.inference.predict_worker"]
# The coordinator's own PSS and cgroup, read while it watches (a small process: a reading is cheap)
COORDINATOR_SAMPLE_S = 2.0


def _earlier(job: PredictJob) -> Optional[PredictJob]:
    try:
        return PredictJob.load(job.path)
    except (OSError, ValueError, TypeError):
        return None


def prepare_scratch(job: PredictJob, clear_status: bool = True) -> bool:
    """Create or reuse the scratch folder; True when resuming the same job. A status left by an
    earlier attempt is dropped unless the workers may be running already (pods). The same job
    asked another way (workers, block sizes, where the files are) keeps the layers' row files,
    which depend on the model and the graph alone."""
    scratch = job.scratch
    earlier = _earlier(job) if job.path.exists() else None
    if earlier == job:
        for r in range(job.workers if clear_status else 0):
            status_file(scratch, r).unlink(missing_ok=True)
        return True
    if earlier is not None and earlier.identity == job.identity:
        for p in scratch.iterdir():  # the outputs' ranges and markers follow the worker count
            if not p.name.startswith(LAYER_PREFIX):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    elif scratch.exists():
        shutil.rmtree(scratch)  # another job's partial work: nothing of it is reusable
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = job.path.with_suffix(".tmp")
    tmp.write_text(job.to_json())
    os.replace(tmp, job.path)
    return earlier is not None and earlier.identity == job.identity


def run_local(job: PredictJob, num_nodes: int, layers: int, progress: bool = True,
              threads: Optional[int] = None) -> Path:
    """Run the job to completion; returns the published manifest's path."""
    resumed = prepare_scratch(job)
    (job.scratch / LAUNCHED).write_text(repr(time.time()))  # this attempt's start, for the wall time
    done = rows_on_disk(job) if resumed else 0
    if resumed and progress:
        print(f"grappa: resuming the unfinished run in {job.scratch}: {done / max(1, num_nodes * layers):.0%} "
              "of the rows are computed already", file=sys.stderr)
    logs = job.scratch / "logs"
    logs.mkdir(exist_ok=True)
    threads = threads or max(1, (os.cpu_count() or 1) // job.workers)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "GRAPPA_THREADS": str(threads)}
    procs, zygote = [], None
    memory = PeakMemory()  # this coordinator's own, sampled while it watches
    try:
        if forking_enabled():
            # a user's model was loaded here already (its code checked): PyG, if it uses it, too
            pyg = ["torch_geometric"] if "torch_geometric" in sys.modules else []
            try:
                zygote = Zygote(env, WORKER_MODULES + pyg, logs / "zygote.log")
            except RuntimeError as err:
                raise LaunchError(f"{err}; {FORK_ENV}=0 starts each worker as a fresh interpreter") from None
        for rank in range(job.workers):
            argv = ["-m", "grappa.inference.predict_worker", str(job.path), str(rank)]
            if zygote is not None:
                procs.append(zygote.start(argv, env, logs / f"worker-{rank}.log"))
                continue
            with open(logs / f"worker-{rank}.log", "ab") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=die_with(os.getpid())))
        _watch(job, procs, logs, num_nodes, layers, progress, done, memory)
    finally:
        for p in procs:
            if p.poll() is None:
                signal_group(p.pid, signal.SIGKILL)
                p.wait()
        if zygote is not None:
            zygote.close()
    manifest = Path(job.out) / MANIFEST
    if not manifest.exists():
        raise LaunchError(f"every worker exited 0 but {manifest} was not written")
    add_coordinator_memory(manifest, memory)
    return manifest


def add_coordinator_memory(manifest: Path, memory: PeakMemory) -> None:
    """This process's memory beside the workers' in the manifest (rank 0 wrote the rest): peak
    RSS (the model and graph checks of `grappa predict` ran here too), PSS, and its memory cgroup,
    which outside a container is the one every worker shares too."""
    memory.sample()
    m = json.loads(manifest.read_text())
    m["coordinator"] = {"peak_rss_bytes": memory.peak_rss, "peak_pss_bytes": memory.peak_pss,
                        **{f"{k}_bytes": v for k, v in zip(CGROUP_PEAKS, memory.cgroup.values())},
                        "cgroup": memory.cgroup.describe()}
    atomic_write(manifest, json.dumps(m, indent=1).encode())


def rows_on_disk(job: PredictJob) -> int:
    """Rows of every layer already in complete row files: where a resumed run starts."""
    chunks = read_manifest(Path(job.store))["chunks"]
    return sum(int(c["nodes"]) for layer in sorted(job.scratch.glob(f"{LAYER_PREFIX}*"))
               for k, c in enumerate(chunks) if (layer / f"chunk-{k}.npy").exists())


def _watch(job: PredictJob, procs, logs: Path, num_nodes: int, layers: int, progress: bool,
           resumed_rows: int = 0, memory: Optional[PeakMemory] = None) -> None:
    bar = None
    if progress:
        from grappa.util.progress_bar import progress_bar  # on a terminal tqdm, in a log lines
        bar = progress_bar(num_nodes * layers, "predict", "rows", unit_scale=True, dynamic_ncols=True,
                           initial=resumed_rows)
        bar.n = resumed_rows  # a resumed run starts where the completed layers left it
        bar.refresh()
    done_before, started = resumed_rows, time.monotonic()
    try:
        while True:
            if memory is not None:
                memory.sample_every(COORDINATOR_SAMPLE_S)
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                raise LaunchError(
                    f"predict worker {rank} exited with code {code}; stopped the others. Run the same "
                    f"command again to resume from the completed layers.\nlast lines of "
                    f"{logs / f'worker-{rank}.log'}:\n{tail(logs / f'worker-{rank}.log')}")
            finished = all(c == 0 for c in codes)
            if bar is not None:
                # rank 0 removes the status files with the scratch folder when it publishes:
                # finished is every row of every layer, whatever the last files said
                states = [read_status(job.scratch, r) for r in range(job.workers)]
                n = num_nodes * layers if finished else sum(_rows_done(s) for s in states)
                if n > done_before:
                    bar.update(n - done_before)
                    done_before = n
                # rows count once per layer: nodes/s is the rate of whole nodes through all layers
                rate = (done_before - resumed_rows) / layers / max(time.monotonic() - started, 1e-9)
                bar.set_postfix(nodes_per_s=f"{rate:,.0f}")
            if finished:
                return
            time.sleep(0.2)
    finally:
        if bar is not None:
            bar.close()


def _rows_done(s: dict) -> int:
    """Rows computed by one worker over every layer so far (a layer counts its own rows)."""
    if not s:
        return 0
    per_layer = s.get("rows_total", 0)
    if s.get("phase") in ("assemble", "done"):
        return per_layer * s.get("layer", 0)
    return per_layer * (s.get("layer", 1) - 1) + s.get("rows", 0)
