import torch

from grappa.data.blocks import Block
from grappa.strategies.grappa.coverage import coverage


def csr(edge_index, n):
    b = Block.from_edge_index(torch.tensor(edge_index), n, n, torch.zeros(n))
    return b.indptr, b.indices


def test_coverage_on_a_path_with_a_halo_end():
    # 0 <- 1 <- 2 (halo). Node 1 sees the halo directly, node 0 only at two hops.
    indptr, indices = csr([[1, 2], [0, 1]], 3)
    complete = torch.tensor([True, True, False])
    assert torch.allclose(coverage(indptr, indices, complete, 1), torch.ones(3, dtype=torch.float64))
    c2 = coverage(indptr, indices, complete, 2)
    assert torch.allclose(c2, torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))
    c3 = coverage(indptr, indices, complete, 3)
    assert torch.allclose(c3, torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))


def test_complete_graph_has_full_coverage():
    indptr, indices = csr([[0, 1, 2, 0], [1, 2, 0, 2]], 3)
    c = coverage(indptr, indices, torch.ones(3, dtype=torch.bool), 4)
    assert torch.allclose(c, torch.ones(3, dtype=torch.float64))


def test_slabs_give_the_dense_result(monkeypatch):
    """Rows cut into many slabs (one edge each, and rows with no edges) change nothing."""
    import grappa.strategies.grappa.coverage as cov_mod
    g = torch.Generator().manual_seed(0)
    n, e = 40, 160
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = ei[:, ei[0] != ei[1]].unique(dim=1)
    indptr, indices = csr(ei.tolist(), n)
    complete = torch.rand(n, generator=g) < 0.6
    adj = torch.zeros(n, n, dtype=torch.float64)
    adj[ei[1], ei[0]] = 1.0
    dense = complete.to(torch.float64)
    for _ in range(2):
        dense = (dense + adj @ dense) / (adj.sum(1) + 1.0)
    monkeypatch.setattr(cov_mod, "_SLAB_EDGES", 1)
    assert torch.allclose(coverage(indptr, indices, complete, 3), dense)
    monkeypatch.setattr(cov_mod, "_SLAB_EDGES", 1 << 22)
    assert torch.allclose(coverage(indptr, indices, complete, 3), dense)
