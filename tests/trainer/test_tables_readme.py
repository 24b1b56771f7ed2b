"""README "Your own graph from tables": the block runs as written (pandas writes the Parquet pair,
grappa trains and predicts, pandas joins the predictions back on the accounts' ids)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from test_examples import readme_block


def test_readme_tables_example_runs_as_written(tmp_path):
    pytest.importorskip("pandas")
    repo = Path(__file__).resolve().parents[2]
    script = readme_block("tables").replace("/tmp/mytables", str(tmp_path / "mytables"))
    script = script.replace("examples/", f"{repo}/examples/").replace("python ", f"{sys.executable} ")
    paths = [str(repo / "trainer"), str(repo / "operator"), *os.environ.get("PYTHONPATH", "").split(":")]
    env = {**os.environ, "PYTHONPATH": ":".join(p for p in paths if p)}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1500 accounts, predicted label = kind for" in res.stdout, res.stdout
    share = int(res.stdout.rsplit("kind for ", 1)[1].split("%")[0])
    assert share > 50, res.stdout  # three classes: chance is a third
    table = pq.read_table(tmp_path / "runs" / "tables" / "predictions" / "predictions.parquet")
    ids = pq.read_table(tmp_path / "mytables" / "accounts.parquet").column("account")
    assert table.column("account").to_pylist() == ids.to_pylist()
    assert table.column_names == ["account", "predicted_class", "predicted_label", "scores"]
