"""The lean block layers compute what the previous PyG layers computed, prune rows exactly, keep no
E x hidden tensor for backward, take CSR input, and import no torch_geometric."""
import gc
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import grappa
from grappa.config import ModelConfig
from grappa.data.blocks import Block, full_block
from grappa.models import GNN
from grappa.models.gat import GATLayer
from grappa.models.sparse_input import is_sparse

from previous_layers import PrevGNN, copy_layer, layer_on_block, message_graph, param_pairs

ARCHS = ["gcn", "sage", "gat", "gin"]
F64 = torch.float64


def random_edges(num_src: int, num_dst: int, per_dst: float, gen: torch.Generator,
                 isolated: float = 0.2) -> torch.Tensor:
    """Unique (src, dst) pairs, no self-loops, dst < num_dst; a fraction of dst rows get none."""
    m = int(per_dst * num_dst)
    ei = torch.stack([torch.randint(0, num_src, (m,), generator=gen),
                      torch.randint(0, num_dst, (m,), generator=gen)])
    ei = torch.unique(ei[:, ei[0] != ei[1]], dim=1)
    lonely = torch.rand(num_dst, generator=gen) < isolated
    return ei[:, ~lonely[ei[1]]]


def whole_graph(n: int, per_node: float, seed: int):
    gen = torch.Generator().manual_seed(seed)
    ei = random_edges(n, n, per_node, gen)
    deg = torch.bincount(ei[1], minlength=n)
    assert (deg == 0).any()
    return ei, deg, full_block(ei, n, deg)


def pruned_block(seed: int, sampled: bool) -> Block:
    """num_dst < num_src; the input rows past num_dst (halo) have global degrees but no in-edges
    here; `sampled`: output rows kept fewer in-neighbours than their global degree."""
    gen = torch.Generator().manual_seed(seed)
    ns, nd = 60, 25
    ei = random_edges(ns, nd, 4.0, gen)
    local = torch.bincount(ei[1], minlength=nd)
    deg = torch.randint(1, 9, (ns,), generator=gen)
    deg[:nd] = local + (torch.randint(1, 5, (nd,), generator=gen) if sampled else 0)
    b = Block.from_edge_index(ei, ns, nd, deg, kept=local if sampled else None)
    assert (b.local_in_degree() == 0).any() and b.num_dst < b.num_src
    return b


def models(arch: str, in_dim: int, classes: int, layers: int = 2, hidden: int = 12, dtype=F64):
    cfg = ModelConfig(arch=arch, layers=layers, hidden=hidden, dropout=0.0, heads=3)
    torch.manual_seed(0)
    lean, prev = GNN(cfg, in_dim, classes).to(dtype), PrevGNN(cfg, in_dim, classes).to(dtype)
    for a, b in zip(lean.layers, prev.layers):
        copy_layer(a, b)
    return lean, prev


def outputs_and_grads(fn, x: torch.Tensor, weights: torch.Tensor, params: list[torch.Tensor]):
    """fn(x), and the gradients of sum(fn(x) * weights) w.r.t. x and `params` (flattened)."""
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    grads = torch.autograd.grad((out * weights).sum(), [x, *params])
    return out.detach(), grads[0], [g.flatten() for g in grads[1:]]


def paired(lean_layers, prev_layers) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    pairs = [p for a, b in zip(lean_layers, prev_layers, strict=True) for p in param_pairs(a, b)]
    return [a for a, _ in pairs], [b for _, b in pairs]


