"""models/dropout.py: the same distribution as torch's dropout from a cheaper mask."""
import pytest
import torch

from grappa.models.dropout import dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.8])
def test_keep_rate_and_scale_are_unbiased(p):
    torch.manual_seed(0)
    y = dropout(torch.ones(400, 1000), p, training=True)
    kept = y > 0
    assert float(kept.float().mean()) == pytest.approx(1 - p, abs=0.004)  # 400k draws: ~5 sigma
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)), rtol=1e-4)
    assert float(y.mean()) == pytest.approx(1.0, abs=0.01)


def test_masks_are_independent_across_positions():
    torch.manual_seed(1)
    m = (dropout(torch.ones(200_000), 0.5, True) > 0).float()
    # neighbours inside one 64-bit draw (4 slices) and across draws: no correlation
    for lag in (1, 2, 3, 4, 7):
        assert float(torch.corrcoef(torch.stack([m[:-lag], m[lag:]]))[0, 1]) == pytest.approx(0.0, abs=0.01)


def test_seeded_identity_in_eval_and_gradient_is_the_mask():
    x = torch.randn(64, 16, requires_grad=True)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0, training=True) is x
    torch.manual_seed(3)
    a = dropout(x, 0.5, True)
    torch.manual_seed(3)
    b = dropout(x, 0.5, True)
    assert torch.equal(a, b)  # the torch generator's seed decides the mask
    a.sum().backward()
    assert torch.equal(x.grad, (a.detach() != 0).float() * 2.0)
    assert torch.count_nonzero(dropout(x, 1.0, True)) == 0


def test_fast_dropout_swaps_a_user_models_torch_dropout_only():
    """model.custom.fastDropout: PyG's GraphSAGE (its torch.nn.Dropout) gets Grappa's mask; the
    parameters, the eval-mode output and the keep rate stay; off, the model is as written."""
    from grappa.config import ModelConfig
    from grappa.models.build import build_model
    from grappa.models.dropout import Dropout

    def built(fast):
        torch.manual_seed(0)
        cfg = ModelConfig.model_validate({"layers": 2, "hidden": 64, "dropout": 0.5, "custom": {
            "factory": "torch_geometric.nn.models:GraphSAGE", "fastDropout": fast}})
        return build_model(cfg, 16, 3, "mini-batch")
    plain, fast = built(False), built(True)
    kinds = lambda m: [type(x) for x in m.modules() if isinstance(x, (torch.nn.Dropout, Dropout))]
    assert kinds(plain) == [torch.nn.Dropout] and kinds(fast) == [Dropout]
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), fast.state_dict().values()))
    x = torch.randn(40, 16)
    ei = torch.randint(0, 40, (2, 200))
    plain.eval(), fast.eval()
    assert torch.equal(plain.net(x, ei), fast.net(x, ei))
    drop = next(m for m in fast.modules() if isinstance(m, Dropout))
    drop.train()
    torch.manual_seed(4)
    assert float((drop(torch.ones(100_000)) > 0).float().mean()) == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="fastDropout need"):
        ModelConfig.model_validate({"custom": {"fastDropout": True}})
