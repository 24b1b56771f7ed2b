"""`grappa train`: the aggregator and P workers as local processes on 127.0.0.1.

Same entry points as the Kubernetes pods. Shows a progress bar from the aggregator's per-epoch
JSON lines; if any process fails, stops every other one and exits non-zero naming the rank.
SIGTERM to the launcher goes on to every process, as Kubernetes does to every pod: the aggregator
checkpoints its last completed epoch, and the launcher exits 143 (stop.EXIT_STOPPED) once it has.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Protocol

from grappa.config import TrainConfig, dump_config
from grappa.runtime import startup
from grappa.runtime.stop import EXIT_STOPPED, Stopped
from grappa.runtime.zygote import FORK_ENV, Zygote, die_with, forking_enabled, signal_group
from grappa.util.cgroup_memory import CGROUP_PEAKS
from grappa.util.files import atomic_write
from grappa.util.process_memory import PeakMemory

# How long stopped processes get before SIGKILL: the aggregator needs stop.SAFE_POINT_WAIT_S plus
# one checkpoint write at most; this leaves room for a slow disk.
STOP_GRACE_S = 30.0
PIDS = "pids.json"  # rank -> pid while the processes run
# The launcher's own PSS and cgroup, read while it watches (a small process: a reading is cheap)
SAMPLE_S = 2.0
# What every rank imports, loaded once by the zygote that forks them (zygote.py); torch._dynamo
# is imported when a rank builds its optimizer: seconds of CPU each.
RANK_MODULES = ["torch", "torch._dynamo", "torch.distributed", "torch.utils.serialization", "grappa.app.cli",
                "grappa.app.roles", "grappa.app.report", "grappa.runtime.transport", "grappa.runtime.worker",
                "grappa.runtime.aggregator", "grappa.runtime.stages", "grappa.runtime.exact_eval",
                "grappa.models.build", "grappa.data.store.preparation"]


def rank_modules(cfg: TrainConfig) -> list[str]:
    """RANK_MODULES, and PyG for a user's model (its module itself is the user's code: each rank
    imports it, so an edit between runs is seen)."""
    import importlib.util
    pyg = cfg.model.user_model is not None and importlib.util.find_spec("torch_geometric") is not None
    return RANK_MODULES + (["torch_geometric"] if pyg else [])


class LaunchError(RuntimeError):
    """A process of the job failed; `code` is its exit code when it is a permanent one (2, 3),
    which the launcher then exits with, else 1."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code

    @property
    def exit_code(self) -> int:  # what exit_codes.permanent_code reads
        return self.code


PERMANENT = (2, 3)  # exit_codes: a configuration, data or model code that cannot run


