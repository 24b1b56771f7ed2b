"""Every example config in the repository validates (the docs point users at them)."""
from pathlib import Path

import pytest

from grappa.config import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_config_validates(path):
    cfg = load_config(str(path))
    assert cfg.partitions >= 1


def test_there_are_examples():
    assert len(EXAMPLES) >= 2


def readme_block(marker: str) -> str:
    """The shell block right after `<!-- readme-example: marker -->` in README.md."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    after = text.split(f"<!-- readme-example: {marker} -->", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def test_readme_arrays_example_runs_as_written(tmp_path):
    """The README's own-graph commands, run as written (in a scratch folder)."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    script = readme_block("arrays").replace("/tmp/mygraph", str(tmp_path / "mygraph"))
    script = script.replace("examples/", f"{repo}/examples/").replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (tmp_path / "runs" / "mygraph" / "report.json")
    assert report.is_file() and "final test accuracy" in res.stdout


def readme_commands() -> list[str]:
    """Every `python -m grappa ...` command of the README's shell blocks, continuations joined."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    out = []
    for block in text.split("```sh\n")[1:]:
        body = block.split("```", 1)[0].replace("\\\n", " ")
        out += [line.split("#", 1)[0].strip() for line in body.splitlines()
                if line.startswith("python -m grappa ")]
    return out


def test_every_readme_command_parses_and_trains_runs_in_their_own_run_dirs(monkeypatch):
    """All of them, with the flags on top of the files, as the CLI reads them (a dry run: some
    need hours or a download); no two `train` commands share a run directory."""
    import shlex

    from grappa.app.cli import build_parser, config_from_args
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # examples/ paths as written
    commands = readme_commands()
    assert len(commands) >= 8
    run_dirs = {}
    for cmd in commands:
        args = build_parser().parse_args(shlex.split(cmd)[3:])
        cfg = config_from_args(args)
        if args.command == "train":
            assert cfg.run_dir not in run_dirs, f"{cmd!r} and {run_dirs[cfg.run_dir]!r} share {cfg.run_dir}"
            run_dirs[cfg.run_dir] = cmd


def test_readme_local_examples_run_as_written(tmp_path, data_root):
    """The README's "Training locally" commands, run in a scratch folder one after the other, with
    `--epochs 2` (added, or in place of 100) so they take seconds; Cora comes from the offline
    copy in $GRAPPA_DATA_ROOT (so `--download` has nothing to fetch)."""
    import os
    import re
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    lines = []
    for line in readme_block("local").splitlines():
        if line.startswith("python -m grappa "):
            line = re.sub(r"--epochs \d+", "--epochs 2", line)
            line += "" if "--epochs" in line else " --epochs 2"
        lines.append(line)
    script = "\n".join(lines).replace("examples/", f"{repo}/examples/").replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "\r" not in res.stderr  # not a terminal: progress as lines
    reports = sorted(p.parent.name for p in (tmp_path / "runs").glob("*/report.json"))
    assert reports == ["cora", "cora-shrink09", "cora-single"]
    assert res.stdout.count("final test accuracy") == 3


def test_readme_byom_example_runs_as_written(tmp_path, data_root):
    """The README's "Bring your own model" block as written: a GATv2 model from a file trained
    (full-graph, P = 2), predicted on, then trained and evaluated from Python (mini-batch); Cora
    from the offline copy, `--epochs 20` cut to 3 and the Python run's 20 likewise."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    script = readme_block("byom").replace("--epochs 20", "--epochs 3").replace("epochs=20", "epochs=3")
    script = script.replace("examples/", f"{repo}/examples/").replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((tmp_path / "runs" / "cora-gatv2" / "report.json").read_text())
    assert report["config"]["model"]["custom"]["factory"] == "gatv2:make_model"
    evaluation = json.loads((tmp_path / "runs" / "cora-gatv2" / "predictions" / "evaluation.json").read_text())
    assert evaluation["test"]["acc"] == report["result"]["test_acc"]  # exact inference, both
    assert "test accuracy" in res.stdout and "model GATv2" in res.stdout, res.stdout
    mb = json.loads((tmp_path / "runs" / "cora-gatv2-mb" / "report.json").read_text())
    assert mb["config"]["training"]["mode"] == "mini-batch" and mb["result"]["test_acc"] > 0.3


def test_readme_link_example_runs_as_written(tmp_path):
    """The README's link-prediction example (train, then predict pair scores and top-k), as
    written in a scratch folder, with 2 epochs instead of 10 on 500 nodes instead of 1000 (seconds)."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    script = readme_block("link").replace("--epochs 10", "--epochs 2").replace("numNodes=1000", "numNodes=500")
    script = script.replace("python ", f"{sys.executable} ")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'trainer'}:{repo / 'operator'}"}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "final test MRR" in res.stdout and "best 5 candidates of nodes 0 and 7" in res.stdout
    out = tmp_path / "runs" / "link-demo-predictions"
    ev = json.loads((out / "evaluation.json").read_text())
    assert 0 < ev["test"]["mrr"] <= 1
    import numpy as np
    assert np.load(out / "pair_scores.npy").shape == (3,) and np.load(out / "topk.npy").shape == (2, 5)
