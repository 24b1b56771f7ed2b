"""grappa predict / evaluate: exact, distributed over P workers, resumable, in bounded memory."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from grappa.app.cli import main
from grappa.inference.local_predict import run_local
from grappa.inference.predict_worker import KILL_AFTER_LAYER
from grappa.models.model_file import load_model
from grappa.runtime.local_job import LaunchError

from inference_helpers import (job_for, load_outputs, model_file, reference_layers, run_in_threads,
                               small_store)


@pytest.fixture(scope="module")
def store_cfg(tmp_path_factory):
    return small_store(tmp_path_factory.mktemp("inference"))


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "gin"])
def test_predictions_equal_a_single_process_reference(store_cfg, tmp_path, arch, workers):
    path = model_file(store_cfg, tmp_path / "model.pt", arch, layers=3)
    model = load_model(path).model
    ref = reference_layers(model, store_cfg.store_path)
    # small blocks: several per chunk, so block boundaries and halo reads are exercised
    job = job_for(path, store_cfg.store_path, tmp_path / "out", workers, scores=True, embed_layer=2,
                  embed_dtype="float32", block_edges=300, block_rows=128)
    run_in_threads(job)
    got = load_outputs(tmp_path / "out")
    logits = ref[-1]
    assert got["predictions"].dtype == np.int32 and got["predictions"].shape == (logits.shape[0],)
    np.testing.assert_array_equal(got["predictions"], logits.argmax(1).numpy())
    assert got["scores"].dtype == np.float16
    np.testing.assert_allclose(got["scores"], torch.softmax(logits, 1).numpy(), atol=2e-3)
    np.testing.assert_allclose(got["embeddings"], ref[1].numpy(), rtol=1e-4, atol=1e-5)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["files"]["embeddings"]["shape"] == [logits.shape[0], model.widths[1]]
    assert not (tmp_path / "out" / ".grappa-work").exists()


def test_predict_on_another_graph_with_the_same_feature_width(store_cfg, tmp_path):
    """A model trained on one graph labels another of the same kind (its own store, own size)."""
    other = small_store(tmp_path / "other", num_nodes=450, chunks=3, features=24, seed=7)
    path = model_file(store_cfg, tmp_path / "model.pt", "sage")
    out = tmp_path / "out"
    assert main(["predict", "--model", str(path), "--store", str(other.store_path), "--out", str(out),
                 "--partitions", "3", "--quiet"]) == 0
    ref = reference_layers(load_model(path).model, other.store_path)[-1]
    np.testing.assert_array_equal(np.load(out / "predictions.npy"), ref.argmax(1).numpy())


def test_a_model_on_a_graph_of_another_feature_width_is_refused(store_cfg, tmp_path, capsys):
    other = small_store(tmp_path / "other", num_nodes=300, chunks=2, features=10)
    path = model_file(store_cfg, tmp_path / "model.pt", "gcn")
    code = main(["predict", "--model", str(path), "--store", str(other.store_path), "--out",
                 str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "24 input features" in err and "has 10" in err, err
    assert not (tmp_path / "out").exists()


def test_an_old_model_file_is_refused_with_the_fix(store_cfg, tmp_path, capsys):
    path = model_file(store_cfg, tmp_path / "model.pt", "gcn")
    old = tmp_path / "old.pt"
    torch.save(torch.load(path, weights_only=False)["state_dict"], old)  # what Grappa wrote before
    code = main(["predict", "--model", str(old), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "bare state dict" in err and "python -m grappa.model_file convert" in err, err
    old_ck = tmp_path / "epoch-000001.pt"  # an older checkpoint: parameters, no description
    torch.save({"epoch": 1, "model": torch.load(old, weights_only=False), "optimizer": {}}, old_ck)
    assert main(["predict", "--model", str(old_ck), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "checkpoint from an older Grappa" in capsys.readouterr().err
    # the fix works: the run's config + the old file -> a model file predict accepts
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(json.dumps({"config": json.loads(store_cfg.model_copy(update={
        "model": store_cfg.model.model_copy(update={"hidden": 16, "dropout": 0.0})}).model_dump_json(by_alias=True))}))
    from grappa.models.model_file import main as model_file_main
    assert model_file_main(["convert", str(old), "--config", str(cfg_file), "--out", str(tmp_path / "new.pt")]) == 0
    assert load_model(tmp_path / "new.pt").meta["model"]["arch"] == "gcn"


def test_a_killed_predict_resumes_from_the_completed_layers(store_cfg, tmp_path, monkeypatch):
    path = model_file(store_cfg, tmp_path / "model.pt", "gcn", layers=3)
    whole = job_for(path, store_cfg.store_path, tmp_path / "whole", 2, scores=True, embed_layer=2)
    run_in_threads(whole)
    job = job_for(path, store_cfg.store_path, tmp_path / "out", 2, scores=True, embed_layer=2)
    (tmp_path / "out").mkdir()
    monkeypatch.setenv(KILL_AFTER_LAYER, "2")  # every worker is SIGKILLed once layer 2 is written
    with pytest.raises(LaunchError, match="resume"):
        run_local(job, 600, 3, progress=False)
    assert not list((tmp_path / "out").glob("*.npy")) and not (tmp_path / "out" / "manifest.json").exists()
    monkeypatch.delenv(KILL_AFTER_LAYER)
    manifest = json.loads(run_local(job, 600, 3, progress=False).read_text())
    assert all(w["skipped_layers"] == [1, 2] for w in manifest["per_worker"])
    for name, want in load_outputs(tmp_path / "whole").items():
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), want)


def test_evaluate_equals_the_training_reports_exact_test_accuracy(tmp_path, capsys):
    """Train (exact evaluation: the same layer-wise pass, rows through files), then score
    model.pt with `grappa evaluate` on the training store, with another P."""
    from grappa.config import TrainConfig
    from grappa.data.store.preparation import prepare_store
    from grappa.runtime.local_job import LocalJob
    cfg = TrainConfig.model_validate({
        "partitions": 2, "grappa": {"chunks": 4, "rounds": {"every": 1}},
        "dataset": {"name": "csbm", "synthetic": {"numNodes": 600, "numFeatures": 24}},
        "model": {"hidden": 16, "layers": 3, "arch": "sage"}, "training": {"epochs": 3},
        "checkpoint": {"interval": 1}, "runDir": str(tmp_path / "run"), "storeDir": str(tmp_path / "store")})
    prepare_store(cfg, progress=False)
    report = LocalJob(cfg, progress=False).run()
    # the aggregator routes no rows: one element per worker per hidden layer, then the stats (it
    # assembled a num_nodes x width tensor per layer before, ~77 kB per evaluation here)
    assert all(h["eval_bytes"] < 1024 for h in report["history"]), [h["eval_bytes"] for h in report["history"]]
    meta = load_model(tmp_path / "run" / "model.pt").meta
    assert meta["model"]["arch"] == "sage" and meta["widths"] == [16, 16, 5] and meta["strategy"] == "grappa"
    assert not (tmp_path / "run" / "eval-layers").exists()  # the row files go when training ends
    ck = load_model(tmp_path / "run" / "checkpoints" / "epoch-000003.pt")  # checkpoints describe it too
    assert ck.meta["widths"] == meta["widths"] and ck.meta["store"]["fingerprint"] == meta["store"]["fingerprint"]
    assert main(["evaluate", "--model", str(tmp_path / "run" / "model.pt"), "--partitions", "3", "--quiet"]) == 0
    ev = json.loads((tmp_path / "run" / "evaluation" / "evaluation.json").read_text())
    assert ev["test"]["acc"] == pytest.approx(report["result"]["test_acc"], abs=1e-9)
    best = next(h for h in report["history"] if h["epoch"] == report["result"]["best_epoch"])
    assert ev["val"]["acc"] == pytest.approx(best["val_acc"], abs=1e-9)
    assert ev["test"]["loss"] == pytest.approx(best["test_loss"], rel=1e-4)
    assert "accuracy: train" in capsys.readouterr().out


def test_worker_peak_memory_stays_flat_on_a_16x_larger_graph(tmp_path):
    """Peak anonymous memory of each worker process (its own allocations: the memory-mapped
    store and row files are page cache, counted once per machine) on a graph and on one 16x
    larger, at the same P. The control run computes each chunk in one block, as a design holding
    a worker's share (or the whole graph) would: its growth shows the measurement sees what the
    bounded blocks avoid."""
    def peak(nodes: int, name: str, edges_per_block: int) -> int:
        cfg = small_store(tmp_path / f"g{nodes}", num_nodes=nodes, chunks=2, features=512, avg_degree=8.0)
        path = model_file(cfg, tmp_path / f"{name}.pt", "sage", layers=2, hidden=128)
        job = job_for(path, cfg.store_path, tmp_path / name, 2, embed_layer=1, embed_dtype="float32",
                      block_edges=edges_per_block, block_rows=2048)
        (tmp_path / name).mkdir()
        manifest = json.loads(run_local(job, nodes, 2, progress=False, threads=1).read_text())
        return max(w["peak_anon_bytes"] for w in manifest["per_worker"])

    mib = 1 << 20
    small, large = peak(2000, "small", 4096), peak(32000, "large", 4096)
    control = peak(32000, "control", 1 << 30)
    assert large - small < 24 * mib, (small / mib, large / mib)
    assert control - small > 48 * mib, (small / mib, control / mib)


def test_readme_predict_example_runs_as_written(tmp_path):
    """README "Using the trained model": train, predict, evaluate, load with numpy, as written."""
    import subprocess
    import sys
    from pathlib import Path

    from test_examples import readme_block
    repo = Path(__file__).resolve().parents[2]
    script = readme_block("predict").replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "classes of nodes 0-9: [" in res.stdout and "embeddings: (1000, 32)" in res.stdout, res.stdout
    report = json.loads((tmp_path / "runs" / "model-demo" / "report.json").read_text())
    assert f"test accuracy: {report['result']['test_acc']}" in res.stdout


def test_grappa_single_writes_a_self_describing_model_file(tmp_path):
    from grappa.config import TrainConfig
    from grappa.data.datasets import load_dataset
    from grappa.runtime.single_process import train_single
    cfg = TrainConfig.model_validate({
        "dataset": {"name": "csbm", "synthetic": {"numNodes": 300, "numFeatures": 12}},
        "model": {"hidden": 8, "arch": "gat", "heads": 2}, "training": {"epochs": 2},
        "runDir": str(tmp_path / "run")})
    data = load_dataset(cfg.dataset)
    train_single(cfg, data)
    loaded = load_model(tmp_path / "run" / "model.pt")
    assert loaded.meta["strategy"] == "single" and loaded.meta["store"] is None
    assert (loaded.meta["model"]["arch"], loaded.num_features, loaded.num_classes) == ("gat", 12, 5)
    assert loaded.widths == [8, 5]


def test_predict_job_pods_coordinator_and_workers(store_cfg, tmp_path):
    """What a GrappaJob with spec.predict runs: the aggregator pod coordinates and the worker
    pods (started first here, as Kubernetes may) compute; outputs under <runDir>/predictions."""
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    path = model_file(store_cfg, tmp_path / "model.pt", "gat", layers=2)
    run_dir = tmp_path / "run"
    cfg = store_cfg.model_copy(update={"partitions": 2, "run_dir": str(run_dir)})
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}", "GRAPPA_CONFIG": cfg.model_dump_json(),
           "GRAPPA_PREDICT": json.dumps({"model": str(path), "scores": False, "embeddings": 1,
                                         "embeddingDtype": "float32", "evaluate": True, "out": "predictions"})}
    env.pop("GRAPPA_JOB_NAME", None)
    cmd = [sys.executable, "-m", "grappa.inference.pod"]
    workers = [subprocess.Popen(cmd + ["worker"], env={**env, "RANK": str(r)}) for r in (1, 2)]
    coordinator = subprocess.run(cmd + ["aggregator"], env={**env, "RANK": "0"}, timeout=300)
    assert coordinator.returncode == 0
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    out = run_dir / "predictions"
    ref = reference_layers(load_model(path).model, store_cfg.store_path)
    np.testing.assert_array_equal(np.load(out / "predictions.npy"), ref[-1].argmax(1).numpy())
    np.testing.assert_allclose(np.load(out / "embeddings.npy"), ref[0].numpy(), rtol=1e-4, atol=1e-5)
    assert json.loads((out / "evaluation.json").read_text())["test"]["nodes"] > 0
    # the coordinator pod's own memory beside the workers' (in a pod its cgroup is the container's)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["coordinator"]["peak_rss_bytes"] > 0 and "cgroup_peak_bytes" in manifest["coordinator"]
    assert all("cgroup_working_set_peak_bytes" in w for w in manifest["per_worker"])
    # a bad model file fails the coordinator with the configuration exit code (the job Fails)
    torch.save({"w": torch.zeros(1)}, tmp_path / "old.pt")
    bad = {**env, "GRAPPA_PREDICT": json.dumps({"model": str(tmp_path / "old.pt"), "out": "p2"}), "RANK": "0"}
    res = subprocess.run(cmd + ["aggregator"], env=bad, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "bare state dict" in res.stderr, res.stderr


def test_a_block_gather_maps_one_chunks_rows_at_a_time(tmp_path):
    """A block's in-neighbours lie in every chunk; their row files are handed back chunk by chunk
    (layer_pass.gather), else a worker maps most of a layer at once (9.6 GB of RSS at RMAT-24).
    The rows gathered are still the source's."""
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.models.layerwise import StoreGraph, gather

    class Tracked:
        def __init__(self, inner):
            self.inner, self.mapped, self.most = inner, set(), 0

        def rows(self, k):
            self.mapped.add(k)
            self.most = max(self.most, len(self.mapped))
            return self.inner.rows(k)

        def release(self):
            self.mapped.clear()
            self.inner.release()

    cfg = small_store(tmp_path, num_nodes=600, chunks=4, features=8)
    g = StoreGraph(ChunkStore(cfg.store_path))
    ids = np.arange(0, 600, 3, dtype=np.int64)
    out, deg = np.empty((ids.size, 8), dtype=np.float32), np.empty(ids.size, dtype=np.int64)
    source = Tracked(g)
    gather(g, source, ids, out, deg)
    assert len(set(g.assign.chunk_of(ids).tolist())) == 4 and source.most == 1
    for i, v in enumerate(ids[:20]):
        c = int(g.assign.chunk_of(np.array([v]))[0])
        row = int(np.searchsorted(g.array(c, "nodes.npy"), v))
        assert np.array_equal(out[i], np.asarray(g.rows(c)[row], dtype=np.float32))
