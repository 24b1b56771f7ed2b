"""SIGTERM (suspend, preemption, drain): real local runs stopped mid-training, then resumed."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grappa.config import TrainConfig, dump_config
from grappa.data.store.preparation import prepare_store
from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
from grappa.runtime.local_job import LocalJob
from grappa.runtime.stop import EXIT_STOPPED
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 24


def job(tmp_path: Path, name: str) -> TrainConfig:
    """Mini-batch, so a signal usually lands mid-epoch; no periodic checkpoints, so any
    checkpoint is the stop's."""
    cfg = TrainConfig.model_validate({
        "partitions": 2, "dataset": {"name": "csbm", "synthetic": {"numNodes": 600}},
        "model": {"hidden": 16}, "checkpoint": {"interval": 0},
        "training": {"epochs": EPOCHS, "mode": "mini-batch", "batchSize": 16},
        "runDir": str(tmp_path / name), "storeDir": str(tmp_path / "store")})
    prepare_store(cfg, progress=False)
    return cfg


def records(cfg: TrainConfig) -> list[dict]:
    path = Path(cfg.run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines(keepends=True) if x.endswith("\n")]


def epochs_of(recs: list[dict]) -> list[int]:
    return [r["epoch"] for r in recs if "event" not in r]


def launch(tmp_path: Path, cfg: TrainConfig, after_epochs: int) -> subprocess.Popen:
    """`grappa train` as a user runs it; returns once `after_epochs` epochs are reported."""
    config = tmp_path / f"{Path(cfg.run_dir).name}.json"
    config.write_text(dump_config(cfg))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "grappa", "train", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}/trainer:{REPO}/operator"})
    def started() -> bool:
        assert launcher.poll() is None, launcher.stdout.read()
        return len(epochs_of(records(cfg))) >= after_epochs
    run_dir = Path(cfg.run_dir)
    work = lambda: tuple(sorted((str(f), f.stat().st_size) for f in run_dir.rglob("*") if f.is_file()))  # noqa: E731
    wait_until(started, f"{after_epochs} epochs of {run_dir}", stall=120, progress=work, poll=0.05)
    return launcher


def gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return True


def assert_stopped_with_a_checkpoint(cfg: TrainConfig, reported: int) -> int:
    """The stop kept every epoch the aggregator reported, and none is reported that it did not keep."""
    recs = records(cfg)
    stop = [r for r in recs if r.get("event") == "stop"]
    assert len(stop) == 1 and stop[0]["why"] == "SIGTERM", recs[-3:]
    done = epochs_of(recs)
    assert done == list(range(1, len(done) + 1))
    path = latest_checkpoint(cfg.run_dir)
    ck = load_checkpoint(path)
    assert reported <= ck["epoch"] == stop[0]["epoch"] == len(done) < EPOCHS
    assert [h["epoch"] for h in ck["history"]] == done
    assert stop[0]["checkpoint"] == str(path)
    log = (Path(cfg.run_dir) / "logs" / "rank-0.log").read_text()
    assert f"SIGTERM: checkpoint of epoch {ck['epoch']} step {stop[0]['step']} saved to {path} in " in log
    return ck["epoch"]


def test_sigterm_to_the_launcher_checkpoints_and_resume_finishes_exactly(tmp_path):
    reference = LocalJob(job(tmp_path, "reference"), progress=False).run()

    cfg = job(tmp_path, "stopped")
    launcher = launch(tmp_path, cfg, after_epochs=3)
    reported = len(epochs_of(records(cfg)))
    # The ranks' zygote is a fork of the launcher (zygote.py): it has the launcher's command line.
    ranks = json.loads((Path(cfg.run_dir) / "pids.json").read_text())
    zygote = int(Path(f"/proc/{ranks['0']}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    assert Path(f"/proc/{zygote}/cmdline").read_bytes() == Path(f"/proc/{launcher.pid}/cmdline").read_bytes()
    launcher.send_signal(signal.SIGTERM)
    out, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == EXIT_STOPPED, out
    assert gone(zygote) and all(gone(pid) for pid in ranks.values())
    assert "the last completed epoch is checkpointed" in out
    saved = assert_stopped_with_a_checkpoint(cfg, reported)

    resumed = LocalJob(cfg, progress=False).run()  # the same job again, as a restarted group
    recs = records(cfg)
    assert next(r for r in recs if r.get("event") == "resume")["epoch"] == saved
    assert epochs_of(recs) == list(range(1, EPOCHS + 1))  # no epoch lost, none repeated
    assert [h["epoch"] for h in resumed["history"]] == list(range(1, EPOCHS + 1))
    # What was saved is the state at the end of epoch `saved`, not a model half-way through the
    # next one: the resumed run replays the uninterrupted one.
    for a, b in zip(reference["history"], resumed["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5), a["epoch"]
        assert a.get("val_acc") == pytest.approx(b.get("val_acc"))


def test_sigterm_saves_while_the_aggregator_waits_on_a_stuck_worker(tmp_path):
    """The aggregator is blocked in gloo, waiting for a gradient that will not come (a worker
    frozen, like one on a node already gone): it must still save and exit, on its own."""
    cfg = job(tmp_path, "stuck")
    launcher = launch(tmp_path, cfg, after_epochs=2)
    pids = {int(r): pid for r, pid in json.loads((Path(cfg.run_dir) / "pids.json").read_text()).items()}
    os.kill(pids[1], signal.SIGSTOP)
    try:
        time.sleep(1.0)  # the aggregator is now inside a receive from worker 0
        reported = len(epochs_of(records(cfg)))
        os.kill(pids[0], signal.SIGTERM)
        wait_until(lambda: gone(pids[0]), "the aggregator to exit while a worker is stuck", stall=120)
    finally:
        os.kill(pids[1], signal.SIGCONT)
    out, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == EXIT_STOPPED, out
    assert "the aggregator got SIGTERM" in out
    assert_stopped_with_a_checkpoint(cfg, reported)
    assert all(gone(pid) for pid in pids.values())
