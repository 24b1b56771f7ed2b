"""A user's PyG model behind the built-ins' interface: `forward(x, blocks)` on our blocks.

The factory (`model.custom.factory`, user_code.py) is called as

    factory(in_channels=F, out_channels=C, **kwargs [, num_layers=L] [, hidden_channels=H]
            [, dropout=p] [, task="node-classification"] [, mode="full-graph" | "mini-batch"])

where the bracketed ones are passed only when the factory's signature names them and kwargs does
not set them (so `torch_geometric.nn.models:GraphSAGE` is a factory as it is). It returns a
`torch.nn.Module` whose `forward(x, edge_index, ...)` speaks PyG:

- `x` [N, F]: the rows of the worker's local graph (full-graph mode: base + variable chunk +
  halo) or of the sampled subgraph (mini-batch: `n_id` order, seeds first, then hop by hop).
- `edge_index` [2, E] int64, sources in row 0, targets in row 1: every in-edge of the rows the
  model must compute, grouped by the target's hop and sorted by target within it.
- `num_sampled_nodes_per_hop` [L + 1] / `num_sampled_edges_per_hop` [L], when the forward names
  them (PyG's `BasicGNN` does) and the rows are hop-ordered (mini-batch steps, sampled evaluation):
  hop 0 is the seeds, hop h the nodes first reached in h hops; edges of hop h + 1 point into hop h.
  From our blocks, input layer first (block l computes hops 0 .. L-1-l from hops 0 .. L-l):
      nodes[0] = blocks[L-1].num_dst,  nodes[h] = blocks[L-h].num_src - blocks[L-h].num_dst
      edges[0] = |blocks[L-1]|,        edges[h] = |blocks[L-1-h]| - |blocks[L-h]|
  which is PyG's `trim_to_layer` contract: layer i drops the last i hops of rows and edges.
- with `model.custom.adjacency: sparse`, `edge_index` is instead the same edges as a torch CSR
  matrix adj_t [N, N] (row v: v's in-edges, value 1), PyG's transposed-adjacency input, on which
  its GCN, SAGE, GIN and Graph convolutions fuse the gather and the sum into one sparse product
  instead of an edges x width message tensor; no hop counts then (trimming needs an edge_index).
- `global_degree` [N] int64, when the forward names it: each row's in-degree in the whole graph
  (self-loops excluded). PyG's `GCNConv` normalises with the degrees of the edge_index it is
  given, so on a partition a halo row counts degree 0 and a sampled row its sample; pass
  `gcn_norm(edge_index, global_degree)` (global_norm.py) to `GCNConv(normalize=False)` to get
  the whole graph's normalisation, as the built-in GCN does. Without it the model is trained and
  evaluated with the local degrees, as PyG's own NeighborLoader training does.

It returns logits [>= rows, C] whose first rows are the rows asked for: the seeds in mini-batch
mode; in full-graph mode every local row, of which the step takes the seeds (a model may hold
BatchNorm, whose statistics depend on which rows it computes, as a single process computes all).

Exact inference (training's exact evaluation, `grappa predict` / `evaluate`): layer by layer
when the model has `inference_per_layer(layer, x, edge_index, batch_size)` and `num_layers`,
as PyG's `BasicGNN` (jk None or "last"); otherwise one pass of the whole model over the full
L-hop in-neighbourhood of each block of rows (`passes` = 1, layerwise.py).
"""
from __future__ import annotations

import copy
import inspect
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor, nn

from grappa.config import CustomModelConfig, ModelConfig
from grappa.data.blocks import Block
from grappa.models.dropout import swap_dropout
from grappa.models.gnn import GNN
from grappa.models.user_code import ModelCodeError, code_identity, failure, load_factory, module_roots

TASK = "node-classification"
HOP_ARGS = ("num_sampled_nodes_per_hop", "num_sampled_edges_per_hop")
DEGREE_ARG = "global_degree"
# Factory parameters Grappa fills from the model section when the factory names them.
FROM_MODEL = {"num_layers": "layers", "hidden_channels": "hidden", "dropout": "dropout"}


