"""Sparse operations on a block that the layers share, none of which materialises an E x width tensor.

`block_matmul(op, h)` computes out[v] = sum over edges e = (u -> v) of w_e h[u] as one CSR x dense
product; its backward is one product with the transposed CSR, built once per block (torch's own CSR
backward is ~3x slower). Per-edge weights that depend only on the block (GCN normalisation, the
SAGE mean) become an `Operator` cached in `block.cache`, so a block reused every step pays once.

What the cache holds per block (int32 indices): the transpose's columns and permutation and each
edge's output row, 12 bytes per edge, plus 2 values per edge per operator (GCN: 8 bytes in float32).
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from grappa.data.blocks import Block
from grappa.models.sparse_input import is_sparse

# Per-edge loops (GAT's attention gradient) form (chunk x width) temporaries of this many elements:
# 1 MiB of float32, the fastest of 2^15..2^20 on a 1M-edge graph (smaller chunks pay per-call
# overhead, larger ones fall out of cache).
CHUNK_ELEMENTS = 1 << 18


# CSR x dense products gather input rows at random; on slabs this many columns wide the gathered
# rows stay in cache: 128 columns as four 32-wide products measured 1.7x faster (1M edges, 100k rows).
SPMM_COLUMNS = 32


class Operator(NamedTuple):
    """A block's weighted adjacency (num_dst x num_src, CSR) and its transpose (for backward)."""
    a: Tensor
    at: Tensor


def _csr(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta": CSR @ dense is stable
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape)


def cached(block: Block, key, make: Callable):
    """block.cache[key], computed by make() the first time."""
    value = block.cache.get(key)
    if value is None:
        value = block.cache[key] = make()
    return value


def _index_dtype(block: Block) -> torch.dtype:
    # int32 when it fits: half the memory of int64 and the index type MKL's CSR kernels take.
    small = block.indices.dtype == torch.int32 and block.num_edges < 2**31
    return torch.int32 if small else torch.int64


def structure(block: Block) -> tuple[Tensor, Tensor]:
    """(crow, col) of the block in one index dtype, as torch's CSR tensors want."""
    def make():
        dt = _index_dtype(block)
        return block.indptr.to(dt), block.indices.to(dt)
    return cached(block, "csr", make)


def transpose(block: Block) -> tuple[Tensor, Tensor, Tensor]:
    """(crow, col, perm) of the transposed block (rows = input rows): transposed entry i is the
    block's edge perm[i]."""
    def make():
        dt = _index_dtype(block)
        src = block.indices.long()
        perm = torch.argsort(src, stable=True)
        crow = torch.zeros(block.num_src + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(src, minlength=block.num_src), 0, out=crow[1:])
        return crow.to(dt), dst_of_edges(block)[perm], perm.to(dt)
    return cached(block, "csr_t", make)


def dst_of_edges(block: Block) -> Tensor:
    """Output row of every edge, CSR order (cached: GAT reads it every step)."""
    return cached(block, "dst", lambda: block.dst_of_edges().to(_index_dtype(block)))


def operator(block: Block, key: str, dtype: torch.dtype, edge_values: Callable[[], Tensor]) -> Operator:
    """The block's adjacency with per-edge values `edge_values()` (CSR order), built once per block,
    `key` and dtype."""
    def make():
        values = edge_values().to(dtype)
        crow, col = structure(block)
        tcrow, tcol, perm = transpose(block)
        return Operator(_csr(crow, col, values, (block.num_dst, block.num_src)),
                        _csr(tcrow, tcol, values.index_select(0, perm), (block.num_src, block.num_dst)))
    return cached(block, (key, dtype), make)


def _csr_mm(a: Tensor, h: Tensor) -> Tensor:
    out = h.new_empty(a.shape[0], h.shape[1])
    return torch.addmm(out, a, h, beta=0, out=out)  # beta=0 ignores `out`'s content: no zero fill


def spmm(a: Tensor, h: Tensor) -> Tensor:
    """CSR `a` times dense `h`, SPMM_COLUMNS columns at a time."""
    if h.shape[1] <= SPMM_COLUMNS:
        return _csr_mm(a, h.contiguous())
    return torch.cat([_csr_mm(a, h[:, i:i + SPMM_COLUMNS].contiguous())
                      for i in range(0, h.shape[1], SPMM_COLUMNS)], dim=1)


