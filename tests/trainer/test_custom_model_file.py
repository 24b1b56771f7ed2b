"""A user's model in its files: the self-describing model file, loaded where its code is and
refused where it is not (or where it changed); checkpoints, resume and the report as a built-in
gets them; an installed package identified by its version."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from custom_model_helpers import ENV, LOAD, MODELS, REPO, custom, error_line, load_in_fresh_process, train_cli
from grappa.data.store.chunk_store import ChunkStore
from grappa.models.build import build_model
from grappa.models.model_file import describe, load_model, save_model
from inference_helpers import small_store
from waiting import load_factor


def test_model_file_loads_in_a_fresh_process_from_its_code_path_and_not_without_it(tmp_path):
    code = tmp_path / "code" / "my_gnn.py"
    code.parent.mkdir()
    code.write_text(MODELS.read_text())
    cfg = small_store(tmp_path, num_nodes=300, chunks=2, features=8)
    cfg = cfg.model_copy(update={"model": custom("my_gnn:make_stack", code_path=code, kwargs={"conv": "sage"})})
    man = ChunkStore(cfg.store_path).manifest
    torch.manual_seed(0)
    model = build_model(cfg.model, man["num_features"], man["num_classes"])
    path = save_model(tmp_path / "model.pt", describe(cfg, man["num_features"], man["num_classes"],
                                                      model.widths, man, code=model.code), model.state_dict())
    meta = torch.load(path, weights_only=False)
    assert meta["model"]["custom"] == {"factory": "my_gnn:make_stack", "kwargs": {"conv": "sage"},
                                       "adjacency": "edge-index", "fastDropout": False, "codePath": str(code)}
    assert meta["code"]["module"] == "my_gnn" and len(meta["code"]["sha256"]) == 64
    # the user's class takes the state dict as it is (no prefix)
    assert set(meta["state_dict"]) == set(model.net.state_dict())

    ok = load_in_fresh_process(path)
    assert ok.returncode == 0 and "Stack [16, " in ok.stdout, ok.stderr

    moved = tmp_path / "elsewhere" / "my_gnn.py"
    moved.parent.mkdir()
    code.rename(moved)
    # One more fresh process (each costs seconds of imports): without the code, then with
    # --code-path, then with that file changed; the first attempt imports nothing of my_gnn.
    after = subprocess.run([sys.executable, "-c", AFTER_MOVE, str(path), str(moved)], env=ENV,
                           capture_output=True, text=True, timeout=120 * load_factor())
    assert after.returncode == 0, after.stderr[-3000:]
    gone, found, changed = after.stdout.strip().splitlines()[-3:]
    assert gone.startswith("refused ModelCodeError") and "module my_gnn" in gone, gone
    assert str(code) in gone and "--code-path" in gone, gone
    assert found == "loaded Stack", found  # --code-path: where it is now
    assert changed.startswith("refused ModelCodeError") and "differs (sha256" in changed, changed
    assert "put the original code back" in changed, changed


AFTER_MOVE = """
import sys
from pathlib import Path
from grappa.models.model_file import load_model
model, moved = sys.argv[1], Path(sys.argv[2])
def attempt(*code_path):
    try:
        print("loaded", type(load_model(model, *code_path).model.net).__name__)
    except Exception as err:
        print("refused", type(err).__name__, str(err).replace(chr(10), " "))
attempt()
attempt(str(moved))
moved.write_text(moved.read_text() + "\\n# changed after training\\n")
attempt(str(moved))
"""


# ---- everything a built-in gets: checkpoints, resume, the replica check, report --------------------

@pytest.mark.slow
def test_a_custom_model_checkpoints_resumes_and_refuses_changed_code(tmp_path):
    code = tmp_path / "gnn.py"
    code.write_text(MODELS.read_text())
    flags = ("--factory", "gnn:make_stack", "--code-path", str(code), "--mode", "mini-batch",
             "--batch-size", "64", "--checkpoint-interval", "1")
    first = train_cli(tmp_path, *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "run"
    assert (run / "model.pt").is_file() and sorted(p.name for p in (run / "checkpoints").iterdir())
    code.write_text(code.read_text() + "\n# edited\n")
    edited = subprocess.run([sys.executable, "-m", "grappa", "train", "--dataset", "csbm", "--set",
                             "dataset.synthetic.numNodes=600", "--partitions", "2", "--epochs", "3", "--hidden",
                             "8", "--run-dir", str(run), *flags], env=ENV, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    line = error_line(edited)
    assert edited.returncode == 3 and "checkpoint" in line and "differs (sha256" in line, line
    code.write_text(MODELS.read_text())
    resumed = subprocess.run(edited.args, env=ENV, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if "event" not in e] == [1, 2, 3]
    assert any(e.get("event") == "resume" and e["epoch"] == 2 for e in events)
    report = json.loads((run / "report.json").read_text())
    assert report["config"]["model"]["custom"]["factory"] == "gnn:make_stack"
    loaded = load_model(run / "model.pt")
    assert type(loaded.model.net).__name__ == "Stack"


def test_an_installed_package_is_identified_by_its_version(tmp_path):
    """A factory from an installed package (examples/byom, as the Dockerfile installs it) records
    the distribution's version; a model file is refused where another version is installed."""
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run([*pip, str(site), str(REPO / "examples" / "byom")], check=True, capture_output=True, timeout=300)
    env = {**ENV, "PYTHONPATH": f"{site}:{ENV['PYTHONPATH']}"}
    cfg = small_store(tmp_path, num_nodes=300, chunks=2, features=8)
    save = ("import sys, json, torch\n"
            "from grappa.config import TrainConfig\n"
            "from grappa.data.store.chunk_store import ChunkStore\n"
            "from grappa.models.build import build_model\n"
            "from grappa.models.model_file import describe, save_model\n"
            "cfg = TrainConfig.model_validate_json(sys.argv[1])\n"
            "man = ChunkStore(cfg.store_path).manifest\n"
            "m = build_model(cfg.model, man['num_features'], man['num_classes'])\n"
            "save_model(sys.argv[2], describe(cfg, man['num_features'], man['num_classes'], m.widths, man, code=m.code),"
            " m.state_dict())\n"
            "print(json.dumps(m.code))\n")
    cfg = cfg.model_copy(update={"model": custom("my_models:transformer", code_path=None)})
    made = subprocess.run([sys.executable, "-c", save, cfg.model_dump_json(), str(tmp_path / "model.pt")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    code = json.loads(made.stdout.strip().splitlines()[-1])
    assert (code["module"], code["distribution"], code["version"]) == ("my_models", "my-models", "1.0.0")
    ok = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path / "model.pt")], env=env, capture_output=True,
                        text=True, timeout=300)
    assert ok.returncode == 0 and "Transformer" in ok.stdout, ok.stderr[-2000:]
    dist_info = next(site.glob("my_models-1.0.0.dist-info"))
    meta = dist_info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0.0", "Version: 1.1.0"))
    dist_info.rename(site / "my_models-1.1.0.dist-info")
    other = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path / "model.pt")], env=env, capture_output=True,
                           text=True, timeout=300)
    msg = other.stderr.strip().splitlines()[-1]
    assert other.returncode != 0 and "my-models 1.0.0" in msg and "install my-models==1.0.0" in msg, msg
