"""GAT layer (PyG GATConv semantics: self-loops added, LeakyReLU slope 0.2, no attention dropout):

    x'_u = W h_u  (heads x c)
    alpha_uv = softmax over u in N(v) + {v} of LeakyReLU(a_src . x'_u + a_dst . x'_v)   (per head)
    h'_v = || over heads of sum_u alpha_uv x'_u + b   (hidden layers: c = max(1, out // heads))
    h'_v = mean over heads of the same + b             (last layer: c = out)

Memory: the attention is per edge and head, everything else per node. `_Attend` computes softmax
and aggregation in one autograd Function whose only per-edge saved tensor is alpha, so training
keeps 4 bytes per edge per head in float32 (8 in float64; measured by the saved-tensor test); the
self-loop is a dense per-node term, never an edge. The aggregation sum_e alpha_e x'_{src e} and
grad x' = A_alpha^T grad_out are CSR products, one per head (no per-edge message at all; on CPU
faster than gathering edge chunks, whose scatter-add by source dominated the backward);
grad alpha_e = <grad_out[dst e], x'[src e]> runs in edge chunks, so its E x width products exist
one chunk at a time. Transient E x heads arrays (scores, their gradients) live during the call only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from grappa.data.blocks import Block
from grappa.models.ops import dst_of_edges, edge_chunks, glorot_, per_head_matmul, segment_max, segment_sum


class _Attend(torch.autograd.Function):
    """(x' [num_src, H, C], s_src [num_src, H], s_dst [num_dst, H]) -> sum_u alpha_uv x'_u."""

    @staticmethod
    def forward(ctx, x: Tensor, s_src: Tensor, s_dst: Tensor, block: Block, slope: float) -> Tensor:
        nd, src, dst = block.num_dst, block.indices, dst_of_edges(block)
        z = F.leaky_relu(s_src.index_select(0, src) + s_dst.index_select(0, dst), slope)
        z_self = F.leaky_relu(s_src[:nd] + s_dst, slope)
        m = torch.maximum(segment_max(block, z), z_self)  # shift for a stable exp; v's own score bounds it
        alpha = z.sub_(m.index_select(0, dst)).exp_()
        a_self = (z_self - m).exp_()
        den = segment_sum(block, alpha) + a_self
        alpha.div_(den.index_select(0, dst))
        a_self.div_(den)
        out = per_head_matmul(block, alpha, x).add_(x[:nd] * a_self[..., None])
        ctx.block, ctx.slope = block, slope
        ctx.save_for_backward(x, s_src, s_dst, alpha, a_self)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        x, s_src, s_dst, alpha, a_self = ctx.saved_tensors
        block, slope = ctx.block, ctx.slope
        nd, src, dst = block.num_dst, block.indices, dst_of_edges(block)
        g = g.contiguous()
        gx = per_head_matmul(block, alpha, g, transposed=True)  # A_alpha^T g
        gx[:nd] += g * a_self[..., None]
        g_self = (g * x[:nd]).sum(-1)  # d loss / d a_self
        g_alpha = torch.empty_like(alpha)
        for e in edge_chunks(block, x.shape[1] * x.shape[2]):  # <g[dst e], x[src e]>, chunk by chunk
            torch.linalg.vecdot(g.index_select(0, dst[e]), x.index_select(0, src[e]), out=g_alpha[e])
        # Softmax: d z_e = alpha_e (g_alpha_e - c_v), c_v = sum over v's edges and self of alpha g.
        c = segment_sum(block, alpha * g_alpha) + a_self * g_self
        gz = g_alpha.sub_(c.index_select(0, dst)).mul_(alpha)
        gz_self = (g_self - c).mul_(a_self)
        # LeakyReLU: slope where the score was negative, recomputed rather than saved.
        gz = torch.where(s_src.index_select(0, src) + s_dst.index_select(0, dst) > 0, gz, gz * slope)
        gz_self = torch.where(s_src[:nd] + s_dst > 0, gz_self, gz_self * slope)
        g_src = torch.zeros_like(s_src).index_add_(0, src, gz)
        g_src[:nd] += gz_self
        return gx, g_src, segment_sum(block, gz) + gz_self, None, None


class GATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, last: bool, negative_slope: float = 0.2):
        super().__init__()
        self.heads, self.concat, self.negative_slope = heads, not last, negative_slope
        self.per_head = out_dim if last else max(1, out_dim // heads)
        self.in_dim = in_dim
        self.out_dim = self.per_head * heads if self.concat else out_dim
        # PyG's initialisation: glorot weight and attention vectors, zero bias.
        self.weight = nn.Parameter(glorot_(torch.empty(heads * self.per_head, in_dim)))
        self.att_src = nn.Parameter(glorot_(torch.empty(heads, self.per_head)))
        self.att_dst = nn.Parameter(glorot_(torch.empty(heads, self.per_head)))
        self.bias = nn.Parameter(torch.zeros(self.out_dim))

    def forward(self, h: Tensor, block: Block) -> Tensor:
        nd = block.num_dst
        x = F.linear(h, self.weight).view(-1, self.heads, self.per_head)  # h may be CSR
        s_src = (x * self.att_src).sum(-1)
        s_dst = (x[:nd] * self.att_dst).sum(-1)
        out = _Attend.apply(x, s_src, s_dst, block, self.negative_slope)
        out = out.reshape(nd, self.out_dim) if self.concat else out.mean(1)
        return out + self.bias
