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
