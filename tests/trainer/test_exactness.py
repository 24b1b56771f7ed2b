"""With P = 1 in full-graph mode the aggregated gradient is the single-process gradient."""
import pytest
import torch

from grappa.config import ModelConfig, TrainConfig
from grappa.data.datasets import load_dataset
from grappa.data.local_graph import build_local_graph
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.strategies.contribution import contribution_from
from grappa.strategies.grappa.coverage import coverage
from grappa.strategies.grappa.reducer import combine
from grappa.strategies.grappa.strategy import full_graph_blocks
from grappa.tasks.node_classification import full_graph_gradient


@pytest.fixture(scope="module")
def cora_p1(data_root, tmp_path_factory):
    cfg = TrainConfig.model_validate({
        "partitions": 1, "dataset": {"name": "cora"},
        "storeDir": str(tmp_path_factory.mktemp("store-p1"))})
    prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    return cfg, load_dataset(cfg.dataset), build_local_graph(store, [0], None)


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "gin"])
@pytest.mark.parametrize("correction", ["none", "node", "batch"])
def test_p1_full_graph_gradient_is_exact(cora_p1, arch, correction):
    cfg, data, g = cora_p1
    assert g.num_halo == 0 and g.num_nodes == data.num_nodes
    mcfg = ModelConfig(arch=arch, layers=3, hidden=32, dropout=0.0)
    torch.manual_seed(0)
    model = GNN(mcfg, data.num_features, int(data.num_classes))
    exact = full_graph_gradient(model, data)

    # The lean path: the store's CSR, only the rows the seeds need, features from the maps.
    cov = coverage(g.indptr, g.indices, g.complete, mcfg.layers).float()
    seeds = g.seeds
    blocks, rows, seed_rows = full_graph_blocks(g, seeds, model)
    if arch != "gin":  # BatchNorm (GIN) normalises over every row: nothing pruned there
        assert blocks[-1].num_dst == seeds.numel() and rows.numel() < g.num_nodes
    x = g.features.gather(rows)
    c = contribution_from(model, lambda: model(x, blocks), seed_rows, cov[seeds], g.y[seeds],
                          correction, 0.5, 1.0)
    aggregated = combine([c.grad_sum], [c.weight_sum])
    # Same nodes in the same order (one chunk holds all, sorted), so the graphs are identical.
    assert torch.equal(g.global_ids, torch.arange(data.num_nodes))
    assert torch.allclose(aggregated, exact, rtol=1e-4, atol=1e-6), \
        f"max abs diff {float((aggregated - exact).abs().max())}"