def assert_same(new, old, what: str, loose: bool = False):
    (out_n, gx_n, gp_n), (out_o, gx_o, gp_o) = new, old
    close = dict(rtol=1e-4, atol=1e-5) if loose else dict(rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(out_n, out_o, **close, msg=lambda m: f"{what} output: {m}")
    torch.testing.assert_close(gx_n, gx_o, **close, msg=lambda m: f"{what} input grad: {m}")
    assert len(gp_n) == len(gp_o)
    for i, (a, b) in enumerate(zip(gp_n, gp_o)):
        torch.testing.assert_close(a, b, **close, msg=lambda m: f"{what} parameter grad {i}: {m}")


# 1. Same function and gradients as the previous PyG layers ---------------------------------------

@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("arch", ARCHS)
def test_whole_graph_matches_previous(arch, dtype):
    n, f, c = 50, 7, 4
    _, _, block = whole_graph(n, 3.0, 1)
    lean, prev = models(arch, f, c, hidden=10, dtype=dtype)  # GAT: 3 heads of 3
    assert lean.widths == [9 if arch == "gat" else 10, c]
    x, w = torch.randn(n, f, dtype=dtype), torch.randn(n, c, dtype=dtype)
    mg = message_graph(block, dtype)
    mine, theirs = paired(lean.layers, prev.layers)
    assert len(mine) == len(list(lean.parameters())) == len(list(prev.parameters()))
    new = outputs_and_grads(lambda x: lean(x, [block, block]), x, w, mine)
    old = outputs_and_grads(lambda x: prev(x, mg), x, w, theirs)
    assert_same(new, old, arch, loose=dtype != F64)


@pytest.mark.parametrize("kind", ["pruned", "sampled", "no-edges"])
@pytest.mark.parametrize("arch,last", [("gcn", True), ("sage", True), ("gin", True),
                                       ("gat", False), ("gat", True)])
def test_layer_on_block_matches_previous(arch, last, kind):
    block = pruned_block(2, sampled=kind == "sampled")
    if kind == "no-edges":
        block = Block(torch.zeros_like(block.indptr), block.indices[:0], block.num_src, block.deg)
    f = 6
    lean_model, prev_model = models(arch, f, 5, layers=1 if last else 2)
    lean, prev = lean_model.layers[0], prev_model.layers[0]
    x = torch.randn(block.num_src, f, dtype=F64)
    w = torch.randn(block.num_dst, lean.out_dim, dtype=F64)
    mine, theirs = paired([lean], [prev])
    new = outputs_and_grads(lambda x: lean(x, block), x, w, mine)
    old = outputs_and_grads(lambda x: layer_on_block(prev, x, block, F64), x, w, theirs)
    assert_same(new, old, f"{arch} {kind}")


def test_gat_softmax_is_stable_for_large_scores():
    """Scores in the thousands (exp overflows float64 past ~709) still give PyG's attention."""
    block = pruned_block(4, sampled=False)
    lean_model, prev_model = models("gat", 6, 5, layers=1)
    lean, prev = lean_model.layers[0], prev_model.layers[0]
    with torch.no_grad():
        lean.att_src.mul_(3e3), lean.att_dst.mul_(-3e3)
    copy_layer(lean, prev)
    x = torch.randn(block.num_src, 6, dtype=F64)
    w = torch.randn(block.num_dst, lean.out_dim, dtype=F64)
    mine, theirs = paired([lean], [prev])
    new = outputs_and_grads(lambda x: lean(x, block), x, w, mine)
    old = outputs_and_grads(lambda x: layer_on_block(prev, x, block, F64), x, w, theirs)
    assert new[0].isfinite().all()
    assert_same(new, old, "gat large scores")


def test_sampled_block_scales_gcn_neighbours():
    """`kept` matters: the same block without it gives a different GCN output."""
    block = pruned_block(3, sampled=True)
    lean, _ = models("gcn", 6, 5, layers=1)
    x = torch.randn(block.num_src, 6, dtype=F64)
    unsampled = Block(block.indptr, block.indices, block.num_src, block.deg)
    assert not torch.allclose(lean(x, [block]), lean(x, [unsampled]))


@pytest.mark.parametrize("arch", ARCHS)
def test_initialisation_like_previous(arch):
    """Same parameter shapes, zero biases where PyG's are zero, and the same uniform bounds."""
    cfg = ModelConfig(arch=arch, layers=2, hidden=96, heads=4)
    torch.manual_seed(0)
    lean, prev = GNN(cfg, 80, 40), PrevGNN(cfg, 80, 40)
    for a, b in zip(lean.layers, prev.layers):
        pairs = param_pairs(a, b)
        assert len(pairs) == len(list(a.parameters())) == len(list(b.parameters()))
        for q, p in pairs:
            assert q.numel() == p.numel()
            if p.abs().max() == 0:
                assert q.abs().max() == 0
            elif p.numel() > 50:
                assert 0.85 < float(q.detach().abs().max() / p.detach().abs().max()) < 1.15


# 2. Computing only the rows the next layer needs is exact --------------------------------------

def nested_blocks(edge_index, num_nodes: int, deg, seeds, layers: int):
    """Blocks from the input layer to the seeds: layer l's outputs are exactly the rows layer l+1
    reads (its outputs first, then their in-neighbours)."""
    src, dst = edge_index
    blocks, nodes = [], seeds
    for _ in range(layers):
        pos = torch.full((num_nodes,), -1)
        pos[nodes] = torch.arange(nodes.numel())
        keep = pos[dst] >= 0
        s, d = src[keep], dst[keep]
        new = torch.unique(s[pos[s] < 0])
        pos[new] = torch.arange(nodes.numel(), nodes.numel() + new.numel())
        inputs = torch.cat([nodes, new])
        blocks.insert(0, Block.from_edge_index(torch.stack([pos[s], pos[d]]), inputs.numel(),
                                               nodes.numel(), deg[inputs]))
        nodes = inputs
    return blocks, nodes


@pytest.mark.parametrize("arch", ARCHS)
def test_rows_needed_pruning_is_exact(arch):
    n, f, c, layers = 120, 5, 3, 3
    ei, deg, full = whole_graph(n, 2.5, 4)
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(5))[:8]
    blocks, inputs = nested_blocks(ei, n, deg, seeds, layers)
    assert inputs.numel() < n and blocks[0].num_dst < blocks[0].num_src
    lean, _ = models(arch, f, c, layers=layers)
    x, w = torch.randn(n, f, dtype=F64), torch.randn(seeds.numel(), c, dtype=F64)
    if arch == "gin":
        # BatchNorm in training mode normalises over the rows a layer computes, which pruning
        # changes by design; compare with the running statistics of one full-graph pass.
        lean(x, [full] * layers)
        lean.eval()
    params = list(lean.parameters())
    out_w, gx_w, gp_w = outputs_and_grads(lambda x: lean(x, [full] * layers)[seeds], x, w, params)
    pruned = outputs_and_grads(lambda xs: lean(xs, blocks), x[inputs], w, params)
    # The input gradient is zero outside the seeds' L-hop in-neighbourhood, which `inputs` is.
    outside = torch.ones(n, dtype=torch.bool)
    outside[inputs] = False
    assert torch.all(gx_w[outside] == 0)
    assert_same(pruned, (out_w, gx_w[inputs], gp_w), f"{arch} pruned")