class _BlockMatmul(torch.autograd.Function):
    # The operator is a constant of the block: nothing is saved for backward but a reference to it.
    @staticmethod
    def forward(ctx, h: Tensor, op: Operator) -> Tensor:
        ctx.op = op
        return spmm(op.a, h)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return spmm(ctx.op.at, grad), None


def block_matmul(op: Operator, h: Tensor) -> Tensor:
    """out[v] = sum over in-edges e = (u -> v) of value_e * h[u]; h dense [num_src, F]."""
    return _BlockMatmul.apply(h.contiguous(), op)


def per_head_matmul(block: Block, values: Tensor, x: Tensor, transposed: bool = False) -> Tensor:
    """out[v, h] = sum over in-edges e = (u -> v) of values[e, h] x[u, h] ([num_dst, H, C]);
    transposed: the product with the transpose, out[u, h] = sum over u's out-edges ([num_src, H, C]).
    One CSR product per head: no [E, C] message is ever formed. Not differentiable (GAT's
    Function calls it in forward and backward)."""
    if transposed:
        crow, col, perm = transpose(block)
        values, shape = values.index_select(0, perm), (block.num_src, block.num_dst)
    else:
        (crow, col), shape = structure(block), (block.num_dst, block.num_src)
    out = x.new_empty(shape[0], x.shape[1], x.shape[2])
    for h in range(x.shape[1]):
        out[:, h] = spmm(_csr(crow, col, values[:, h].contiguous(), shape), x[:, h])
    return out


def sum_operator(block: Block, dtype: torch.dtype) -> Operator:
    """Every edge weighted 1: out[v] = sum of the in-neighbours' rows."""
    return operator(block, "sum", dtype, lambda: torch.ones(block.num_edges))


def mean_operator(block: Block, dtype: torch.dtype) -> Operator:
    """Edge u -> v weighted 1 / (in-edges of v in the block): out[v] = their mean, 0 if none."""
    def values():
        local = block.local_in_degree().to(torch.float64).clamp(min=1)
        return (1.0 / local)[dst_of_edges(block)]
    return operator(block, "mean", dtype, values)


def segment_sum(block: Block, values: Tensor) -> Tensor:
    """Per output row, the sum of `values` ([E, ...], CSR order) over its in-edges."""
    return torch.segment_reduce(values, "sum", offsets=block.indptr, axis=0)


def segment_max(block: Block, values: Tensor) -> Tensor:
    """Per output row, the max of `values` over its in-edges (-inf where none)."""
    return torch.segment_reduce(values, "max", offsets=block.indptr, axis=0)


def edge_chunks(block: Block, width: int):
    """Edge ranges of at most CHUNK_ELEMENTS // width edges (one chunk x width temporary each)."""
    step = max(1, CHUNK_ELEMENTS // max(1, width))
    return (slice(s, min(s + step, block.num_edges)) for s in range(0, block.num_edges, step))


def glorot_(w: Tensor) -> Tensor:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) over the last two dimensions (PyG's glorot)."""
    bound = math.sqrt(6.0 / (w.size(-2) + w.size(-1)))
    with torch.no_grad():
        return w.uniform_(-bound, bound)


def cut_rows(block: Block) -> Tensor | None:
    """Output rows whose in-neighbourhood the block cut whole (global in-degree > 0, none in the
    block) when `block.cut_estimate` asks them estimated, as int64 ids (cached); else None. A layer
    then counts each such row's d in-neighbours as copies of the row itself: with nothing of the
    neighbourhood on the worker, the node's own input is the estimate at hand."""
    if block.cut_estimate is None:
        return None
    def make() -> Tensor:
        deg = block.deg[:block.num_dst]
        return torch.nonzero((deg > 0) & (block.local_in_degree() == 0)).view(-1)
    return cached(block, "cut_rows", make)


def with_cut_rows(agg: Tensor, h: Tensor, cut: Tensor | None, times: Tensor | None = None) -> Tensor:
    """`agg` with each cut row's own row of `h` (dense) added, `times` times (default once)."""
    if cut is None or cut.numel() == 0:
        return agg
    own = h.index_select(0, cut)
    return agg.index_add(0, cut, own if times is None else own * times[:, None].to(own.dtype))


def rows(h: Tensor, k: int) -> Tensor:
    """The first k rows of dense or CSR `h` (a view; a CSR slice shares its arrays)."""
    if not is_sparse(h):
        return h[:k]
    crow = h.crow_indices()[:k + 1]
    end = int(crow[-1])
    return _csr(crow, h.col_indices()[:end], h.values()[:end], (k, h.shape[1]))
