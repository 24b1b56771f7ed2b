"""Link prediction: a score for a node pair (u, v) from the two nodes' L-hop embeddings.

The GNN's last layer gives each node an embedding h (width model.hidden); a decoder scores a pair:

    dot       s(u, v) = <h_u, h_v>
    distmult  s(u, v) = sum_i h_u,i r_i h_v,i          (r learnt, starts at 1: the dot product)
    mlp       s(u, v) = w2^T relu(W1 (h_u * h_v) + b1) + b2

**Loss.** Per positive (supervision) edge e = (u, v) with k negatives (u, v'_1), ..., (u, v'_k):

    l_e = [ -log sigma(s(u, v)) - sum_j log(1 - sigma(s(u, v'_j))) ] / (1 + k)

so the unweighted mean of l_e over positives is the mean binary cross-entropy over all (1 + k) E
labelled pairs, the loss of PyG's link-prediction example with k negatives per positive. A step's
contribution weighs l_e per strategy like a seed's loss (reducer.py; `edge_coverage` below).

**Negatives** are uniform: v'_j is drawn uniformly from the nodes the worker owns in the round
(its base and variable chunks, local ids [0, num_owned)), corrupting the destination. Why those:
an owned node's in-edges are all local, so its embedding is computed from its real neighbourhood
(up to its coverage); a halo node has no in-edges here, so its embedding would be an easy negative
made of a truncated neighbourhood, teaching the decoder to tell truncation from non-edges; a remote
node would need its embedding fetched, which Grappa does not do. Chunks are a seeded hash of the
node ids, independent of the graph, so the owned nodes are a uniform random subset of V and a
uniform draw from them is, over the assignment, a uniform draw from V. Negatives are not filtered
against the graph's edges (a uniform draw hits one with probability about E / n^2).

**Edge coverage.** A node's coverage c_v (strategies/grappa/coverage.py) is the share of its
computation graph that is local. l_e depends on h_u and h_v (and on the negatives' h_v'); its
gradient is dl/dh_u dh_u/dtheta + dl/dh_v dh_v/dtheta, each term as complete as its node's
computation graph. Weighting the example by the mean coverage of its two endpoints,

    c_e = (c_u + c_v) / 2,

gives each endpoint's half of the example the weight of that endpoint's completeness: it is the
node weight applied to the two endpoint terms of an example in equal shares, and it reduces to
the node version for a self-pair. Shrinkage and the reducer are unchanged (w_e = lambda c_e +
(1 - lambda) wbar, wbar the mean c_e over the round's positives). docs/method.md derives it.

**Metrics**, as OGB's link evaluators define them:

- MRR (ogbl-citation2): each positive is ranked against its own negatives;
  rank_e = 1 + (#{j: n_j > p_e} + #{j: n_j >= p_e}) / 2, MRR = mean_e 1 / rank_e.
- Hits@K (ogbl-collab): every positive is ranked against one shared negative set; with t_K the
  K-th largest shared negative score, Hits@K = mean_e [p_e > t_K] (1 when there are fewer than K
  negatives).
- AUC: P(p > n) + P(p = n) / 2 over all pairs (positive, shared negative).

Evaluation sums travel as one message per worker, 7 numbers per split (val, test): count, loss
sum, reciprocal-rank sum, hits at 10, 50, 100, AUC sum.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grappa.models.decoder import Decoder

HITS_AT = (10, 50, 100)
EVAL_SPLITS = ("val", "test")
STATS_PER_SPLIT = 3 + len(HITS_AT) + 1  # count, loss, mrr | hits@K ... | auc
EVAL_STATS_LEN = STATS_PER_SPLIT * len(EVAL_SPLITS)


def embedding_width(cfg) -> int:
    """The GNN's output width under this task: the hidden width."""
    return cfg.model.hidden


def attach_decoder(model: nn.Module, cfg) -> nn.Module:
    """The decoder as the model's submodule `decoder`: its parameters then travel, checkpoint and
    are checked with the GNN's (after the GNN's in parameters(): registered last)."""
    model.decoder = Decoder(cfg.link.decoder, embedding_width(cfg))
    return model


def sample_negatives(src: Tensor, num_candidates: int, k: int, gen: torch.Generator) -> Tensor:
    """[E, k] negative destinations, uniform over local ids [0, num_candidates) (the worker's
    owned nodes); the sources are the positives' own."""
    return torch.randint(0, num_candidates, (src.numel(), k), generator=gen)


def pair_scores(decoder: nn.Module, emb: Tensor, pos: Tensor, neg: Tensor) -> tuple[Tensor, Tensor]:
    """Scores of the positives [E] (pos: [2, E] rows of `emb`) and of their negatives [E, k]
    ((pos[0], neg[:, j]))."""
    h_src = emb.index_select(0, pos[0])
    p = decoder(h_src, emb.index_select(0, pos[1]))
    n = decoder(h_src.unsqueeze(1), emb.index_select(0, neg.reshape(-1)).view(*neg.shape, -1))
    return p, n


def example_losses(p: Tensor, n: Tensor) -> Tensor:
    """l_e per positive (reduction none): mean BCE over the positive and its k negatives."""
    pos_term = F.binary_cross_entropy_with_logits(p, torch.ones_like(p), reduction="none")
    neg_term = F.binary_cross_entropy_with_logits(n, torch.zeros_like(n), reduction="none").sum(1)
    return (pos_term + neg_term) / (1 + n.shape[1])


