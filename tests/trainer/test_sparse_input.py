"""CSR bag-of-words input changes speed only: same outputs and gradients as the dense matrix."""
import pytest
import torch

from grappa.config import ModelConfig
from grappa.data.blocks import full_block
from grappa.models import GNN
from grappa.models.sparse_input import compact_input, is_sparse


def graph(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 6 * n), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    deg = torch.bincount(edge_index[1], minlength=n)
    x = (torch.rand(n, 3000, generator=g) < 0.01).float() * torch.rand(n, 3000, generator=g)
    return x, edge_index, deg


def test_compact_input_only_converts_large_sparse_matrices():
    x, _, _ = graph(400, 0)
    assert is_sparse(compact_input(x))
    assert not is_sparse(compact_input(torch.ones(400, 3000)))  # dense stays dense
    assert not is_sparse(compact_input(x[:10]))  # small stays dense
    assert torch.equal(compact_input(x).to_dense(), x)


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "gin"])
def test_sparse_input_matches_dense(arch):
    x, edge_index, deg = graph(400, 1)
    torch.manual_seed(0)
    model = GNN(ModelConfig(arch=arch, layers=2, hidden=16, dropout=0.0), x.shape[1], 5)
    blocks = [full_block(edge_index, x.shape[0], deg)] * 2
    xs = model.prepare_input(x)
    assert is_sparse(xs) == (arch != "gin")

    outs, grads = [], []
    for inp in (x, xs):
        model.zero_grad()
        out = model(inp, blocks)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append(torch.cat([p.grad.view(-1) for p in model.parameters()]))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4)
