"""What a worker's fetch (data/local_copy.py) reads of a store in a bucket, by ranged GETs.

A chunk file copied whole is one GET, streamed. Scattered rows (a halo's feature rows, indptr
entries) are read as ranges: rows whose gap is at most GAP_BYTES are read together in one
request, since a request costs a round trip and the gap's bytes cost less below that; the gap
bytes read are counted apart (`over_read`), so the counts say what crossed the link. Ranges are
requested by PARALLEL threads at once, in ascending order of offset, those of several files
together (`take_many`: a step's new halo rows lie in many chunks, a few in each, and requested
file by file they would wait for one another's round trips).

A file's .npy header is read once per process (its first HEADER_PROBE bytes, more if longer)
and checked against the manifest like a local file's. A file the bucket also holds packed
(packed.py; its index read once a process) is copied from its packed object, one GET bringing
its header and its data: `copy` returns the bytes that crossed for its data.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np

from grappa.data.errors import ChunkStoreError
from grappa.data.s3 import packed
from grappa.data.s3.bucket import Bucket
from grappa.util.npy import parse_header

GAP_BYTES = 1 << 16
MAX_RANGE = 1 << 23   # bytes a request at most (a long run of rows is split)
PARALLEL = 8
HEADER_PROBE = 256  # np.save's headers are 128 bytes for any array the store holds


def runs_of(idx: np.ndarray, row_bytes: int, gap_bytes: int = GAP_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """The requests that read rows idx (ascending, distinct) of rows of `row_bytes`: arrays a, b,
    idx[a:b] read in one range from idx[a] to idx[b - 1]; a new one where the gap between two rows
    exceeds `gap_bytes` (0: where rows are not adjacent) or the range MAX_RANGE."""
    gap_rows = max(1, gap_bytes // max(row_bytes, 1))
    max_rows = max(1, MAX_RANGE // max(row_bytes, 1))
    cut = np.flatnonzero(np.diff(idx) > gap_rows) + 1
    a, b = np.r_[0, cut].astype(np.int64), np.r_[cut, idx.size].astype(np.int64)
    if not idx.size:
        return a[:0], b[:0]
    long = np.flatnonzero(idx[b - 1] - idx[a] >= max_rows)
    if not long.size:
        return a, b
    firsts = []
    for r in long.tolist():  # split a run longer than MAX_RANGE
        lo, end = int(a[r]), int(b[r])
        while lo < end:
            firsts.append(lo)
            lo = min(end, max(int(np.searchsorted(idx, idx[lo] + max_rows, "left")), lo + 1))
    a = np.union1d(a, np.asarray(firsts, dtype=np.int64))
    return a, np.r_[a[1:], idx.size].astype(np.int64)


class _ShortHeader(ChunkStoreError):
    """The bytes end before a .npy header does (or are no header)."""


def _parse_header(head: bytes, where: str) -> tuple[np.dtype, tuple, int]:
    """(dtype, shape, data offset) of the .npy header that `head` starts with."""
    try:
        dtype, shape, fortran, offset = parse_header(head)
    except ValueError as err:
        raise _ShortHeader(f"{where} is not a .npy file ({err}); prepare the store in the bucket again") from None
    if fortran:
        raise ChunkStoreError(f"{where} is in Fortran order, which no store writes; prepare the store "
                              "in the bucket again")
    return dtype, shape, offset


class S3Source:
    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self._headers: dict[str, tuple[np.dtype, tuple, int]] = {}

    def packed_bytes(self, rel: str) -> int | None:
        """The bytes of `rel`'s packed object (None: the bucket holds none: read it as it lies)."""
        return self.bucket.packed().get(rel)

    def header(self, rel: str) -> tuple[np.dtype, tuple, int]:
        """(dtype, shape, data offset) of the object's .npy header."""
        if rel not in self._headers:
            probe = HEADER_PROBE
            while True:
                head = self.bucket.get(rel, 0, probe, exact=False)
                try:
                    self._headers[rel] = _parse_header(head, f"{self.bucket.where}{rel}")
                except _ShortHeader:
                    if len(head) == probe and probe < (1 << 20):
                        probe *= 8  # a header longer than the probe
                        continue
                    raise
                break
        return self._headers[rel]

    def copy(self, rel: str, fo, on_data: Callable[[bytes], None], on_read: Callable[[int], None]) -> int:
        """The whole file into fo, from its packed object if there is one; on_data sees its data
        (the bytes after the header), on_read the count of each piece of it that crossed (packed:
        as packed); returns their sum."""
        if self.packed_bytes(rel) is not None:
            where = f"{self.bucket.where}{rel}{packed.KEY_SUFFIX}"
            header, n = packed.copy_unpacked(self.bucket.stream(rel + packed.KEY_SUFFIX, 1 << 22),
                                             fo, on_data, on_read, where)
            self._headers.setdefault(rel, _parse_header(header, where))
            return n
        offset = self.header(rel)[2]
        seen = n = 0
        for buf in self.bucket.stream(rel, 1 << 22):
            fo.write(buf)
            data = buf[max(0, offset - seen):]
            if data:
                on_data(data)
                on_read(len(data))
                n += len(data)
            seen += len(buf)
        return n

    def read_all(self, rel: str) -> np.ndarray:
        dtype, shape, offset = self.header(rel)
        size = int(np.prod(shape)) * dtype.itemsize
        return np.frombuffer(self.bucket.get(rel, offset, size), dtype=dtype).reshape(shape).copy()

    def take(self, rel: str, idx: np.ndarray) -> tuple[np.ndarray, int]:
        """Rows idx (ascending, distinct) of the object's array, and the gap bytes read besides."""
        (rows,), over = self.take_many([(rel, idx)])
        return rows, over

    def take_many(self, reads: Sequence[tuple[str, np.ndarray]]) -> tuple[list[np.ndarray], int]:
        """take() of several objects, their ranges requested together; the rows of each, and the
        gap bytes read besides."""
        outs, runs = [], []  # runs: (which read, first index into its idx, last + 1)
        for i, (rel, idx) in enumerate(reads):
            dtype, shape, offset = self.header(rel)
            row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
            outs.append(np.empty((idx.size, *shape[1:]), dtype=dtype))
            if not idx.size:
                continue
            if idx[-1] >= shape[0] or idx[0] < 0:
                raise ChunkStoreError(f"row {int(idx[-1])} is past {self.bucket.where}{rel}'s {shape[0]} rows")
            a, b = runs_of(idx, row)
            runs += [(i, x, y) for x, y in zip(a.tolist(), b.tolist())]

        def fetch(run: tuple[int, int, int]) -> int:
            i, a, b = run
            rel, idx = reads[i]
            dtype, shape, offset = self.header(rel)
            row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
            lo, hi = int(idx[a]), int(idx[b - 1]) + 1
            buf = np.frombuffer(self.bucket.get(rel, offset + lo * row, (hi - lo) * row), dtype=dtype)
            outs[i][a:b] = buf.reshape((hi - lo, *shape[1:]))[idx[a:b] - lo]
            return (hi - lo - (b - a)) * row

        if not runs:
            return outs, 0
        with ThreadPoolExecutor(min(PARALLEL, len(runs))) as pool:
            over = sum(pool.map(fetch, runs))
        return outs, over
