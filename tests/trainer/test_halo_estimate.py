"""grappa.halo (strategies/grappa/halo.py, models/ops.py `cut_rows`). `self`: a row cut from its
in-edges is computed as if its in-neighbours were copies of itself, so when they are, the
estimate is the exact output; rows with in-edges, and every row when it is off, are untouched;
the round's m is the mean (d_u + 1)^(-1/2) over the local in-edges. `neighbours`: a halo row gets
the reverse of its local edges, scaled to its degree, so when it owns every neighbour the row is
exact. The config resolves the mode per task and refuses what cannot use it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from grappa.config import ConfigError, ModelConfig, TrainConfig, validate_config
from grappa.data.blocks import Block
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.models.gat import GATLayer
from grappa.models.gcn import GCNLayer
from grappa.models.gin import GINLayer
from grappa.models.sage import SAGELayer
from grappa.strategies.grappa.halo import cut_estimate, with_owned_in_edges
from grappa.strategies.grappa.strategy import full_graph_blocks
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.strategies.grappa.strategy import GrappaStrategy
from grappa.tasks import build_task_model

F64 = torch.float64
D_NEIGHBOUR = 5  # every neighbour's global in-degree, so m = (5 + 1)^(-1/2) is exact
D_NEIGHBOUR_M = (D_NEIGHBOUR + 1) ** -0.5


def layer(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    made = {"gcn": lambda: GCNLayer(4, 3), "sage": lambda: SAGELayer(4, 3), "gin": lambda: GINLayer(4, 3, 6),
            "gat": lambda: GATLayer(4, 3, heads=2, last=False)}[arch]()
    return made.to(F64).eval()  # eval: GIN's BatchNorm uses its running statistics, row by row


def graphs():
    """Row 0 has three in-neighbours (inputs 2, 3, 4) that are copies of it; row 1 has in-edges
    from 2 and 5 (different features). `whole` holds every in-edge; `cut` drops row 0's."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 4, generator=gen, dtype=F64)
    x[2:5] = x[0]
    deg = torch.tensor([3, 2, D_NEIGHBOUR, D_NEIGHBOUR, D_NEIGHBOUR, 4])
    whole = Block.from_edge_index(torch.tensor([[2, 3, 4, 2, 5], [0, 0, 0, 1, 1]]), 6, 2, deg)
    cut = Block.from_edge_index(torch.tensor([[2, 5], [1, 1]]), 6, 2, deg)
    return x, whole, cut


@pytest.mark.parametrize("arch", ["gcn", "sage", "gin", "gat"])
def test_a_cut_row_whose_neighbours_are_copies_of_it_is_estimated_exactly(arch):
    x, whole, cut = graphs()
    f = layer(arch)
    exact = f(x, whole)
    cut_off = f(x, cut)
    cut.cut_estimate = D_NEIGHBOUR_M
    est = layer(arch)(x, cut)
    assert torch.allclose(est, exact, atol=1e-12), (est - exact).abs().max()
    assert torch.allclose(f(x, cut), exact, atol=1e-12)  # a block used before is estimated too
    if arch != "gat":  # GAT's attention over copies of a row is the row itself: cut or not
        assert not torch.allclose(cut_off[0], exact[0], atol=1e-6)  # the cut row was wrong before
    assert torch.equal(cut_off[1], est[1])  # a row with in-edges is untouched


@pytest.mark.parametrize("arch", ["gcn", "sage", "gin"])
def test_the_estimate_carries_the_gradient_to_the_cut_rows_input(arch):
    x, whole, cut = graphs()
    cut.cut_estimate = D_NEIGHBOUR_M
    x = x.requires_grad_()
    layer(arch)(x, cut)[0].sum().backward()
    gx = x.grad.clone()
    x.grad = None
    layer(arch)(x, whole)[0].sum().backward()
    # the estimate's gradient w.r.t. x_0 is the exact one's summed over the copies it stands for
    assert torch.allclose(gx[0], x.grad[[0, 2, 3, 4]].sum(0), atol=1e-12)


def test_a_row_of_global_degree_zero_is_not_estimated():
    deg = torch.tensor([0, 2, 1])
    b = Block.from_edge_index(torch.tensor([[2], [1]]), 3, 2, deg)
    x = torch.randn(3, 4, dtype=F64)
    before = layer("gcn")(x, b)
    b.cut_estimate = 0.7
    assert torch.equal(layer("gcn")(x, b), before)


def test_the_rounds_estimate_is_the_mean_over_local_in_edges():
    g = SimpleNamespace(indices=torch.tensor([2, 3, 3, 0]), deg=torch.tensor([0, 1, 3, 8], dtype=torch.int32))
    # the edges' sources are local rows 2, 3, 3, 0, of global in-degree 3, 8, 8, 0
    assert cut_estimate(g) == pytest.approx((4 ** -0.5 + 2 * 9 ** -0.5 + 1.0) / 4)
    assert cut_estimate(SimpleNamespace(indices=torch.tensor([], dtype=torch.long), deg=g.deg)) == 0.0