def _parameters(fn: Any) -> tuple[set[str], bool]:
    """(named parameters of `fn`, whether it takes **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def factory_arguments(fn: Any, cfg: ModelConfig, in_dim: int, num_classes: int, mode: str) -> dict[str, Any]:
    """The keywords `fn` is called with (module docstring)."""
    spec = cfg.custom
    assert spec is not None
    names, _ = _parameters(fn)
    args: dict[str, Any] = {"in_channels": in_dim, "out_channels": num_classes}
    for param, field in FROM_MODEL.items():
        if param in names and param not in spec.kwargs:
            args[param] = getattr(cfg, field)
    for param, value in (("task", TASK), ("mode", mode)):
        if param in names:
            args[param] = value
    return {**args, **spec.kwargs}


def edge_index_of(block: Block) -> Tensor:
    """int64 [2, E] (source, target) of a block, cached with it (a full-graph round reuses it)."""
    ei = block.cache.get("edge_index")
    if ei is None:
        ei = block.cache["edge_index"] = torch.stack([block.indices.long(), block.dst_of_edges()])
    return ei


def adjacency_of(block: Block) -> Tensor:
    """The block's transposed adjacency as a torch CSR matrix [num_src, num_src] (row v: v's
    in-edges; rows past num_dst empty), cached with the block."""
    adj = block.cache.get("adj_t")
    if adj is None:
        n, e = block.num_src, block.num_edges
        crow = torch.cat([block.indptr, block.indptr.new_full((n - block.num_dst,), e)])
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            adj = block.cache["adj_t"] = torch.sparse_csr_tensor(crow, block.indices.long(), torch.ones(e), (n, n))
    return adj


def hop_counts(blocks: list[Block]) -> Optional[tuple[list[int], list[int]]]:
    """PyG's (num_sampled_nodes_per_hop, num_sampled_edges_per_hop) of nested blocks (each block's
    outputs the next one's inputs, its edges a prefix of the previous one's); None when the blocks
    are the same graph at every layer (every row computed at every layer)."""
    L = len(blocks)
    if any(a is b for a, b in zip(blocks, blocks[1:])):
        return None
    if any(blocks[i + 1].num_src != blocks[i].num_dst for i in range(L - 1)):
        return None
    nodes = [blocks[L - 1].num_dst] + [blocks[L - h].num_src - blocks[L - h].num_dst for h in range(1, L + 1)]
    edges = [blocks[L - 1].num_edges] + [blocks[L - 1 - h].num_edges - blocks[L - h].num_edges
                                         for h in range(1, L)]
    return nodes, edges


class CustomModel(nn.Module):
    """The user's module (`net`) run on blocks. Its parameters, buffers and state dict are the
    user's own (no prefix), so a model file's state dict loads into the user's class directly."""

    def __init__(self, net: nn.Module, spec: CustomModelConfig, num_layers: int, num_features: int,
                 num_classes: int, code: dict[str, Any], roots: list[Path]) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise ModelCodeError(f"model.custom.factory {spec.factory} returned a {type(net).__name__}, "
                                 "not a torch.nn.Module: return the model")
        if spec.fast_dropout and not isinstance(net, GNN):
            swap_dropout(net)
        self.net = net
        self.factory = spec.factory
        self.sparse = spec.adjacency == "sparse"
        self.num_layers, self.num_features, self.num_classes = num_layers, num_features, num_classes
        self.code = code
        self._roots = roots
        self.context = ""  # said after what failed (smoke_test: "on Grappa's check ...")
        # A built-in (builtin.py) runs on our blocks as they are: no edge_index in between.
        self.native = isinstance(net, GNN)
        names, _ = _parameters(net.forward)
        self._takes = {a for a in (*HOP_ARGS, DEGREE_ARG) if a in names}
        depth = getattr(net, "num_layers", None)
        if isinstance(depth, int) and depth != num_layers:
            raise ModelCodeError(
                f"model.custom.factory {spec.factory} built a model of {depth} layers (its num_layers) "
                f"but model.layers is {num_layers}, the depth Grappa samples and evaluates: set "
                f"model.layers: {depth}")
        self.layerwise = self.native or (callable(getattr(net, "inference_per_layer", None)) and
                                         getattr(net, "jk_mode", None) in (None, "last"))
        if self.native:
            self.widths = net.widths
        elif self.layerwise:
            self._layer_takes_degree = DEGREE_ARG in _parameters(net.inference_per_layer)[0]
            self.widths = self._probe_widths()
        else:
            self.widths = [num_classes]

    # -- what the runtime asks of every model ---------------------------------------------------
    @property
    def passes(self) -> int:
        """Stages of exact inference: one per layer when layer-wise, else one (the k-hop pass)."""
        return self.num_layers if self.layerwise else 1

    @property
    def rows_independent(self) -> bool:
        """Full-graph steps compute every local row unless the model is a built-in that says a
        row's output depends on its neighbourhood only (module docstring)."""
        return self.native and self.net.rows_independent

    @property
    def messages_per_edge(self) -> bool:
        """Whether a forward may hold a row per edge in the input width: assumed of a user's
        model on an edge_index (PyG's MessagePassing gathers x_j before it aggregates); not on
        the sparse adjacency, where PyG's layers fuse gather and sum."""
        return self.net.messages_per_edge if self.native else not self.sparse

    def prepare_input(self, x: Tensor) -> Tensor:
        return self.net.prepare_input(x) if self.native else x

    def state_dict(self, *args, **kwargs):
        return self.net.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.net.load_state_dict(state_dict, strict=strict, assign=assign)

    def _call(self, what: str, fn, *args, **kwargs) -> Tensor:
        try:
            return fn(*args, **kwargs)
        except (ModelCodeError, MemoryError):
            raise
        except Exception as err:
            raise failure(self.factory, what, err, self._roots) from err

    def _checked(self, out: Any, rows: int, what: str) -> Tensor:
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] < rows or \
                out.shape[1] != self.num_classes:
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ModelCodeError(
                f"model.custom.factory {self.factory}: {what} returned {shape}; Grappa needs logits "
                f"[rows, out_channels={self.num_classes}] for at least the {rows} rows asked for, "
                "those rows first (the seeds in mini-batch mode, every input row in full-graph mode)")
        return out[:rows]

    def forward(self, x: Tensor, blocks: list[Block]) -> Tensor:
        """x: [blocks[0].num_src, F] -> logits of the blocks[-1].num_dst rows asked for."""
        if len(blocks) != self.num_layers:
            raise ValueError(f"{self.num_layers} layers need as many blocks, got {len(blocks)}")
        if self.native:
            return self.net(x, blocks)
        first, rows = blocks[0], blocks[-1].num_dst
        ei = adjacency_of(first) if self.sparse else edge_index_of(first)
        kwargs: dict[str, Any] = {}
        hops = hop_counts(blocks) if HOP_ARGS[0] in self._takes and not self.sparse else None
        if hops is not None:
            kwargs.update(zip(HOP_ARGS, hops))
        if DEGREE_ARG in self._takes:
            kwargs[DEGREE_ARG] = first.deg.long()
        what = f"the model's forward on {x.shape[0]:,} rows and {first.num_edges:,} edges{self.context}"
        out = self._call(what, self.net, x, ei, **kwargs)
        return self._checked(out, rows, "the model's forward")

    def layer(self, i: int, h: Tensor, block: Block) -> Tensor:
        """Layer i of exact inference on one block (layer-wise models only)."""
        if self.native:
            return self.net.layer(i, h, block)
        kwargs = {DEGREE_ARG: block.deg.long()} if self._layer_takes_degree else {}
        out = self._call(f"inference_per_layer({i}) on {h.shape[0]:,} rows", self.net.inference_per_layer,
                         i, h, adjacency_of(block) if self.sparse else edge_index_of(block), block.num_dst,
                         **kwargs)
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] < block.num_dst:
            raise ModelCodeError(f"model.custom.factory {self.factory}: inference_per_layer({i}) returned "
                                 f"{tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__}; "
                                 f"expected [batch_size={block.num_dst}, width]")
        return out[:block.num_dst]

    @torch.no_grad()
    def _probe_widths(self) -> list[int]:
        """Each layer's output width, from a two-node graph in eval mode (nothing is changed)."""
        was = self.training
        self.eval()
        try:
            h = torch.zeros(2, self.num_features)
            block = Block(torch.tensor([0, 1, 2]), torch.tensor([1, 0], dtype=torch.int32), 2,
                          torch.ones(2, dtype=torch.int64))
            widths = []
            for i in range(self.num_layers):
                h = self.layer(i, h, block)
                widths.append(int(h.shape[1]))
        finally:
            self.train(was)
        if widths[-1] != self.num_classes:
            raise ModelCodeError(f"model.custom.factory {self.factory}: its last layer "
                                 f"(inference_per_layer({self.num_layers - 1})) outputs {widths[-1]} "
                                 f"columns, not out_channels={self.num_classes}")
        return widths