def expected_example_losses(decoder: nn.Module, emb: Tensor, pos: Tensor, k: int,
                            pairs_per_block: int = 1 << 22) -> Tensor:
    """E[l_e] per positive over uniform negatives v'_j drawn from every row of `emb` (the
    candidates: a worker's owned nodes, or every node):

        E[l_e] = [ softplus(-s(u, v)) + k * mean_w softplus(s(u, w)) ] / (1 + k)

    (-log sigma(x) = softplus(-x), -log(1 - sigma(x)) = softplus(x)). The gradient of their mean
    is the objective's own, free of which negatives a step happened to draw: what the fidelity
    harness compares (strategies/grappa/fidelity.py). Scores every (source, candidate) pair in
    blocks of sources recomputed in the backward pass: memory O(pairs_per_block), times the width
    for the MLP decoder."""
    from torch.utils.checkpoint import checkpoint
    p = decoder(emb.index_select(0, pos[0]), emb.index_select(0, pos[1]))
    src, inv = torch.unique(pos[0], return_inverse=True)
    per_pair = emb.shape[1] if decoder.kind == "mlp" else 1
    step = max(1, pairs_per_block // max(1, emb.shape[0] * per_pair))

    def mean_negative(h: Tensor, cand: Tensor) -> Tensor:
        return F.softplus(decoder.all_pairs(h, cand)).mean(1)
    means = [checkpoint(mean_negative, emb.index_select(0, ids), emb, use_reentrant=False)
             for ids in src.split(step)]
    neg = torch.cat(means) if means else p.new_zeros(0)
    return (F.softplus(-p) + k * neg.index_select(0, inv)) / (1 + k)


def num_ranked_first(p: Tensor, n: Tensor) -> int:
    """Positives scored above all their negatives (the training batch's 'accuracy')."""
    return int((p.unsqueeze(1) > n).all(1).sum()) if n.numel() else int(p.numel())


def edge_coverage(cov: Tensor, pos: Tensor) -> Tensor:
    """c_e = (c_u + c_v) / 2 per positive (module docstring)."""
    return (cov.index_select(0, pos[0]) + cov.index_select(0, pos[1])) / 2


# -- metrics -----------------------------------------------------------------------------------

def reciprocal_ranks(p: Tensor, n: Tensor) -> Tensor:
    """1 / rank_e of each positive among its own negatives [E, k] (ogbl-citation2's MRR)."""
    p = p.view(-1, 1)
    optimistic = (n > p).sum(1)
    pessimistic = (n >= p).sum(1)
    return 1.0 / (0.5 * (optimistic + pessimistic).to(torch.float64) + 1.0)


def hits_thresholds(shared_neg: Tensor, ks=HITS_AT) -> dict[int, Optional[float]]:
    """t_K, the K-th largest shared negative score, per K (None: fewer than K negatives, every
    positive counts as a hit, as OGB's evaluator says)."""
    s = torch.sort(shared_neg.to(torch.float64), descending=True).values
    return {k: (float(s[k - 1]) if s.numel() >= k else None) for k in ks}


def hits(p: Tensor, thresholds: dict[int, Optional[float]]) -> dict[int, int]:
    """Positives above t_K, per K."""
    return {k: int(p.numel()) if t is None else int((p.to(torch.float64) > t).sum())
            for k, t in thresholds.items()}


def auc_terms(p: Tensor, shared_sorted: Tensor) -> Tensor:
    """Per positive: (#{negatives below} + #{equal} / 2) / N over the shared negatives (sorted
    ascending); their mean over positives is the AUC."""
    p = p.to(torch.float64).contiguous()
    s = shared_sorted.to(torch.float64).contiguous()
    below = torch.searchsorted(s, p, right=False)
    not_above = torch.searchsorted(s, p, right=True)
    return (below + 0.5 * (not_above - below)).to(torch.float64) / max(1, s.numel())


def split_stats(p: Tensor, n: Tensor, shared_sorted: Tensor,
                thresholds: dict[int, Optional[float]]) -> Tensor:
    """This worker's STATS_PER_SPLIT sums for its positives of one split: p [E] their scores,
    n [E, k] their own negatives' scores, the split's shared negative scores sorted ascending."""
    out = torch.zeros(STATS_PER_SPLIT, dtype=torch.float64)
    if p.numel() == 0:
        return out
    out[0] = p.numel()
    out[1] = float(example_losses(p, n).to(torch.float64).sum())
    out[2] = float(reciprocal_ranks(p, n).sum())
    h = hits(p, thresholds)
    for i, k in enumerate(HITS_AT):
        out[3 + i] = h[k]
    out[3 + len(HITS_AT)] = float(auc_terms(p, shared_sorted).sum())
    return out


def metrics_of(total: Tensor) -> dict:
    """The evaluation record's keys from the summed stats: <split>_loss, _mrr, _hits@K, _auc."""
    out: dict = {}
    for i, split in enumerate(EVAL_SPLITS):
        t = total[i * STATS_PER_SPLIT:(i + 1) * STATS_PER_SPLIT]
        count = float(t[0])
        def mean(x) -> Optional[float]:
            return float(x) / count if count else None
        out[f"{split}_loss"] = mean(t[1])
        out[f"{split}_mrr"] = mean(t[2])
        for j, k in enumerate(HITS_AT):
            out[f"{split}_hits@{k}"] = mean(t[3 + j])
        out[f"{split}_auc"] = mean(t[3 + len(HITS_AT)])
    return out