def cfg_of(**over) -> TrainConfig:
    return TrainConfig.model_validate({"dataset": {"name": "cora"}, **over})


def test_the_default_is_neighbours_for_link_prediction_and_cut_for_node_classification():
    assert cfg_of(task="link-prediction").halo_mode == "neighbours"
    assert cfg_of().halo_mode == "cut"
    assert cfg_of(grappa={"halo": "self"}).halo_mode == "self"
    assert cfg_of(task="link-prediction", grappa={"halo": "cut"}).halo_mode == "cut"


@pytest.mark.parametrize("doc, words", [
    ({"grappa": {"halo": "self"}, "model": {"custom": {"factory": "my_models:make"}}},
     ["grappa.halo self and neighbours", "model.custom (factory my_models:make)",
      "remove grappa.halo or set it to cut"]),
    ({"grappa": {"halo": "neighbours"}}, ["grappa.halo neighbours", "undirected", "set grappa.halo to self or cut"]),
    ({"strategy": "full", "grappa": {"halo": "cut"}}, ["grappa.halo", "strategy grappa only"]),
    ({"grappa": {"halo": "guess"}}, ["grappa.halo", "cut", "self", "neighbours"]),
])
def test_what_cannot_use_the_setting_is_refused_naming_it(doc, words):
    with pytest.raises(ConfigError) as err:
        validate_config(doc)
    for w in words:
        assert w in str(err.value), str(err.value)


def small_local_graph():
    """Owned rows 0..2 (every in-edge), halo rows 3, 4: an undirected graph 0-1, 0-3, 1-3, 2-4, 3-5
    (5 not local: 3's in-edge from it is missing), 4-6 (not local)."""
    indptr = torch.tensor([0, 2, 4, 5, 5, 5])
    indices = torch.tensor([1, 3, 0, 3, 4])  # in-edges of 0: 1, 3; of 1: 0, 3; of 2: 4
    return SimpleNamespace(indptr=indptr, indices=indices, num_nodes=5, num_owned=3,
                           deg=torch.tensor([2, 2, 1, 3, 2], dtype=torch.int32))


def test_a_halo_row_gets_the_reverse_of_its_local_edges_and_its_kept_count():
    indptr, indices, kept = with_owned_in_edges(small_local_graph())
    rows = [sorted(indices[indptr[v]:indptr[v + 1]].tolist()) for v in range(5)]
    assert rows == [[1, 3], [0, 3], [4], [0, 1], [2]]
    assert kept.tolist() == [2, 2, 1, 2, 1]


