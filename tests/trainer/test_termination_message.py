"""In a pod, the trainer's `grappa: error:` text is also the container's termination message (the
operator makes it the job's status message), without the log's progress bars (issue 28, item 4)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from test_sources import good

REPO = Path(__file__).resolve().parents[2]


def _prepare(tmp_path: Path, termination_log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}/trainer", "GRAPPA_TERMINATION_LOG": str(termination_log)}
    return subprocess.run([sys.executable, "-m", "grappa", "prepare", "--run-dir", str(tmp_path / "run"), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def _error_text(stderr: str) -> str:
    return stderr[stderr.index("grappa: error:"):].splitlines()[0]


def test_bad_data_writes_exactly_the_error_line(tmp_path):
    good(tmp_path / "g")
    edges = np.load(tmp_path / "g" / "edges.npy")
    edges[1, 137] = 50
    np.save(tmp_path / "g" / "edges.npy", edges)
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates the file in every container
    out = _prepare(tmp_path, log, "--dataset", "arrays", "--partitions", "2", "--set", f"dataset.path={tmp_path / 'g'}")
    assert out.returncode == 3, out.stderr
    written = log.read_text()
    assert written == _error_text(out.stderr), (written, out.stderr)
    assert written.startswith("grappa: error: ") and "edges.npy edge 137" in written
    assert "%|" not in written  # no progress bar


def test_config_error_is_written_whole(tmp_path):
    log = tmp_path / "termination-log"
    log.write_text("")
    out = _prepare(tmp_path, log, "--layers", "3", "--fanouts", "10,5")
    assert out.returncode == 2
    written = log.read_text()
    assert written.startswith("grappa: error: ") and "training.fanouts has 2 entries" in written
    assert written in out.stderr


def test_outside_a_pod_nothing_is_written(tmp_path):
    log = tmp_path / "absent" / "termination-log"
    out = _prepare(tmp_path, log, "--layers", "3", "--fanouts", "10,5")
    assert out.returncode == 2 and "grappa: error:" in out.stderr
    assert not log.exists() and not log.parent.exists()


def test_a_predict_pod_writes_its_error_as_the_termination_message(tmp_path):
    """The predict pods end through the CLI's own error path: the same one line on stderr and in
    the termination message, and the configuration exit code (issue 35)."""
    import json
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {**os.environ, "PYTHONPATH": f"{REPO}/trainer", "GRAPPA_TERMINATION_LOG": str(log), "RANK": "0",
           "GRAPPA_CONFIG": json.dumps({"runDir": str(tmp_path / "run"), "partitions": 2}),
           "GRAPPA_PREDICT": json.dumps({"model": str(tmp_path / "missing.pt"), "out": "predictions"})}
    env.pop("GRAPPA_JOB_NAME", None)
    out = subprocess.run([sys.executable, "-m", "grappa.inference.pod", "aggregator"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    written = log.read_text()
    assert written == _error_text(out.stderr), (written, out.stderr)
    assert written.startswith("grappa: error: model file ") and "missing.pt does not exist" in written
