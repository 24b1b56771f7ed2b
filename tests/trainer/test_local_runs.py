"""Real multi-process runs through the local launcher (gloo on 127.0.0.1)."""
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grappa.config import TrainConfig
from grappa.models import GNN
from grappa.models.params import num_buffer_values, num_params
from grappa.runtime.exchange import SCALARS
from grappa.runtime.local_job import LocalJob
from grappa.runtime.transport import ring_allreduce_bytes
from grappa.util.cgroup_memory import CGROUP_PEAKS, find_memory_cgroup
from small_jobs import csbm_job
from waiting import load_factor, wait_until

REPO = Path(__file__).resolve().parents[2]


def job(tmp_path, **overrides) -> TrainConfig:
    return csbm_job(tmp_path, **overrides)


@pytest.mark.parametrize("mode", ["full-graph", "mini-batch"])
def test_training_bytes_are_exactly_the_gradient_only_floor(tmp_path, mode):
    cfg = job(tmp_path, **{"training.mode": mode, "training.batchSize": 100,
                           "model.arch": "gin", "grappa.rounds.every": 1})
    report = LocalJob(cfg, progress=False).run()
    model = GNN(cfg.model, 64, 5)
    message = 4 * (num_params(model) + num_buffer_values(model) + SCALARS)  # G, one step's message
    ranks = cfg.partitions + 1
    per_step = [sum(ring_allreduce_bytes(message, 4, ranks, r)) for r in range(ranks)]  # sent + received
    assert max(per_step) <= 4 * message  # the busiest link: at most 4 G whatever P (the star: 2 P G)
    manifest = json.loads((Path(cfg.store_dir) / "manifest.json").read_text())
    train = [c["train"] for c in manifest["chunks"]]  # K = P: chunk r is worker r's base
    steps = 1 if mode == "full-graph" else max(-(-n // 100) for n in train)
    for rec in report["history"]:
        assert rec["train_bytes"] == steps * per_step[0]
        assert rec["worker_train_bytes"] == [steps * b for b in per_step[1:]]
    assert report["rounds"] == [0, 1, 2]  # a new round every epoch, switched at boundaries
    for rec in report["history"]:  # where an epoch's time went (values are wall time: not asserted)
        assert {"train_seconds", "round_build_seconds", "eval_seconds", "epoch_seconds"} <= rec.keys()
    # Every rank's memory, per epoch and in the report: present, and plausible for a small job.
    lines = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    epochs = [x for x in lines if "worker_peak_pss_bytes" in x]
    assert len(epochs) == cfg.training.epochs
    mem = report["memory"]
    for rss, pss, edges, per_edge in zip(mem["worker_peak_rss_bytes"], mem["worker_peak_pss_bytes"],
                                         mem["worker_local_edges"], mem["worker_pss_bytes_per_local_edge"]):
        assert 50 * 2**20 < pss <= rss < 4 * 2**30
        assert edges > 0 and per_edge == pytest.approx(pss / edges)
    assert 0 < mem["aggregator_peak_pss_bytes"] <= mem["aggregator_peak_rss_bytes"]
    assert mem["job_peak_pss_bytes"] == sum(mem["worker_peak_pss_bytes"]) + mem["aggregator_peak_pss_bytes"]
    # The launcher's own (here: this test's process), added to the report the aggregator wrote.
    assert 0 < mem["launcher_peak_pss_bytes"] <= mem["launcher_peak_rss_bytes"]
    # Memory cgroups: locally every rank is in the launcher's, the session's (a pod's own in a pod).
    here = find_memory_cgroup()
    assert all("worker_cgroup_peak_bytes" in x and "aggregator_cgroup_peak_bytes" in x for x in epochs)
    if here is None:
        assert mem["cgroup"]["path"] is None and set(mem["worker_cgroup_peak_bytes"]) == {0}
        return
    assert mem["cgroup"]["path"] == mem["launcher_cgroup"]["path"] == here.path
    ranks_peaks = list(zip(*(mem[f"worker_{k}_bytes"] for k in CGROUP_PEAKS)))
    ranks_peaks.append(tuple(mem[f"aggregator_{k}_bytes"] for k in CGROUP_PEAKS))
    for peak, working_set, cache in ranks_peaks:  # three torch processes at least, all charged here
        assert peak >= working_set > 50 * 2**20 and 0 <= cache <= peak
    assert mem["launcher_cgroup_peak_bytes"] >= max(p for p, _, _ in ranks_peaks) * 0.5


def test_resume_continues_at_the_saved_epoch_and_replays_exactly(tmp_path):
    full = job(tmp_path / "a", **{"training.epochs": 4, "checkpoint.interval": 2})
    ref = LocalJob(full, progress=False).run()
    part = job(tmp_path / "b", **{"training.epochs": 2, "checkpoint.interval": 2})
    LocalJob(part, progress=False).run()
    resumed_cfg = job(tmp_path / "b", **{"training.epochs": 4, "checkpoint.interval": 2})
    resumed = LocalJob(resumed_cfg, progress=False).run()
    lines = [json.loads(l) for l in (Path(resumed_cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert {"event": "resume", "epoch": 2} == {k: lines[2][k] for k in ("event", "epoch")}
    assert [l["epoch"] for l in lines if "loss" in l] == [1, 2, 3, 4]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4]
    for a, b in zip(ref["history"], resumed["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a.get("val_acc") == pytest.approx(b.get("val_acc"))


class Endless:
    """`grappa train` as a user runs it, with epochs enough to outlive the test, in its own
    process group. Ended when the test ends, passed or failed: the launcher's group, then every
    rank it wrote into pids.json (ranks have sessions of their own)."""

    def __init__(self, tmp_path: Path) -> None:
        cfg = job(tmp_path, **{"training.epochs": 100000})
        self.run_dir = Path(cfg.run_dir)
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "grappa", "train",
             "--set", f"runDir={cfg.run_dir}", "--set", f"storeDir={cfg.store_dir}",
             "--set", "partitions=2", "--set", "dataset.synthetic.numNodes=600",
             "--set", "model.hidden=16", "--set", "training.epochs=100000"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": f"{REPO}/trainer:{REPO}/operator"})
        self.pids: dict[str, int] = {}

    def _work(self) -> tuple:
        """What moves while the job starts: its files' sizes (prepare, rank logs, metrics)."""
        return tuple(sorted((str(p), p.stat().st_size) for p in self.run_dir.rglob("*") if p.is_file()))

    def started(self) -> dict[str, int]:
        """Waits until two epochs are recorded (the ranks train), then the rank -> pid map."""
        metrics = self.run_dir / "metrics.jsonl"

        def trained() -> bool:
            if self.launcher.poll() is not None:
                raise AssertionError(f"the launcher exited ({self.launcher.returncode}) before "
                                     f"training: {self.launcher.stdout.read()}")
            return metrics.exists() and metrics.read_text().count("\n") >= 2
        wait_until(trained, "two epochs of the endless job", progress=self._work, stall=120)
        self.pids = json.loads((self.run_dir / "pids.json").read_text())
        return self.pids

    def end(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.launcher.pid, signal.SIGKILL)
        pids = self.pids
        if not pids:  # the test failed before reading them
            with contextlib.suppress(OSError, ValueError):
                pids = json.loads((self.run_dir / "pids.json").read_text())
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.launcher.wait()


@pytest.fixture
def endless(tmp_path):
    run = Endless(tmp_path)
    try:
        yield run
    finally:
        run.end()


def gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" in status.read_text().lower()
    except FileNotFoundError:
        return True


def test_killed_launcher_takes_its_processes_along(endless):
    pids = endless.started()
    endless.launcher.kill()  # SIGKILL: no finally runs in the launcher
    endless.launcher.communicate(timeout=30)
    # the ranks get SIGTERM from the kernel (PR_SET_PDEATHSIG) and stop within their grace
    survivors = lambda: [pid for pid in pids.values() if not gone(pid)]  # noqa: E731
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not survivors(), "the ranks to exit after the launcher", stall=30)
    assert not survivors(), f"orphaned after the launcher died: {survivors()}"


def test_killed_worker_stops_the_job_and_names_the_rank(endless):
    pids = endless.started()
    os.kill(pids["2"], signal.SIGKILL)
    try:  # a hang guard, not a timing claim: the group must end rather than wait on the dead rank
        out, _ = endless.launcher.communicate(timeout=60 * load_factor())
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher still ran after worker 1 (rank 2) was killed: the group hangs")
    assert endless.launcher.returncode != 0
    assert "worker 1 (rank 2)" in out
    assert all(gone(pid) for pid in pids.values())  # no orphans


def test_bad_config_names_the_field(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grappa", "train", "--layers", "3", "--fanouts", "10,5",
         "--run-dir", str(tmp_path)], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}/trainer:{REPO}/operator"})
    assert out.returncode == 2
    assert "training.fanouts has 2 entries but model.layers is 3" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "grappa", "train", "--set", "grappa.shrinkage=2", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{REPO}/trainer:{REPO}/operator"})
    assert out.returncode == 2 and "grappa.shrinkage" in out.stderr


@pytest.mark.slow
def test_cora_p4_reaches_075_test_accuracy(data_root, tmp_path):
    cfg = job(tmp_path, **{"partitions": 4, "dataset": {"name": "cora"}, "model.hidden": 128,
                           "training.epochs": 100, "grappa.rounds.every": 10})
    report = LocalJob(cfg, progress=False).run()
    assert report["result"]["test_acc"] >= 0.75, report["result"]
    assert len(report["rounds"]) >= 5


@pytest.mark.parametrize("mode,arch", [("full-graph", "gcn"), ("mini-batch", "gin")])
def test_in_process_simulation_matches_the_multi_process_run(tmp_path, mode, arch):
    from grappa.runtime.simulation import Simulation
    cfg = job(tmp_path, **{"training.mode": mode, "training.batchSize": 50, "model.arch": arch,
                           "training.epochs": 4, "grappa.rounds.every": 2, "grappa.correction": "node",
                           "training.evalMode": "exact"})  # the simulation evaluates exactly
    real = LocalJob(cfg, progress=False).run()
    result, sim = Simulation(cfg).run()
    for a, b in zip(real["history"], sim):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["val_acc"] == pytest.approx(b["val_acc"], abs=1e-6)
        assert a["test_acc"] == pytest.approx(b["test_acc"], abs=1e-6)
        assert a["train_bytes"] == b["train_bytes"]
    assert result["test_acc"] == pytest.approx(real["result"]["test_acc"])