def test_the_halo_rows_are_built_in_bounded_memory_beyond_the_graph():
    """Sorting every local edge ran RMAT-22 at P = 8 out of memory; the halo's rows alone need
    O(halo edges) beyond the result (measured 14.8 bytes a halo edge here), plus a byte a local
    edge for the scan."""
    import tracemalloc
    rng = np.random.default_rng(0)
    owned, halo, per_row = 20_000, 30_000, 40
    edges = owned * per_row
    indptr = torch.cat([torch.arange(0, edges + 1, per_row), torch.full((halo,), edges)])
    indices = torch.from_numpy(rng.integers(0, owned + halo, edges).astype(np.int32))
    g = SimpleNamespace(indptr=indptr, indices=indices, num_nodes=owned + halo, num_owned=owned)
    halo_edges = int((indices >= owned).sum())
    tracemalloc.start()
    try:
        out = with_owned_in_edges(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    beyond = peak - sum(t.numel() * t.element_size() for t in out)
    assert out[1].numel() == edges + halo_edges and out[1].dtype == torch.int32
    assert beyond < edges + 24 * halo_edges, (beyond / edges, beyond / halo_edges)


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_a_halo_row_that_owns_every_neighbour_is_exact(arch):
    """Halo row 3 of small_local_graph with degree 2 (its neighbours 0 and 1, both owned): the
    owned rows' outputs with `neighbours` equal a whole-graph computation over the same nodes."""
    g = small_local_graph()
    g.deg = torch.tensor([2, 2, 1, 2, 1], dtype=torch.int32)  # 3 and 4 have no neighbours elsewhere
    torch.manual_seed(0)
    model = GNN(ModelConfig(arch=arch, layers=2, hidden=6, dropout=0.0), 4, 3).to(F64)
    x = torch.randn(5, 4, dtype=F64)
    blocks, rows, out_rows = full_graph_blocks(g, torch.arange(3), model, with_owned_in_edges(g))
    got = model(x[rows], blocks).index_select(0, out_rows)
    edges = torch.tensor([[1, 3, 0, 3, 4, 0, 1, 2], [0, 0, 1, 1, 2, 3, 3, 4]])
    whole = Block.from_edge_index(edges, 5, 5, g.deg.long())
    assert torch.allclose(got, model(x, [whole, whole])[:3], atol=1e-12)
    cut_blocks, cut_rows_, cut_out = full_graph_blocks(g, torch.arange(3), model)
    cut = model(x[cut_rows_], cut_blocks).index_select(0, cut_out)
    assert not torch.allclose(cut, got, atol=1e-6)  # cut, the halo rows were wrong


@pytest.mark.parametrize("halo, mark", [(None, None), ("self", "m"), ("cut", None)])
def test_a_link_round_runs_on_the_halo_it_asked_for(data_root, tmp_path, halo, mark):
    doc = {"partitions": 2, "task": "link-prediction", "dataset": {"name": "cora"},
           "model": {"hidden": 8, "layers": 2}, "runDir": str(tmp_path / "run"),
           "storeDir": str(tmp_path / "store"),  # 4 chunks: a worker owns 2, the rest is halo
           "grappa": {"chunks": 4, **({"halo": halo} if halo else {})}}
    cfg = TrainConfig.model_validate(doc)
    man = prepare_store(cfg, progress=False)
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    s = GrappaStrategy(cfg, 1, ChunkStore(cfg.store_path), model)
    s.setup_round(RoundDecision(0, round_seed(0, 0), 0))
    g = s.graph
    assert g.num_halo > 0
    marks = [b.cut_estimate for b in s.blocks]
    assert marks == ([pytest.approx(cut_estimate(g))] if mark else [None]) * len(s.blocks)
    first = s.blocks[0]  # the input layer's block: its halo rows have in-edges only with neighbours
    halo_rows = first.local_in_degree()[first.deg[:first.num_dst] > 0] == 0
    assert bool(halo_rows.any()) == (halo is not None)  # the default (None) is neighbours
    if halo is None:
        assert first.kept is not None and torch.equal(first.kept, first.local_in_degree())


@pytest.mark.parametrize("halo", [None, "cut"])
def test_a_mini_batch_link_step_samples_the_halos_owned_neighbours(data_root, tmp_path, halo):
    doc = {"partitions": 2, "task": "link-prediction", "dataset": {"name": "cora"},
           "model": {"hidden": 8, "layers": 2}, "runDir": str(tmp_path / "run"),
           "storeDir": str(tmp_path / "store"), "grappa": {"chunks": 4, **({"halo": halo} if halo else {})},
           "training": {"mode": "mini-batch", "evalMode": "exact", "batchSize": 64, "fanouts": [5, 5]}}
    cfg = TrainConfig.model_validate(doc)
    man = prepare_store(cfg, progress=False)
    s = GrappaStrategy(cfg, 1, ChunkStore(cfg.store_path), build_task_model(cfg, man["num_features"], 1))
    s.setup_round(RoundDecision(0, round_seed(0, 0), 0))
    s.gen = torch.Generator().manual_seed(0)
    blocks, *_ = s.prepare_link(torch.arange(64))
    cut = 0
    for b in blocks:
        cut += int(((b.deg[:b.num_dst] > 0) & (b.local_in_degree() == 0)).sum())
        assert bool((b.kept <= b.deg[:b.num_dst]).all())  # sampled rows: deg / kept scales them up
    assert (cut == 0) == (halo is None)  # neighbours (the default): no halo row is left cut


@pytest.mark.parametrize("halo", [None, "neighbours"])
def test_a_directed_graph_keeps_its_halo_cut_or_refuses_neighbours(data_root, tmp_path, halo):
    doc = {"partitions": 2, "task": "link-prediction", "dataset": {"name": "cora"},
           "model": {"hidden": 8, "layers": 2}, "runDir": str(tmp_path / "run"),
           "storeDir": str(tmp_path / "store"), "grappa": {"chunks": 4, **({"halo": halo} if halo else {})}}
    cfg = TrainConfig.model_validate(doc)
    man = prepare_store(cfg, progress=False)
    s = GrappaStrategy(cfg, 1, ChunkStore(cfg.store_path), build_task_model(cfg, man["num_features"], 1))
    s.link.undirected = False  # as a directed graph's link store records it
    if halo is None:
        s.setup_round(RoundDecision(0, round_seed(0, 0), 0))
        assert s.csr is None and s.cut is None  # cut
    else:
        with pytest.raises(ValueError, match="grappa.halo neighbours .* directed: set grappa.halo to self or cut"):
            s.setup_round(RoundDecision(0, round_seed(0, 0), 0))
