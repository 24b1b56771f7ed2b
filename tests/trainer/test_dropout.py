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
