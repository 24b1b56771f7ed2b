"""RETEXO through the real launcher: stage schedule, analytic bytes, resume mid-stage."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grappa.config import ConfigError, TrainConfig, validate_config
from grappa.data.local_graph import build_local_graph
from grappa.data.store.assign import base_chunks
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models.params import num_buffer_values, num_params
from grappa.runtime.exchange import SCALARS
from grappa.runtime.local_job import LocalJob
from grappa.runtime.transport import ring_allreduce_bytes
from grappa.strategies.retexo import build_stage_model, stage_epochs
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def job(tmp_path, epochs: int, **extra) -> TrainConfig:
    cfg = TrainConfig.model_validate({
        "strategy": "retexo", "partitions": 2,
        "dataset": {"name": "csbm", "synthetic": {"numNodes": 600, "numFeatures": 24}},
        "model": {"hidden": 16, "layers": 2}, "training": {"epochs": epochs},
        "runDir": str(tmp_path / "run"), "storeDir": str(tmp_path / "store"), **extra})
    prepare_store(cfg, progress=False)
    return cfg


def test_stage_epochs_split():
    assert stage_epochs(10, 3) == [4, 3, 3] and sum(stage_epochs(7, 2)) == 7
    with pytest.raises(ConfigError, match="training.epochs"):
        validate_config({"strategy": "retexo", "model": {"layers": 3}, "training": {"epochs": 2}})


def test_bytes_equal_the_analytic_total(tmp_path):
    cfg = job(tmp_path, 6)
    report = LocalJob(cfg, progress=False).run()
    store = ChunkStore(cfg.store_path)
    halo = sum(build_local_graph(store, base_chunks(i, 2, 2), None).num_halo for i in range(2))
    widths = [24, 16]  # stage inputs: the features, then the hidden embeddings
    fetched = sum(sum(h["worker_fetch_bytes"]) for h in report["history"])
    assert fetched == 2 * 4 * halo * sum(widths)  # each byte counted by its sender and receiver
    for h in report["history"]:
        stage = h["stage"]
        m = build_stage_model(cfg, stage, 24, 5)
        message = 4 * (num_params(m) + num_buffer_values(m) + SCALARS)
        ring = [sum(ring_allreduce_bytes(message, 4, 3, r)) for r in (1, 2)]
        assert h["worker_train_bytes"] == ring  # one step: the workers' share of the all-reduce
    assert [h["stage"] for h in report["history"]] == [0, 0, 0, 1, 1, 1]
    assert 0.0 <= report["result"]["test_acc"] <= 1.0
    preds = sorted(Path(cfg.run_dir, "retexo").glob("predictions-worker-*.pt"))
    assert len(preds) == 2  # inference for every node at the end


def test_resume_mid_stage_continues_the_same_stage(tmp_path):
    epochs = 60  # stages of 30: stage 1 is epochs 31..60
    ref = LocalJob(job(tmp_path / "ref", epochs), progress=False).run()
    cfg = job(tmp_path / "cut", epochs, checkpoint={"interval": 1})
    launcher = subprocess.Popen(
        [sys.executable, "-m", "grappa", "train", "--set", "strategy=retexo", "--set", "partitions=2",
         "--set", "dataset.synthetic.numNodes=600", "--set", "dataset.synthetic.numFeatures=24",
         "--set", "model.hidden=16", "--set", "model.layers=2", "--set", f"training.epochs={epochs}",
         "--set", "checkpoint.interval=1", "--set", f"runDir={cfg.run_dir}",
         "--set", f"storeDir={cfg.store_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}/trainer:{REPO}/operator"})
    ckpts = Path(cfg.run_dir) / "checkpoints"

    def in_stage_1() -> bool:
        assert launcher.poll() is None, "finished before it could be interrupted:\n" + launcher.stdout.read()
        return any(int(p.stem.split("-")[1]) >= 33 for p in ckpts.glob("epoch-*.pt"))
    logs = Path(cfg.run_dir) / "logs"
    wait_until(in_stage_1, "stage 1 to start", stall=120, poll=0.01,
               progress=lambda: sorted((f.name, f.stat().st_size) for f in logs.glob("*")))
    pids = json.loads((Path(cfg.run_dir) / "pids.json").read_text())
    launcher.kill()
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.communicate()

    resumed = LocalJob(cfg, progress=False).run()
    lines = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    resume = next(x for x in lines if x.get("event") == "resume")
    assert resume["stage"] == 1 and 33 <= resume["epoch"] < epochs, resume
    after = [x for x in lines[lines.index(resume) + 1:] if "loss" in x]
    assert after[0]["epoch"] == resume["epoch"] + 1 and after[0]["stage"] == 1
    assert [h["epoch"] for h in resumed["history"]] == list(range(1, epochs + 1))
    for a, b in zip(ref["history"], resumed["history"]):  # the interrupted run replays exactly
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["val_acc"] == pytest.approx(b["val_acc"])
    assert resumed["result"]["test_acc"] == pytest.approx(ref["result"]["test_acc"])
    # the resumed stage read its inputs from the rows saved when stage 0 ended
    stage_rows = Path(cfg.run_dir, "retexo", "stage-1-worker-0.pt")
    assert stage_rows.exists()
