import torch

from grappa.coverage import coverage
from grappa.models.block import Block


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
