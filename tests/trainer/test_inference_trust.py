"""`grappa predict` / `grappa evaluate` never use the wrong graph, never write over a file that is
not theirs, rerun like `grappa train`, and need only what inference needs (issue 35).

The models here are model files of a prepared store (inference_helpers.model_file), written as
training writes them: what the commands check does not depend on how well the model learnt.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.app.cli import main
from grappa.config import TrainConfig
from grappa.data.store.preparation import prepare_store
from grappa.models.model_file import load_model

from inference_helpers import model_file, reference_layers, small_store
from test_cli_data import write_graph


REPO = Path(__file__).resolve().parents[2]


def chdir(monkeypatch, folder: Path) -> None:
    """Work from `folder`, the worker processes still finding grappa."""
    monkeypatch.setenv("PYTHONPATH", f"{REPO / 'trainer'}:{REPO / 'operator'}")
    monkeypatch.chdir(folder)


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("grappa: error:")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def arrays_cfg(graph: Path, run: Path, **over) -> TrainConfig:
    return TrainConfig.model_validate({
        "partitions": 2, "dataset": {"name": "arrays", "path": str(graph), **over},
        "runDir": str(run), "storeDir": str(run / "store")})


@pytest.fixture
def run(tmp_path):
    """A run directory as training leaves it: its store inside, model.pt next to it."""
    cfg = small_store(tmp_path / "train", num_nodes=400, chunks=2, features=12)
    run = Path(cfg.store_path).parent / "run"
    run.mkdir(parents=True)
    shutil.move(str(cfg.store_path), run / "store")
    cfg = cfg.model_copy(update={"run_dir": str(run), "store_dir": str(run / "store")})
    model_file(cfg, run / "model.pt", "sage")
    return run


def predictions_of(model: Path, store: Path) -> np.ndarray:
    return reference_layers(load_model(model).model, store)[-1].argmax(1).numpy()


# -- which graph -------------------------------------------------------------------------------

def test_a_copied_run_finds_its_store_next_to_the_model_from_any_folder(run, tmp_path, monkeypatch):
    """model.pt names its store relative to itself: a run directory copied elsewhere and used
    from another working directory still predicts on its own store (it was 'gone' before)."""
    clone = tmp_path / "clone" / "runs" / "g"
    shutil.copytree(run, clone)
    shutil.rmtree(run)  # the original is gone: the copy must use its own store
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chdir(monkeypatch, elsewhere)
    model = Path("..") / "clone" / "runs" / "g" / "model.pt"
    assert main(["predict", "--model", str(model), "--partitions", "2", "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(clone / "predictions" / "predictions.npy"),
                                  predictions_of(clone / "model.pt", clone / "store"))


def test_a_store_of_another_graph_where_the_model_looks_is_refused(run, tmp_path, capsys):
    """The training store replaced by another graph's at the same place (another run's, or one
    prepared again): refused, naming both fingerprints and the fix, not scored silently."""
    other = small_store(tmp_path / "other", num_nodes=500, chunks=2, features=12, seed=3)
    shutil.rmtree(run / "store")
    shutil.copytree(other.store_path, run / "store")
    assert main(["evaluate", "--model", str(run / "model.pt"), "--partitions", "2", "--quiet"]) == 3
    line = one_error_line(capsys.readouterr().err)
    assert "another graph now" in line and f"--store {run / 'store'}" in line, line
    assert not (run / "evaluation").exists()
    # named explicitly it is used, and said so
    assert main(["evaluate", "--model", str(run / "model.pt"), "--store", str(run / "store"),
                 "--partitions", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "not the graph the model was trained on" in err, err
    manifest = json.loads((run / "evaluation" / "manifest.json").read_text())
    assert manifest["dataset"]["training_graph"] is False


def test_an_older_model_file_finds_its_store_by_fingerprint_from_another_folder(run, tmp_path, monkeypatch):
    """Model files from before named the store relative to the training's working directory
    (runs/g/store): tried there and under the model's folders, accepted by fingerprint only."""
    from grappa.models.model_file import save_model  # noqa: F401 (the format below is what it wrote)
    project = tmp_path / "project"
    shutil.copytree(run, project / "runs" / "g")
    record = torch.load(project / "runs" / "g" / "model.pt", weights_only=False)
    record["store"] = {k: v for k, v in record["store"].items() if k in ("fingerprint", "num_nodes", "num_chunks")}
    record["store"]["path"] = "runs/g/store"
    torch.save(record, project / "runs" / "g" / "model.pt")
    decoy = tmp_path / "cwd"  # the working directory holds another runs/g/store
    other = small_store(tmp_path / "o", num_nodes=300, chunks=2, features=12, seed=5)
    shutil.copytree(other.store_path, decoy / "runs" / "g" / "store")
    chdir(monkeypatch, decoy)
    model = project / "runs" / "g" / "model.pt"
    assert main(["predict", "--model", str(model), "--partitions", "2", "--quiet"]) == 0
    got = np.load(project / "runs" / "g" / "predictions" / "predictions.npy")
    assert got.shape == (400,)
    np.testing.assert_array_equal(got, predictions_of(model, project / "runs" / "g" / "store"))


