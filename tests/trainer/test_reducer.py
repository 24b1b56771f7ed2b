"""Reducer algebra: shrinkage end points, self-normalisation by the weight sum."""
import torch

from grappa.strategies.grappa.reducer import combine, seed_weights, weighted_loss_sum


def per_seed_grads(n: int, dim: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))


def reduce(groups, correction, lam, wbar):
    """Aggregate per-seed gradients of several workers through the worker/aggregator split."""
    grads, wsums = [], []
    for g, cov in groups:
        w = seed_weights(cov, correction, lam, wbar)
        grads.append((w[:, None] * g).sum(0))
        wsums.append(float(w.sum()))
    return combine(grads, wsums)


def test_lambda_one_is_the_weighted_estimator():
    groups = [(per_seed_grads(7, seed=1), torch.rand(7)), (per_seed_grads(3, seed=2), torch.rand(3))]
    got = reduce(groups, "node", 1.0, wbar=0.4)
    g = torch.cat([x for x, _ in groups])
    c = torch.cat([c for _, c in groups])
    expected = (c[:, None] * g).sum(0) / c.sum()
    assert torch.allclose(got, expected, atol=1e-6)


def test_lambda_zero_is_the_unweighted_mean():
    groups = [(per_seed_grads(7, seed=1), torch.rand(7)), (per_seed_grads(3, seed=2), torch.rand(3))]
    uw = reduce(groups, "none", 0.0, wbar=0.4)
    for mode in ("node", "batch"):
        assert torch.allclose(reduce(groups, mode, 0.0, wbar=0.4), uw, atol=1e-6)
    assert torch.allclose(uw, torch.cat([g for g, _ in groups]).mean(0), atol=1e-6)


def test_normalised_by_weight_sum_not_by_worker_count():
    # Low coverage everywhere must not shrink the step: scaling all weights changes nothing.
    groups = [(per_seed_grads(4, seed=3), torch.full((4,), 0.1)), (per_seed_grads(6, seed=4), torch.full((6,), 0.1))]
    low = reduce(groups, "node", 1.0, wbar=0.1)
    high = reduce([(g, c * 9) for g, c in groups], "node", 1.0, wbar=0.9)
    assert torch.allclose(low, high, atol=1e-6)
    by_p = sum((c[:, None] * g).sum(0) for g, c in groups) / 2  # the reference's bug
    assert not torch.allclose(low, by_p, atol=1e-3)


def test_batch_variant_uses_one_scalar_per_worker():
    g1, c1 = per_seed_grads(4, seed=5), torch.tensor([0.2, 0.4, 0.6, 0.8])
    g2, c2 = per_seed_grads(2, seed=6), torch.tensor([1.0, 1.0])
    got = reduce([(g1, c1), (g2, c2)], "batch", 1.0, wbar=0.0)
    w1, w2 = c1.mean(), c2.mean()
    expected = (4 * w1 * g1.mean(0) + 2 * w2 * g2.mean(0)) / (4 * w1 + 2 * w2)
    assert torch.allclose(got, expected, atol=1e-6)


def test_shrinkage_interpolates_weights():
    cov = torch.tensor([0.0, 0.5, 1.0])
    w = seed_weights(cov, "node", 0.25, wbar=0.5)
    assert torch.allclose(w, 0.25 * cov + 0.75 * 0.5)


def test_weighted_loss_sum_and_empty_step():
    loss, wsum = weighted_loss_sum(torch.tensor([1.0, 2.0]), torch.tensor([0.5, 1.0]))
    assert float(loss) == 2.5 and wsum == 1.5
    zero = combine([torch.ones(3), torch.ones(3)], [0.0, 0.0])
    assert torch.equal(zero, torch.zeros(3))