def error_line(path: Path) -> Optional[str]:
    """The last `grappa: error:` line of a rank's log (its one-line reason), without the prefix."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [ln for ln in lines if ln.startswith("grappa: error: ")]
    return found[-1][len("grappa: error: "):] if found else None


class _Terminated(Exception):
    """The launcher itself got SIGTERM."""


def _raise_terminated(*_) -> None:
    raise _Terminated()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role(rank: int) -> str:
    return "aggregator (rank 0)" if rank == 0 else f"worker {rank - 1} (rank {rank})"


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Placement(Protocol):
    master_addr: str
    env: dict[str, str]

    def prefix(self, rank: int) -> list[str]: ...


class LocalJob:
    """`placement` (optional) runs ranks elsewhere than on loopback, e.g. one network namespace
    each: it maps a rank to a command prefix, and gives the aggregator's address and extra env."""

    def __init__(self, cfg: TrainConfig, progress: bool = True, threads: Optional[int] = None,
                 placement: Optional["Placement"] = None, zygote: Optional[Zygote] = None):
        """`zygote`: one forked already (`Zygote.forked_here`), used instead of a fresh one."""
        self.cfg = cfg
        self.early_zygote = zygote
        self.placement = placement
        self.progress = progress
        self.world = cfg.partitions + 1
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.world)
        self.run_dir = Path(cfg.run_dir)
        self.log_dir = self.run_dir / "logs"
        self.procs: list = []  # subprocess.Popen, or zygote.Forked: the same calls
        self.zygote: Optional[Zygote] = None
        self.memory = PeakMemory()

    def spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.phases_file.unlink(missing_ok=True)  # this attempt's phases only
        port = free_port()
        place = self.placement
        base_env = {**os.environ, "GRAPPA_CONFIG": dump_config(self.cfg), startup.ENV: str(self.phases_file),
                    "MASTER_ADDR": place.master_addr if place else "127.0.0.1",
                    "MASTER_PORT": str(port), "WORLD_SIZE": str(self.world),
                    "OMP_NUM_THREADS": str(self.threads), "GRAPPA_THREADS": str(self.threads),
                    "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
                    # On loopback, the rendezvous store and metrics listen there only (rendezvous.py)
                    **(place.env if place else {"GRAPPA_RENDEZVOUS_ADDRESS": "127.0.0.1",
                                                "GRAPPA_BIND_ADDRESS": "127.0.0.1"})}
        base_env.pop("GRAPPA_JOB_NAME", None)  # local runs take rounds from the config
        self.spawned_at = time.monotonic()
        if place is None and self.early_zygote is not None:
            self.zygote, self.early_zygote = self.early_zygote, None
            self.zygote.log_to(self.log_dir / "zygote.log")
        elif place is None and forking_enabled():
            try:
                self.zygote = Zygote(base_env, rank_modules(self.cfg), self.log_dir / "zygote.log")
            except RuntimeError as err:
                raise LaunchError(f"{err}; {FORK_ENV}=0 starts each rank as a fresh interpreter") from None
        for rank in range(self.world):
            argv = ["-m", "grappa", "aggregator" if rank == 0 else "worker"]
            env, log_path = {**base_env, "RANK": str(rank)}, self.log_dir / f"rank-{rank}.log"
            if self.zygote is not None:
                self.procs.append(self.zygote.start(argv, env, log_path))
                continue
            with open(log_path, "ab") as log:
                self.procs.append(subprocess.Popen(
                    [*(place.prefix(rank) if place else []), sys.executable, *argv], env=env, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with(os.getpid())))
        # Which process is which rank, for people (and tests) who need to signal one, while they run.
        (self.run_dir / PIDS).write_text(json.dumps({r: p.pid for r, p in enumerate(self.procs)}))
        loaded = (f"forked from one process that loaded torch in {time.monotonic() - self.spawned_at:.1f} s"
                  if self.zygote is not None else "each loads torch")
        self.say(f"started the aggregator and {self.world - 1} workers ({loaded}); they meet and build "
                 "their local graphs before epoch 1")

    @property
    def phases_file(self) -> Path:
        return self.log_dir / "phases.jsonl"

    def say(self, text: str) -> None:
        if self.progress:
            print(f"grappa: {text}", file=sys.stderr, flush=True)

    def show_phases(self, phases: startup.PhaseLines) -> None:
        """Before epoch 1: what the processes reached, and when (since they were started)."""
        for p in phases.new():
            after = f"after {time.monotonic() - self.spawned_at:.1f} s"
            if p["phase"] == startup.JOINED:
                self.say(f"all {p['ranks']} processes started and joined {after}; building the model, "
                         "its optimizer and the workers' local graphs")
            elif p["phase"] == startup.ROUND_BUILT:
                self.say(f"round {p['round']} built {after} (local graphs {p['build_seconds']:.1f} s); "
                         f"epoch {p['epoch'] + 1} of {self.cfg.training.epochs} under way")
            elif p["phase"] == startup.STAGE_STARTED:
                self.say(f"stage {p['stage']} started {after}; epoch {p['epoch'] + 1} of "
                         f"{self.cfg.training.epochs} under way")

    def stop_all(self, grace: float = STOP_GRACE_S) -> None:
        for p in self.procs:
            if p.poll() is None:
                signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(p.pid, signal.SIGKILL)
                p.wait()
        self.close_zygote()

    def close_zygote(self) -> None:
        """Once the ranks are done (a zygote ends any still running)."""
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None

    def watch(self) -> None:
        metrics = self.run_dir / "metrics.jsonl"
        offset = metrics.stat().st_size if metrics.exists() else 0
        bar = None
        phases = startup.PhaseLines(self.phases_file)
        if self.progress:
            from grappa.util.progress_bar import progress_bar
            bar = progress_bar(self.cfg.training.epochs, "epochs", "ep", dynamic_ncols=True)
        try:
            while True:
                self.memory.sample_every(SAMPLE_S)
                self.show_phases(phases)
                offset = self._advance(metrics, offset, bar)
                # Workers first: one that failed because the aggregator left is then always seen
                # together with the aggregator's exit, which decides what happened.
                codes = [p.poll() for p in reversed(self.procs)][::-1]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    # a permanent failure is the cause; the others' group failure follows it
                    rank, code = min(failed, key=lambda rc: (rc[1] not in PERMANENT, rc[0]))
                    self.stop_all()
                    if rank == 0 and code == EXIT_STOPPED:  # someone sent the aggregator SIGTERM
                        raise Stopped(self.stopped_message("the aggregator got SIGTERM"))
                    log = self.log_dir / f"rank-{rank}.log"
                    line = error_line(log) if code in PERMANENT else None
                    if line:
                        raise LaunchError(f"{line} ({role(rank)} exited with code {code}; log {log})", code)
                    raise LaunchError(
                        f"{role(rank)} exited with code {code}; stopped the other processes.\n"
                        f"last lines of {self.log_dir / f'rank-{rank}.log'}:\n"
                        f"{tail(self.log_dir / f'rank-{rank}.log')}")
                if all(c == 0 for c in codes):
                    self._advance(metrics, offset, bar)
                    return
                time.sleep(0.3)
        finally:
            if bar is not None:
                bar.close()

    @staticmethod
    def _advance(metrics: Path, offset: int, bar) -> int:
        if not metrics.exists():
            return offset
        with open(metrics) as f:
            f.seek(offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind("\n") + 1]
        for line in complete.splitlines():
            rec = json.loads(line)
            if bar is None:
                continue
            if rec.get("event") == "resume":
                bar.n = rec["epoch"]
            elif "event" not in rec and "epoch" in rec:  # an epoch's record (events: resume, stop)
                bar.n = rec["epoch"]
                post = {"round": rec["round"], "loss": f"{rec['loss']:.3f}"}
                if rec.get("val_acc") is not None:
                    post["val"] = f"{rec['val_acc']:.3f}"
                elif rec.get("val_mrr") is not None:
                    post["val MRR"] = f"{rec['val_mrr']:.3f}"
                bar.set_postfix(post)
            bar.refresh()
        return offset + len(complete.encode())

    def stopped_message(self, why: str) -> str:
        code = self.procs[0].returncode if self.procs else None
        if code != EXIT_STOPPED:
            return f"{why}; the aggregator exited with code {code}: see {self.log_dir / 'rank-0.log'}"
        return (f"{why}; stopped, the last completed epoch is checkpointed in {self.run_dir}/checkpoints "
                "(run the same command to resume)")

    def run(self) -> dict:
        # In the main thread only (Python's rule); tests may run jobs from other threads.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
        try:
            self.spawn()
            self.watch()
        except _Terminated:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the wait short
            self.stop_all()
            raise Stopped(self.stopped_message("SIGTERM")) from None
        except BaseException:  # Ctrl-C, or anything that ends the launcher's own loop early
            self.stop_all()  # the aggregator checkpoints on the SIGTERM this sends
            raise
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
            if all(p.poll() is not None for p in self.procs):  # nobody left to signal
                (self.run_dir / PIDS).unlink(missing_ok=True)
            self.close_zygote()
        report = self.run_dir / "report.json"
        if not report.exists():
            raise LaunchError(f"all processes exited 0 but {report} was not written")
        return self.add_own_memory(report)

    def add_own_memory(self, path: Path) -> dict:
        """The launcher's memory beside the ranks' in report.json's `memory` (the aggregator wrote
        the rest): its peak RSS (with `grappa train`, the chunk store's prepare ran in it too), PSS
        and memory cgroup, which outside a container is the one every rank shares too."""
        report = json.loads(path.read_text())
        self.memory.sample()
        m = self.memory
        mem = report.get("memory") or {}
        mem.update({"launcher_peak_rss_bytes": m.peak_rss, "launcher_peak_pss_bytes": m.peak_pss,
                    **{f"launcher_{k}_bytes": v for k, v in zip(CGROUP_PEAKS, m.cgroup.values())},
                    "launcher_cgroup": m.cgroup.describe()})
        report["memory"] = mem
        atomic_write(path, json.dumps(report, indent=2).encode())
        if self.cfg.storage.run_home is not None:  # the bucket's copy is the run's record: the same bytes
            from grappa.data.s3.run_home import RunHome
            RunHome(self.cfg.storage.run_home).put(path, "report.json")
        return report
