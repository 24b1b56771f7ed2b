"""The full-communication baseline: exact full-graph gradients from P fetching workers."""
import json

import pytest
import torch

from grappa.config import TrainConfig
from grappa.data.datasets import load_dataset
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.strategies import make_strategy
from grappa.strategies.grappa.reducer import combine
from grappa.strategies.grappa.rounds import RoundDecision
from grappa.tasks.node_classification import full_graph_gradient
from threaded_shards import run_shards


def run_workers(cfg: TrainConfig, state: dict, num_classes: int, num_features: int):
    _, results, hub = run_shards(cfg, state, num_features, num_classes)
    return results, hub


@pytest.mark.parametrize("arch,layers", [("gcn", 2), ("gcn", 3), ("sage", 3), ("gat", 2)])
def test_full_strategy_gradient_equals_single_process(arch, layers, data_root, tmp_path):
    cfg = TrainConfig.model_validate({
        "strategy": "full", "partitions": 4, "dataset": {"name": "cora", "root": str(data_root)},
        "model": {"arch": arch, "layers": layers, "hidden": 16, "dropout": 0.0},
        "runDir": str(tmp_path / "run")})
    data = load_dataset(cfg.dataset)
    prepare_store(cfg, progress=False)
    torch.manual_seed(0)
    model = GNN(cfg.model, data.num_features, int(data.num_classes))
    exact = full_graph_gradient(model, data)

    results, hub = run_workers(cfg, model.state_dict(), int(data.num_classes), data.num_features)
    got = combine([c.grad_sum for c in results], [c.weight_sum for c in results])
    torch.testing.assert_close(got, exact, rtol=1e-4, atol=1e-6)
    assert sum(c.seeds for c in results) == int(data.train_mask.sum())
    assert hub.bytes["sent"] == hub.bytes["received"] > 0


def test_isolated_grappa_gradient_differs(data_root, tmp_path):
    """The check above can fail: without fetching (FP, unweighted) the gradient is not exact."""
    cfg = TrainConfig.model_validate({
        "partitions": 4, "dataset": {"name": "cora", "root": str(data_root)},
        "model": {"arch": "gcn", "layers": 2, "hidden": 16, "dropout": 0.0},
        "grappa": {"correction": "none", "rounds": {"every": 0}}, "runDir": str(tmp_path / "run")})
    data = load_dataset(cfg.dataset)
    prepare_store(cfg, progress=False)
    torch.manual_seed(0)
    model = GNN(cfg.model, data.num_features, int(data.num_classes))
    exact = full_graph_gradient(model, data)
    store = ChunkStore(cfg.store_path)
    shards = [make_strategy(cfg, r, store, model) for r in range(1, 5)]
    cs = []
    for s in shards:
        s.setup_round(RoundDecision(0, 0, 0))
        (batch,) = s.start_epoch(0)
        cs.append(s.contribute(batch, 1.0))
    got = combine([c.grad_sum for c in cs], [c.weight_sum for c in cs])
    assert float((got - exact).norm() / exact.norm()) > 0.05


@pytest.mark.parametrize("doc,field", [
    ({"strategy": "full", "training": {"mode": "mini-batch"}}, "training.mode"),
    ({"strategy": "full", "grappa": {"correction": "batch"}}, "grappa.correction"),
    ({"strategy": "retexo", "grappa": {"rounds": {"every": 3}}}, "grappa.rounds"),
])
def test_settings_that_do_not_apply_are_rejected(doc, field):
    from grappa.config import ConfigError, dump_config, validate_config
    with pytest.raises(ConfigError, match=field):
        validate_config(doc)
    ok = validate_config({"strategy": doc["strategy"]})
    assert validate_config(json.loads(dump_config(ok))).strategy == doc["strategy"]  # what pods get
