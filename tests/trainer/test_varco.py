"""VARCO: schedule boundaries, codec algebra, exactness at ratio 1, analytic byte counts."""
import math

import pytest
import torch

from grappa.config import ConfigError, TrainConfig, validate_config
from grappa.data.datasets import load_dataset
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.strategies import varco
from grappa.strategies.grappa.reducer import combine
from threaded_shards import run_shards


def test_schedule_boundaries():
    assert varco.rate(0, 128, 1.5, 5, 300) == 128
    # reaches r_min exactly at t = (T - 2) / s and stays there
    assert varco.rate(59, 128, 1.5, 5, 300) > 1.5
    assert math.isclose(varco.rate(298 / 5, 128, 1.5, 5, 300), 1.5)
    assert varco.rate(299, 128, 1.5, 5, 300) == 1.5
    mid = varco.rate(10, 128, 1.5, 5, 300)
    assert math.isclose(mid, 128 - 5 * 10 * (128 - 1.5) / 298)


def test_kept_columns_is_clamped():
    assert varco.kept_columns(128, 1000.0) == 1  # never zero columns
    assert varco.kept_columns(128, 1.0) == 128
    assert varco.kept_columns(128, 0.5) == 128
    assert varco.kept_columns(128, 3.0) == 42


@pytest.mark.parametrize("kind", ["truncate", "random", "lowrank"])
def test_codec_backward_is_the_transpose(kind):
    """<decode(encode(h)), g> == <h, decode_grad(encode_grad(g))>: the backward pass
    differentiates exactly the map the forward pass applied."""
    torch.manual_seed(0)
    h, g = torch.randn(30, 16, dtype=torch.float64), torch.randn(30, 16, dtype=torch.float64)
    codec = varco.make_codec(kind, 16, 4.0, seed=1, step=3, layer=0)
    wire, side = codec.encode(h)
    assert wire.shape == (30, 4)
    fwd = codec.decode(wire, side)
    back = codec.decode_grad(codec.encode_grad(g, side), side)
    assert torch.isclose((fwd * g).sum(), (h * back).sum())


def test_random_codec_is_unbiased_and_seeded():
    h = torch.randn(5, 12, dtype=torch.float64)
    mean = sum(varco.make_codec("random", 12, 3.0, 0, step, 1).decode(
        *varco.make_codec("random", 12, 3.0, 0, step, 1).encode(h)) for step in range(3000)) / 3000
    assert torch.allclose(mean, h, atol=0.15)
    a = varco.make_codec("random", 12, 3.0, 0, 7, 1).cols
    assert torch.equal(a, varco.make_codec("random", 12, 3.0, 0, 7, 1).cols)


def test_settings_validated():
    with pytest.raises(ConfigError, match="varco settings apply to strategy varco only"):
        validate_config({"varco": {"rMin": 2}})
    with pytest.raises(ConfigError, match="rMin"):
        validate_config({"strategy": "varco", "varco": {"rMin": 8, "rMax": 4}})


def run_threads(cfg: TrainConfig, state: dict, data):
    shards, results, _ = run_shards(cfg, state, data.num_features, int(data.num_classes))
    return combine([c.grad_sum for c in results], [c.weight_sum for c in results]), shards


def setup(data_root, tmp_path, strategy, varco_cfg=None, layers=3):
    cfg = TrainConfig.model_validate({
        "strategy": strategy, "partitions": 3, "dataset": {"name": "cora", "root": str(data_root)},
        "model": {"arch": "sage", "layers": layers, "hidden": 16, "dropout": 0.0},
        **({"varco": varco_cfg} if varco_cfg else {}), "runDir": str(tmp_path / "run")})
    data = load_dataset(cfg.dataset)
    prepare_store(cfg, progress=False)
    torch.manual_seed(0)
    model = GNN(cfg.model, data.num_features, int(data.num_classes))
    return cfg, data, model.state_dict()


def test_ratio_one_reproduces_full_gradients(data_root, tmp_path):
    cfg, data, state = setup(data_root, tmp_path, "full")
    full, _ = run_threads(cfg, state, data)
    for kind in ("truncate", "random"):
        vcfg, _, _ = setup(data_root, tmp_path, "varco", {"compressor": kind, "schedule": "fixed",
                                                          "fixedRatio": 1.0})
        got, _ = run_threads(vcfg, state, data)
        assert torch.equal(got, full)
    # and compression really changes them (so the check above can fail)
    vcfg, _, _ = setup(data_root, tmp_path, "varco", {"schedule": "fixed", "fixedRatio": 8.0})
    got, _ = run_threads(vcfg, state, data)
    assert float((got - full).norm() / full.norm()) > 1e-3


@pytest.mark.parametrize("kind", ["truncate", "lowrank"])
def test_bytes_match_the_formula(kind, data_root, tmp_path):
    r, hidden = 4.0, 16
    cfg, data, state = setup(data_root, tmp_path, "varco",
                             {"compressor": kind, "schedule": "fixed", "fixedRatio": r})
    _, shards = run_threads(cfg, state, data)
    k = varco.kept_columns(hidden, r)
    for s in shards:
        sent_rows = sum(int(rows.numel()) for rows in s.plan.send_rows.values())
        halo_rows = sum(int(rows.numel()) for rows in s.plan.recv_rows.values())
        peers = len(s.plan.send_rows)
        side = 4 * hidden * k * peers if kind == "lowrank" else 0
        assert s.fetch_log[(-1, "forward")] == 4 * sent_rows * data.num_features  # input: uncompressed
        for layer in (0, 1):  # the two hidden activations of a 3-layer model
            assert s.fetch_log[(layer, "forward")] == 4 * sent_rows * k + side
            assert s.fetch_log[(layer, "backward")] == 4 * halo_rows * k
        assert (2, "forward") not in s.fetch_log  # the output layer is never exchanged
