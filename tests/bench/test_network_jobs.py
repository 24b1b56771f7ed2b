"""bench/network.py's jobs (also peer.py's): each in a run folder of its own, and a report of a run
that trained nothing in this job refused. A finished run in a reused folder is resumed by the
launcher with nothing left to train, and its old history would pass for the new job's."""
import pytest

from bench_modules import load


@pytest.fixture(scope="module")
def network():
    return load("network")


def test_every_job_has_a_run_folder_of_its_own(network, tmp_path):
    a = network.job_config("tiny", "grappa", 2, 2, 1, tmp_path)
    b = network.job_config("tiny", "grappa", 2, 2, 1, tmp_path)
    assert a.run_dir != b.run_dir and a.store_dir == b.store_dir  # the store is shared, as prepared


def test_a_history_from_before_the_job_is_refused_naming_the_folder(network):
    epochs = [{"epoch": 1, "started_at": 100.0}, {"epoch": 2, "started_at": 101.0}]
    network.trained_here(epochs, started=99.5, run_dir="/w/run-a")  # trained in this job
    with pytest.raises(RuntimeError, match="/w/run-b held a finished run"):
        network.trained_here(epochs, started=100.5, run_dir="/w/run-b")
    with pytest.raises(RuntimeError, match="trained no epoch"):
        network.trained_here([], started=0.0, run_dir="/w/run-c")
