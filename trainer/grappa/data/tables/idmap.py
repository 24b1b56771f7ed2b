"""The out-of-core id map: a user's node ids (strings, or integers of any range) -> dense ids.

A node's dense id is its row in the nodes table (files in sorted path order), so node rows stream
into the store in id order as they are. Finding the dense id of an edge's endpoint is a join of
the edges table with the nodes table on the id, done out of core in hash partitions:

1. nodes: every id goes, with its row, into the run file of its partition (a hash of the id);
2. edges by destination: (dst, src) into the run of dst's partition;
3. per partition: its nodes (a few million at most) and its edges' destinations are joined in
   memory (pyarrow's hash lookup, exact on the ids themselves), duplicate node ids found there;
   (src, dense dst) go into the run of src's partition;
4. per partition: sources joined the same way; (dense src, dense dst) appended to two .npy files
   the store's edge pass reads like the arrays format's src/dst files.

Memory is one partition at a time, whatever the table sizes: the partition count is chosen so
that a partition holds about `part_rows` rows. Runs are Arrow IPC streams in the store's staging
folder: an interrupted or refused prepare leaves nothing behind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from grappa.data.errors import DatasetError

MAX_PARTITION_BITS = 10  # 1024 run files at most per run set


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on uint64."""
    with np.errstate(over="ignore"):
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


_HASH_BLOCK = 1 << 15       # strings hashed at a time: the per-byte temporaries stay small
_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2^64
_BASE_INV = np.uint64(pow(int(_BASE), -1, 1 << 64))
_powers: dict[str, np.ndarray] = {"up": np.ones(1, np.uint64), "down": np.ones(1, np.uint64)}