# 3. Nothing E x hidden is kept for backward ----------------------------------------------------

def saved_during(fn):
    """fn()'s result and the tensors autograd saved for backward while it ran."""
    saved = []

    def pack(t):
        saved.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, saved


def elements(t: torch.Tensor) -> int:
    return t.values().numel() if t.layout != torch.strided else t.numel()


def live_tensors() -> list[torch.Tensor]:
    with warnings.catch_warnings():  # isinstance() pokes deprecated module attributes
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]


N_BIG_DEG, F_IN, HIDDEN, HEADS = 150, 16, 64, 4


def kept_tensor_bound(arch: str, e: int) -> int:
    """O(E x heads + N x width): what a layer may keep; E x hidden is > 8x more here."""
    per_edge = HEADS if arch == "gat" else 1
    # Per node, GAT's output layer projects to heads x classes before averaging the heads.
    bound = max(e * per_edge, N_BIG_DEG * max(F_IN, HIDDEN * per_edge))
    assert e * HIDDEN > 8 * bound
    return bound


def dense_graph_model(arch: str, model_cls):
    _, _, block = whole_graph(N_BIG_DEG, 100.0, 6)  # E >> N
    cfg = ModelConfig(arch=arch, layers=2, hidden=HIDDEN, heads=HEADS, dropout=0.5)
    torch.manual_seed(0)
    return block, model_cls(cfg, F_IN, HIDDEN), torch.randn(N_BIG_DEG, F_IN)


