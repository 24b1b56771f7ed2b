"""Seeded randomness that is a pure function of a node id: no table, no state, any block order.

Streaming preparation must agree on "which chunk owns node v" (and R-MAT on "what is v's new
id") in every process and every block without holding an O(n) table. Both come from a keyed
bijection of [0, n); per-node draws (R-MAT latents, splits) from a keyed 64-bit hash.
"""
from __future__ import annotations

import numpy as np

_ROUNDS = 4
_CACHE_BLOCK = 1 << 14  # ids per inner step: temporaries stay in cache (3-5x faster than whole arrays)


def _u64(word: int) -> np.uint64:
    return np.uint64(word)


class IdPermutation:
    """A seeded bijection of [0, n), evaluated per id in O(1) memory.

    On b = bits(n - 1) bits, each of 4 rounds is v <- ((v * m_i) mod 2^b), v ^= v >> ceil(b/2),
    v <- (v + a_i) mod 2^b (m_i odd): each step is invertible, so the round is a bijection of
    [0, 2^b). Ids that land in [n, 2^b) walk the cycle (apply it again) until they fall back in
    [0, n), which makes the whole a bijection of [0, n); 2^b < 2n keeps the walk short.
    """

    def __init__(self, n: int, seed: int, purpose: int) -> None:
        if n < 1:
            raise ValueError(f"IdPermutation needs n >= 1, got {n}")
        self.n = n
        self.bits = max(1, (n - 1).bit_length())
        words = np.random.SeedSequence([seed, purpose]).generate_state(2 * _ROUNDS, dtype=np.uint64)
        self._mul = words[:_ROUNDS] | np.uint64(1)
        self._add = words[_ROUNDS:]
        self._mask = np.uint64((1 << self.bits) - 1)
        self._shift = np.uint64((self.bits + 1) // 2)

    def _round_trip(self, v: np.ndarray) -> np.ndarray:
        for mul, add in zip(self._mul, self._add):
            v *= mul
            v &= self._mask
            v ^= v >> self._shift
            v += add
            v &= self._mask
        return v

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """pi(ids) as int64; ids must lie in [0, n)."""
        ids = np.asarray(ids)
        flat, out = ids.reshape(-1), np.empty(ids.size, dtype=np.int64)
        for lo in range(0, ids.size, _CACHE_BLOCK):
            out[lo:lo + _CACHE_BLOCK] = self._apply(flat[lo:lo + _CACHE_BLOCK])
        return out.reshape(ids.shape)

    def _apply(self, ids: np.ndarray) -> np.ndarray:
        v = self._round_trip(ids.astype(np.uint64))
        out = v >= np.uint64(self.n)
        while out.any():
            idx = np.flatnonzero(out)
            w = self._round_trip(v[idx])
            v[idx] = w
            out[idx] = w >= np.uint64(self.n)
        return v.astype(np.int64)


def hash64(ids: np.ndarray, key: int) -> np.ndarray:
    """A keyed 64-bit hash per id (splitmix64's finaliser over id + key * golden ratio)."""
    ids = np.asarray(ids)
    flat, out = ids.reshape(-1), np.empty(ids.size, dtype=np.uint64)
    offset = np.uint64((key * 0x9E3779B97F4A7C15) % (1 << 64))
    for lo in range(0, ids.size, _CACHE_BLOCK):
        out[lo:lo + _CACHE_BLOCK] = _mix(flat[lo:lo + _CACHE_BLOCK].astype(np.uint64) + offset)
    return out.reshape(ids.shape)


def _mix(z: np.ndarray) -> np.ndarray:
    z ^= z >> _u64(30)
    z *= _u64(0xBF58476D1CE4E5B9)
    z ^= z >> _u64(27)
    z *= _u64(0x94D049BB133111EB)
    z ^= z >> _u64(31)
    return z


def hash_key(seed: int, purpose: int) -> int:
    """A hash key derived from (seed, purpose), so different uses of one seed do not correlate."""
    return int(np.random.SeedSequence([seed, purpose]).generate_state(1, dtype=np.uint64)[0])
