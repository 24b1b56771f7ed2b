"""The seeded train / val / test choice of the candidates, exact in counts and streamable.

RandomLinkSplit cuts a seeded permutation of the m candidates: n_val = int(valFraction * m)
validation edges, n_test = int(testFraction * m) test edges, the rest training. Here the
permutation is the order of (h(c), c), h a keyed 64-bit hash of the candidate (idhash.hash64,
key from the split seed): pseudo-random, the same in any block, process or memory setting. The
first n_val in that order are validation edges, the next n_test test edges.

The two cuts (the n_val-th and (n_val + n_test)-th (h, c)) are found in two scans without
holding the candidates: a histogram of h's top 16 bits locates each cut's bucket, then only
that bucket's (h, c) pairs (about m / 65536) are gathered and sorted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from grappa.data.idhash import hash64, hash_key

TRAIN, VAL, TEST = 0, 1, 2
_PURPOSE = 11  # the split's use of the seed (idhash.hash_key), apart from every other use
_BUCKET_BITS = 16
_SHIFT = np.uint64(64 - _BUCKET_BITS)

Cut = Optional[tuple[int, int]]  # (h, c) of the first candidate past the cut; None: past the end


def rank_hash(ids: np.ndarray, seed: int) -> np.ndarray:
    return hash64(ids, hash_key(seed, _PURPOSE))


@dataclass
class Cuts:
    val: Cut   # candidates before it are validation edges
    test: Cut  # candidates from `val` to before it are test edges; the rest training edges


def find_cuts(blocks: Iterable[np.ndarray], rescan: Iterable[np.ndarray], ranks: tuple[int, int],
              seed: int) -> Cuts:
    """The (h, c) of rank r (0-based) in the (h, c) order, for each r in `ranks`. `blocks` and
    `rescan`: two scans of the candidates (any order)."""
    hist = np.zeros(1 << _BUCKET_BITS, np.int64)
    for ids in blocks:
        hist += np.bincount((rank_hash(ids, seed) >> _SHIFT).astype(np.int64), minlength=hist.size)
    cum = np.cumsum(hist)
    total = int(cum[-1]) if cum.size else 0
    want = {}  # bucket -> [(rank within the bucket, which cut)]
    for i, r in enumerate(ranks):
        if r < total:
            b = int(np.searchsorted(cum, r, side="right"))
            want.setdefault(b, []).append((r - (int(cum[b - 1]) if b else 0), i))
    found: list[Cut] = [None, None]
    if want:
        buckets = np.array(sorted(want), np.int64)
        hs, cs = [], []
        for ids in rescan:
            h = rank_hash(ids, seed)
            sel = np.isin((h >> _SHIFT).astype(np.int64), buckets)
            hs.append(h[sel])
            cs.append(ids[sel])
        h, c = np.concatenate(hs), np.concatenate(cs)
        for b, asks in want.items():
            in_b = (h >> _SHIFT).astype(np.int64) == b
            hb, cb = h[in_b], c[in_b]
            order = np.lexsort((cb, hb))  # by h, then c
            for k, i in asks:
                found[i] = (int(hb[order[k]]), int(cb[order[k]]))
    return Cuts(found[0], found[1])


def _before(h: np.ndarray, ids: np.ndarray, cut: Cut) -> np.ndarray:
    if cut is None:
        return np.ones(ids.size, bool)
    ch, cc = np.uint64(cut[0]), np.int64(cut[1])
    return (h < ch) | ((h == ch) & (ids < cc))


def assign(ids: np.ndarray, cuts: Cuts, seed: int) -> np.ndarray:
    """uint8 TRAIN / VAL / TEST of each candidate."""
    h = rank_hash(ids, seed)
    val, upto_test = _before(h, ids, cuts.val), _before(h, ids, cuts.test)
    out = np.full(ids.size, TRAIN, np.uint8)
    out[upto_test] = TEST
    out[val] = VAL
    return out