@pytest.mark.parametrize("arch", ARCHS)
def test_no_edge_by_hidden_tensor_saved(arch):
    block, model, x = dense_graph_model(arch, GNN)
    model(x, [block, block])  # fill block.cache: per-block, not per-step, state
    gc.collect()
    before = {id(t) for t in live_tensors()}
    out, saved = saved_during(lambda: model(x, [block, block]))
    # Also what Functions hold as attributes (invisible to the hooks) and anything else created.
    live = [t for t in live_tensors() if id(t) not in before]
    bound = kept_tensor_bound(arch, block.num_edges)
    biggest = max(elements(t) for t in saved + live)
    assert biggest <= bound, f"{arch}: a {biggest}-element tensor is kept (E={block.num_edges})"
    del out


@pytest.mark.parametrize("arch", ["sage", "gat", "gin"])
def test_previous_layers_fail_the_saved_tensor_check(arch):
    """The check bites: PyG's gather-scatter convs keep per-edge messages for backward."""
    block, model, x = dense_graph_model(arch, PrevGNN)
    _, saved = saved_during(lambda: model(x, message_graph(block)))
    assert max(elements(t) for t in saved) >= block.num_edges * HIDDEN


def gat_saved_bytes(per_node: float) -> tuple[int, int]:
    n, heads = 150, 4
    _, _, block = whole_graph(n, per_node, 7)
    torch.manual_seed(0)
    layer = GATLayer(16, 32, heads, last=False)
    x = torch.randn(n, 16)
    layer(x, block)
    _, saved = saved_during(lambda: layer(x, block))
    return block.num_edges, sum(elements(t) * t.element_size() for t in saved)


def test_gat_saves_one_float_per_edge_and_head():
    """Marginal saved bytes per edge and head, between two graphs on the same nodes: 4 (alpha)."""
    e1, b1 = gat_saved_bytes(10.0)
    e2, b2 = gat_saved_bytes(80.0)
    per_edge_head = (b2 - b1) / ((e2 - e1) * 4)
    assert per_edge_head == pytest.approx(4.0), per_edge_head


# 4. CSR bag-of-words input ----------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gcn", "sage", "gat"])
def test_sparse_input_matches_dense(arch):
    n, f = 400, 3000
    gen = torch.Generator().manual_seed(8)
    ei, deg, full = whole_graph(n, 6.0, 8)
    x = (torch.rand(n, f, generator=gen) < 0.01).double() * torch.rand(n, f, generator=gen, dtype=F64)
    lean, _ = models(arch, f, 5)
    xs = lean.prepare_input(x)
    assert is_sparse(xs)
    seeds = torch.arange(0, n, 7)
    blocks, inputs = nested_blocks(ei, n, deg, seeds, 2)
    xs_in = x[inputs].to_sparse_csr()
    for bl, dense, sparse in (([full, full], x, xs), (blocks, x[inputs], xs_in)):
        params = list(lean.parameters())
        w = torch.randn(bl[-1].num_dst, 5, dtype=F64)
        out_d = lean(dense, bl)
        g_d = torch.autograd.grad((out_d * w).sum(), params)
        out_s = lean(sparse, bl)
        g_s = torch.autograd.grad((out_s * w).sum(), params)
        torch.testing.assert_close(out_s, out_d, rtol=1e-9, atol=1e-11)
        for a, b in zip(g_s, g_d, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


# 5. No torch_geometric ------------------------------------------------------------------------

def test_models_import_no_torch_geometric():
    code = textwrap.dedent("""
        import sys
        import grappa.models, grappa.models.ops, grappa.models.gnn
        bad = [m for m in sys.modules if m.startswith("torch_geometric")]
        assert not bad, bad
    """)
    trainer = str(Path(grappa.__file__).parents[1])  # this checkout's package, not an installed one
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": trainer})
