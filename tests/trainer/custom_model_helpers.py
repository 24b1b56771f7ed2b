"""What the tests of a user's own model share: the test models' file, a ModelConfig for a factory,
and running `grappa train` or a model file's load in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grappa.config import ModelConfig
from waiting import load_factor

REPO = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "user_models" / "pyg_models.py"
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}"}


def custom(factory: str, code_path=MODELS, **model) -> ModelConfig:
    spec = {"factory": factory, "codePath": str(code_path) if code_path else None, "kwargs": model.pop("kwargs", {}),
            "adjacency": model.pop("adjacency", "edge-index")}
    return ModelConfig.model_validate({"hidden": 16, "dropout": 0.0, **model, "custom": spec})


LOAD = ("import sys; from grappa.models.model_file import load_model; "
        "m = load_model(sys.argv[1], *sys.argv[2:]); print(type(m.model.net).__name__, m.widths)")


def load_in_fresh_process(path: Path, *code_path: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # a hang guard stretched by the machine's load (a warm make test's lanes ran it past 120 s)
    return subprocess.run([sys.executable, "-c", LOAD, str(path), *code_path], env=env or ENV,
                          capture_output=True, text=True, timeout=120 * load_factor())


def train_cli(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """`grappa train` of a small csbm graph at P = 2 for 2 epochs, with the flags given."""
    args = ["train", "--dataset", "csbm", "--set", "dataset.synthetic.numNodes=600", "--partitions", "2",
            "--epochs", "2", "--hidden", "8", "--run-dir", str(tmp_path / "run"), *flags]
    return subprocess.run([sys.executable, "-m", "grappa", *args], env=ENV, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)


def error_line(res: subprocess.CompletedProcess) -> str:
    """The command's one-line error (and no traceback)."""
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("grappa: error:")]
    assert lines and "Traceback" not in res.stderr, res.stderr[-3000:]
    return lines[-1]
