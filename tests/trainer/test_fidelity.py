"""Gradient-fidelity harness: exact where it must be, and the direction the method doc measured."""
import pytest

from grappa.config import TrainConfig
from grappa.data.datasets import load_dataset
from grappa.strategies.grappa.fidelity import gradient_fidelity

REDUCERS = (("UW", "none", 1.0), ("node l=1", "node", 1.0))


@pytest.fixture(scope="module")
def cora(data_root):
    cfg = TrainConfig.model_validate({"partitions": 4, "dataset": {"name": "cora"},
                                      "model": {"arch": "gcn", "layers": 2, "hidden": 32}})
    return cfg, load_dataset(cfg.dataset)


def test_one_partition_is_exact(cora, tmp_path):
    cfg, data = cora
    rows = gradient_fidelity(cfg.model_copy(update={"partitions": 1}), data, [0], rounds=1,
                             reducers=REDUCERS, work_dir=str(tmp_path))
    for r in rows:
        assert r.rel_error < 1e-5 and r.cosine > 0.99999, r


def test_global_degrees_beat_local_degrees_for_gcn(cora, tmp_path):
    cfg, data = cora
    glob = {r.reducer: r for r in gradient_fidelity(cfg, data, [0, 1], rounds=1, reducers=REDUCERS,
                                                     work_dir=str(tmp_path))}
    loc = {r.reducer: r for r in gradient_fidelity(cfg, data, [0, 1], rounds=1, reducers=REDUCERS,
                                                    degrees="local", work_dir=str(tmp_path))}
    assert 0 < glob["UW"].rel_error < 0.6 * loc["UW"].rel_error
    assert glob["UW"].cosine > loc["UW"].cosine