def build_custom(cfg: ModelConfig, num_features: int, num_classes: int, mode: str,
                 code_path: Optional[str] = None) -> CustomModel:
    """The user's model from its factory, behind the blocks interface. `code_path` overrides
    cfg.custom.code_path (a model file loaded where its code lives elsewhere)."""
    spec = cfg.custom
    assert spec is not None
    path = code_path or spec.code_path
    fn, module = load_factory(spec.factory, path)
    roots = module_roots(module.__name__, path)
    args = factory_arguments(fn, cfg, num_features, num_classes, mode)
    try:
        net = fn(**args)
    except (ModelCodeError, MemoryError):
        raise
    except Exception as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        raise failure(spec.factory, f"calling it with {shown}", err, roots) from None
    return CustomModel(net, spec, cfg.layers, num_features, num_classes, code_identity(module, path), roots)


def smoke_test(model: CustomModel, mode: str, seed: int = 0) -> None:
    """One forward and backward of a copy of `model` on a small random graph, shaped as the job's
    steps are (sampled, hop-ordered blocks in mini-batch mode; every row in full-graph mode), so
    a model whose forward fails says so before any worker starts. Leaves every RNG as it was."""
    from grappa.data.blocks import full_blocks
    from grappa.data.sampling import NeighborSampler
    probe = copy.deepcopy(model)
    probe.train()
    probe.context = " (Grappa's check on a small random graph, before training)"
    with torch.random.fork_rng(devices=[]):
        gen = torch.Generator().manual_seed(seed)
        n = 24
        src = torch.randint(0, n, (4 * n,), generator=gen)
        dst = torch.randint(0, n, (4 * n,), generator=gen)
        keep = src != dst
        pairs = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)
        x = torch.randn(n, model.num_features, generator=gen)
        if mode == "mini-batch":
            sampler = NeighborSampler.from_edge_index(pairs, n, [3] * model.num_layers)
            sub = sampler.sample(torch.arange(4), gen)
            deg = torch.bincount(pairs[1], minlength=n)
            out = probe(x[sub.n_id], sub.blocks(deg.index_select(0, sub.n_id)))
        else:
            out = probe(x, full_blocks(pairs, n, model.num_layers))
        probe._call(f"the backward pass{probe.context}", lambda: out.float().logsumexp(1).sum().backward())