def test_a_store_whose_files_changed_or_that_was_prepared_again_is_refused(tmp_path, capsys):
    """After the arrays change, predict refuses the stale store as train does; after
    `--reprepare`, the store's fingerprint is not the model's: refused too. Named explicitly,
    either is used, and said so."""
    graph = tmp_path / "graph"
    write_graph(graph, features=8)
    cfg = arrays_cfg(graph, tmp_path / "run")
    prepare_store(cfg, progress=False)
    model = model_file(cfg, tmp_path / "run" / "model.pt", "gcn")
    x = np.load(graph / "features.npy")
    x[7] += 1.0
    np.save(graph / "features.npy", x)
    assert main(["predict", "--model", str(model), "--partitions", "2", "--quiet"]) == 3
    line = one_error_line(capsys.readouterr().err)
    assert "features.npy changed content" in line and f"dataset.path={graph}" in line, line
    assert not (tmp_path / "run" / "predictions").exists()
    assert main(["prepare", "--dataset", "arrays", "--set", f"dataset.path={graph}", "--partitions", "2",
                 "--run-dir", str(tmp_path / "run"), "--reprepare"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--partitions", "2", "--quiet"]) == 3
    assert "another graph now" in one_error_line(capsys.readouterr().err)
    assert main(["predict", "--model", str(model), "--store", str(tmp_path / "run" / "store"),
                 "--partitions", "2", "--quiet"]) == 0
    assert "not the graph the model was trained on" in capsys.readouterr().err


# -- where the outputs go ----------------------------------------------------------------------

def test_evaluate_into_a_store_or_a_predictions_folder_is_refused_and_writes_nothing(run, capsys):
    store = run / "store"
    before = (store / "manifest.json").read_bytes()
    assert main(["evaluate", "--model", str(run / "model.pt"), "--store", str(store), "--out", str(store),
                 "--quiet"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "not predict/evaluate outputs" in line and "chunk-0" in line, line
    assert (store / "manifest.json").read_bytes() == before  # the store is as it was: usable
    assert main(["predict", "--model", str(run / "model.pt"), "--partitions", "2", "--quiet"]) == 0
    predictions = run / "predictions" / "manifest.json"
    kept = predictions.read_bytes()
    assert json.loads(kept)["files"]
    assert main(["evaluate", "--model", str(run / "model.pt"), "--out", str(run / "predictions"), "--quiet"]) == 2
    assert "outputs of `grappa predict`" in one_error_line(capsys.readouterr().err)
    assert predictions.read_bytes() == kept


def test_an_unwritable_out_is_one_line_with_the_cannot_run_code(run, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["predict", "--model", str(run / "model.pt"), "--out", str(blocker / "out"), "--quiet"]) == 3
    line = one_error_line(capsys.readouterr().err)
    assert f"--out {blocker / 'out'}: cannot write there ({blocker} is a file)" in line, line


def test_a_rerun_of_a_finished_predict_says_so_another_job_is_refused_or_started_over(run, capsys):
    argv = ["predict", "--model", str(run / "model.pt"), "--partitions", "2", "--quiet"]
    assert main(argv) == 0
    out = run / "predictions"
    first = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    capsys.readouterr()
    assert main(argv + ["--partitions", "1"]) == 0  # the same outputs, asked with another P
    captured = capsys.readouterr()
    assert "finished outputs" in captured.err and "nothing to do" in captured.err, captured.err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == first  # nothing rewritten
    assert main(argv + ["--scores"]) == 2
    line = capsys.readouterr().err
    assert "scores: false then, true now" in line and "--start-over" in line, line
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == first
    assert main(argv + ["--scores", "--start-over"]) == 0
    assert (out / "scores.npy").is_file()
    assert json.loads((out / "manifest.json").read_text())["job"]["scores"] is True


# -- inference needs only what inference needs -------------------------------------------------

def test_predict_on_an_unlabelled_graph_needs_edges_and_features_only(tmp_path, capsys):
    graph = tmp_path / "graph"
    write_graph(graph, features=8)
    cfg = arrays_cfg(graph, tmp_path / "run")
    prepare_store(cfg, progress=False)
    model = model_file(cfg, tmp_path / "run" / "model.pt", "gcn")
    new = tmp_path / "new"
    write_graph(new, n=300, edges=1200, features=8)
    for name in ("labels.npy", "train.npy", "val.npy", "test.npy"):
        (new / name).unlink()
    out = tmp_path / "new-predictions"
    argv = ["predict", "--model", str(model), "--dataset", "arrays", "--set", f"dataset.path={new}",
            "--partitions", "2", "--out", str(out), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    assert np.load(out / "predictions.npy").shape == (300,)
    assert "not the graph the model was trained on" in capsys.readouterr().err
    # scoring needs labels and splits, and says so
    assert main(["evaluate", *argv[1:-3], "--out", str(tmp_path / "ev"), "--quiet"]) == 3
    line = one_error_line(capsys.readouterr().err)
    assert "labels" in line and ("split" in line or "train" in line), line


def test_a_graph_of_the_wrong_width_is_refused_before_it_is_prepared(run, tmp_path, capsys):
    graph = tmp_path / "wide"
    write_graph(graph, features=5)
    out = tmp_path / "p"
    assert main(["predict", "--model", str(run / "model.pt"), "--dataset", "arrays", "--set",
                 f"dataset.path={graph}", "--out", str(out), "--quiet"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "takes 12 input features" in line and "has 5" in line, line
    assert not out.exists() and not (tmp_path / "p-store").exists()  # nothing prepared, nothing left


def test_where_a_dataset_is_without_which_one_is_refused(run, tmp_path, capsys):
    """`--data-root D` alone prepared the default synthetic graph (and failed on its width)."""
    assert main(["predict", "--model", str(run / "model.pt"), "--data-root", str(tmp_path), "--quiet"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--data-root says where a dataset is" in line and "--dataset NAME" in line, line
    assert not (run / "predictions").exists() and not (run / "predictions-store").exists()


def test_predict_help_lists_the_graph_flags_not_trainings():
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = buf.getvalue()
    for flag in ("--dataset", "--data-root", "--store", "--partitions", "--config", "--set", "--start-over"):
        assert flag in text, flag
    for flag in ("--epochs", "--lr", "--arch", "--hidden", "--shrinkage", "--run-dir", "--fanouts", "--metrics-port"):
        assert flag not in text, flag


# -- progress ----------------------------------------------------------------------------------

def test_progress_in_a_log_is_lines_that_reach_100_and_a_resume_starts_where_it_was(run, tmp_path, capsys,
                                                                                monkeypatch):
    from grappa.inference.local_predict import run_local
    from grappa.inference.predict_worker import KILL_AFTER_LAYER
    from grappa.runtime.local_job import LaunchError

    from inference_helpers import job_for
    model = model_file(TrainConfig.model_validate({"storeDir": str(run / "store"), "runDir": str(run)}),
                       tmp_path / "deep.pt", "gcn", layers=3)
    job = job_for(model, run / "store", tmp_path / "out", 2)
    (tmp_path / "out").mkdir()
    monkeypatch.setenv(KILL_AFTER_LAYER, "2")
    with pytest.raises(LaunchError):
        run_local(job, 400, 3, progress=True)
    monkeypatch.delenv(KILL_AFTER_LAYER)
    capsys.readouterr()
    run_local(job, 400, 3, progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("predict: ")]
    assert lines[0].startswith("predict: 800/1,200 rows (67%)"), lines  # two of three layers done
    assert lines[-1].startswith("predict: 1,200/1,200 rows (100%)"), lines
    assert "resuming" in err


def test_readme_predict_on_a_new_graph_runs_as_written(tmp_path):
    """README "Using the trained model": train on a labelled graph, predict on a new, unlabelled
    one (edges and features only), as written (the /tmp folders in a scratch folder). The new
    graph's hidden communities are write_graph's own: the predictions recover them."""
    import subprocess
    import sys

    from test_examples import readme_block
    script = readme_block("predict-new-graph").replace("/tmp/", f"{tmp_path}/")
    script = script.replace("examples/", f"{REPO}/examples/").replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "nodes per class: [" in res.stdout, res.stdout
    assert sorted(p.name for p in (tmp_path / "newgraph").iterdir()) == ["edges.npy", "features.npy"]
    predicted = np.load(tmp_path / "runs" / "newgraph-predictions" / "predictions.npy")
    truth = np.random.default_rng(1).integers(0, 4, 5000)  # write_graph --seed 1's communities
    assert predicted.shape == (5000,) and (predicted == truth).mean() > 0.9


def test_convert_never_replaces_a_file_and_says_so_in_one_line(run, tmp_path):
    """`python -m grappa.model_file convert` wrote over an existing --out (and its default,
    OLD.v1.pt) without a word; an unwritable folder was a traceback."""
    import subprocess
    import sys
    old = tmp_path / "old.pt"
    torch.save(torch.load(run / "model.pt", weights_only=False)["state_dict"], old)
    taken = tmp_path / "taken.pt"
    taken.write_bytes(b"someone's file")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}"}
    cmd = [sys.executable, "-m", "grappa.model_file", "convert", str(old), "--config", str(tmp_path / "c.json")]
    res = subprocess.run(cmd + ["--out", str(taken)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 2 and res.stderr.startswith("grappa: error: --out "), res.stderr
    assert "exists" in res.stderr and taken.read_bytes() == b"someone's file"
    res = subprocess.run(cmd + ["--out", str(taken / "x.pt")], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 3 and "cannot write there" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_predict_jobs_prepare_pod_needs_edges_and_features_only(tmp_path):
    """A GrappaJob with spec.predict runs `grappa prepare` with $GRAPPA_PREDICT set: its graph is
    prepared for inference (an unlabelled one too), and one of the wrong width is refused before
    it is written."""
    import subprocess
    import sys
    graph = tmp_path / "graph"
    write_graph(graph, features=8)
    cfg = arrays_cfg(graph, tmp_path / "train")
    prepare_store(cfg, progress=False)
    model = model_file(cfg, tmp_path / "model.pt", "gcn")
    new = tmp_path / "new"
    write_graph(new, n=300, edges=1200, features=8)
    for name in ("labels.npy", "train.npy", "val.npy", "test.npy"):
        (new / name).unlink()

    def prepare(folder: Path, run: Path) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}",
               "GRAPPA_CONFIG": arrays_cfg(folder, run).model_dump_json(by_alias=True),
               "GRAPPA_PREDICT": json.dumps({"model": str(model), "out": "predictions"})}
        env.pop("GRAPPA_JOB_NAME", None)
        return subprocess.run([sys.executable, "-m", "grappa", "prepare"], capture_output=True, text=True,
                              env=env, timeout=300)
    res = prepare(new, tmp_path / "run")
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "run" / "store" / "manifest.json").read_text())["num_nodes"] == 300
    wide = tmp_path / "wide"
    write_graph(wide, features=5)
    res = prepare(wide, tmp_path / "run2")
    assert res.returncode == 2 and "takes 8 input features" in res.stderr, res.stderr
    assert not (tmp_path / "run2" / "store").exists()


def test_unfinished_work_resumes_with_another_worker_count(run, tmp_path, monkeypatch):
    """The same outputs asked with another P (or block size) keep the completed layers' row
    files, which depend on the model and the graph alone (they were thrown away before)."""
    from grappa.inference.local_predict import run_local
    from grappa.inference.predict_worker import KILL_AFTER_LAYER
    from grappa.runtime.local_job import LaunchError

    from inference_helpers import job_for, load_outputs
    model = model_file(TrainConfig.model_validate({"storeDir": str(run / "store"), "runDir": str(run)}),
                       tmp_path / "deep.pt", "gcn", layers=3)
    (tmp_path / "out").mkdir()
    monkeypatch.setenv(KILL_AFTER_LAYER, "2")
    with pytest.raises(LaunchError):
        run_local(job_for(model, run / "store", tmp_path / "out", 2, scores=True), 400, 3, progress=False)
    monkeypatch.delenv(KILL_AFTER_LAYER)
    manifest = json.loads(run_local(job_for(model, run / "store", tmp_path / "out", 1, scores=True,
                                            block_edges=500), 400, 3, progress=False).read_text())
    assert manifest["per_worker"][0]["skipped_layers"] == [1, 2]
    ref = reference_layers(load_model(model).model, run / "store")[-1]
    got = load_outputs(tmp_path / "out")
    np.testing.assert_array_equal(got["predictions"], ref.argmax(1).numpy())
    np.testing.assert_allclose(got["scores"], torch.softmax(ref, 1).numpy(), atol=2e-3)