def _power_tables(size: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE^j and BASE^-j modulo 2^64 for j < size (grown on demand, kept)."""
    if len(_powers["up"]) < size:
        size = max(size, 2 * len(_powers["up"]))
        with np.errstate(over="ignore"):
            _powers["up"] = np.cumprod(np.concatenate([[np.uint64(1)], np.full(size - 1, _BASE)]), dtype=np.uint64)
            _powers["down"] = np.cumprod(np.concatenate([[np.uint64(1)], np.full(size - 1, _BASE_INV)]),
                                         dtype=np.uint64)
    return _powers["up"], _powers["down"]


def string_hash(arr: pa.Array) -> np.ndarray:
    """A 64-bit hash of each string of `arr` (no nulls), from all its bytes: for partitioning
    only, never taken as the id (equality is always decided on the strings themselves).

    A polynomial hash sum_k b_k BASE^k (mod 2^64) of each string's bytes b_0.., computed for a
    block of strings at once from one running sum over the block's bytes (byte j weighted by
    BASE^j): a string's hash is the difference of two running sums, times BASE^-start. Three
    array operations per byte."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    out = np.zeros(n, dtype=np.uint64)
    if n == 0:
        return out
    _, off_buf, data_buf = arr.buffers()[:3]
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(off_buf, dtype=np.int64 if wide else np.int32)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    for a in range(0, n, _HASH_BLOCK):
        b = min(n, a + _HASH_BLOCK)
        off = offsets[a:b + 1].astype(np.int64)
        lo, hi = int(off[0]), int(off[-1])
        up, down = _power_tables(hi - lo + 1)
        running = np.zeros(hi - lo + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum(data[lo:hi] * up[:hi - lo], out=running[1:])
            rel = off - lo
            h = (running[rel[1:]] - running[rel[:-1]]) * down[rel[:-1]]
            h += np.diff(off).astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
        out[a:b] = _mix(h)
    return out


def int_hash(arr: pa.Array) -> np.ndarray:
    values = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
    return _mix(values.view(np.uint64).copy())


def id_hash(arr: pa.Array) -> np.ndarray:
    return int_hash(arr) if pa.types.is_integer(arr.type) else string_hash(arr)


def partition_bits(rows: int, part_rows: int) -> int:
    """Bits of the partition number: 2^bits partitions of about `part_rows` rows each."""
    parts = max(1, -(-rows // max(1, part_rows)))
    return min(MAX_PARTITION_BITS, (parts - 1).bit_length())


def partition_of(arr: pa.Array, bits: int) -> np.ndarray:
    if bits == 0:
        return np.zeros(len(arr), dtype=np.int64)
    return (id_hash(arr) >> np.uint64(64 - bits)).astype(np.int64)


class RunSet:
    """2^bits run files (Arrow IPC streams) of rows sent by partition, buffered up to
    `flush_rows` rows in all before they are written."""

    def __init__(self, folder: Path, name: str, bits: int, schema: pa.Schema, flush_rows: int) -> None:
        self.folder, self.name, self.bits, self.schema = folder, name, bits, schema
        self.flush_rows = flush_rows
        self.parts = 1 << bits
        self._buffered: dict[int, list[pa.RecordBatch]] = {}
        self._rows = 0
        self._writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
        self._sinks: dict[int, pa.NativeFile] = {}
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, p: int) -> Path:
        return self.folder / f"{self.name}-{p:04d}.arrows"

    def add(self, part: np.ndarray, columns: list[pa.Array]) -> None:
        if not len(part):
            return
        order = np.argsort(part, kind="stable")
        batch = pa.record_batch([c.take(pa.array(order)) for c in columns], schema=self.schema)
        bounds = np.searchsorted(part[order], np.arange(self.parts + 1))
        for p in np.flatnonzero(np.diff(bounds)):
            lo, hi = int(bounds[p]), int(bounds[p + 1])
            self._buffered.setdefault(int(p), []).append(batch.slice(lo, hi - lo))
        self._rows += len(part)
        if self._rows >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        for p, batches in self._buffered.items():
            if p not in self._writers:
                self._sinks[p] = pa.OSFile(str(self.path(p)), "wb")
                self._writers[p] = pa.ipc.new_stream(self._sinks[p], self.schema)
            self._writers[p].write_table(pa.Table.from_batches(batches, self.schema).combine_chunks())
        self._buffered, self._rows = {}, 0

    def close(self) -> None:
        self.flush()
        for p, w in self._writers.items():
            w.close()
            self._sinks[p].close()
        self._writers, self._sinks = {}, {}

    def read(self, p: int) -> pa.Table:
        path = self.path(p)
        if not path.exists():
            return self.schema.empty_table()
        with pa.OSFile(str(path), "rb") as f:
            table = pa.ipc.open_stream(f).read_all()
        return table.combine_chunks()

    def remove(self, p: int) -> None:
        self.path(p).unlink(missing_ok=True)


def lookup(values: pa.Array, ids: pa.Array, rows: np.ndarray) -> np.ndarray:
    """Dense id (int64) of each of `values` among a partition's node `ids` (at `rows`); -1 for
    a value not there."""
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    if not len(ids):
        return np.full(len(values), -1, dtype=np.int64)
    at = pc.index_in(values, value_set=ids)
    idx = np.asarray(at.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.where(idx >= 0, rows[np.maximum(idx, 0)], -1)


def first_duplicate(ids: pa.Array, rows: np.ndarray) -> Optional[tuple[object, int, int]]:
    """(id, its first row, the row that repeats it) of an id listed twice in a partition (the
    repeat that comes first in the table), or None. One hash lookup of the ids among themselves:
    an id whose first occurrence is elsewhere is a repeat."""
    if len(ids) < 2:
        return None
    first = np.asarray(pc.index_in(ids, value_set=ids).to_numpy(zero_copy_only=False), dtype=np.int64)
    repeat = np.flatnonzero(first != np.arange(len(ids)))
    if not repeat.size:
        return None
    j = repeat[np.argmin(rows[repeat])]
    return ids[int(j)].as_py(), int(rows[first[j]]), int(rows[j])
