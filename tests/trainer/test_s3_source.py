"""s3.source.S3Source's ranged reads (issue 37), on an in-memory bucket: rows of several files come
back as the files hold them, rows closer than GAP_BYTES in one request with the gap counted apart,
and the requests for different files in flight together (a step's new halo rows lie in many
chunks, a few in each: one file after another, each would wait for the last one's round trip)."""
import io
import threading

import numpy as np
import pytest

from grappa.data.errors import ChunkStoreError
from grappa.data.s3.source import GAP_BYTES, PARALLEL, S3Source

WIDE = GAP_BYTES // 4 // 2 + 16  # float32 features: rows wider than half the gap
FILES = [f"chunk-{k:05d}/x.npy" for k in range(3)]


class MemoryBucket:
    """Bucket.get over .npy bytes in memory. The first `together` ranged data requests wait for
    one another (a barrier): they pass only if they are in flight at the same time."""

    where = "s3://memory/"

    def __init__(self, arrays: dict[str, np.ndarray], together: int = 0) -> None:
        self.objects = {}
        for rel, a in arrays.items():
            f = io.BytesIO()
            np.save(f, a)
            self.objects[rel] = f.getvalue()
        self.barrier = threading.Barrier(together, timeout=60) if together else None
        self.lock = threading.Lock()
        self.data_requests: list[tuple[str, int, int]] = []

    def get(self, rel, start=None, length=None, exact=True):
        data = self.objects[rel]
        if start:  # not a header probe (those read from 0)
            with self.lock:
                self.data_requests.append((rel, start, length))
                wait = self.barrier is not None and len(self.data_requests) <= self.barrier.parties
            if wait:
                self.barrier.wait()  # BrokenBarrierError when the others never come
        return data if start is None else data[start:start + length]


def arrays(seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    out = {rel: g.standard_normal((12, WIDE)).astype(np.float32) for rel in FILES}
    out["narrow.npy"] = g.standard_normal((200, 16)).astype(np.float32)
    return out


def test_rows_of_several_files_come_as_the_files_hold_them_gaps_counted_apart():
    a = arrays()
    source = S3Source(MemoryBucket(a))
    reads = [(FILES[0], np.array([1, 5])), (FILES[1], np.array([0])), (FILES[2], np.array([2, 3, 11])),
             ("narrow.npy", np.array([0, 10, 100])), (FILES[1], np.array([], dtype=np.int64))]
    got, over = source.take_many(reads)
    for (rel, idx), rows in zip(reads, got):
        np.testing.assert_array_equal(rows, a[rel][idx])
    # the wide rows are a request each (2 and 3 adjacent: one); the narrow ones are within a gap
    # of one another: one request from row 0 to 100, 98 rows read besides
    assert over == (101 - 3) * 16 * 4
    assert sorted((r, n) for r, _, n in source.bucket.data_requests) == sorted(
        [(FILES[0], WIDE * 4)] * 2 + [(FILES[1], WIDE * 4), (FILES[2], 2 * WIDE * 4), (FILES[2], WIDE * 4),
         ("narrow.npy", 101 * 16 * 4)])
    one, over_one = source.take("narrow.npy", np.array([0, 10, 100]))
    np.testing.assert_array_equal(one, got[3])
    assert over_one == over


def test_the_requests_for_different_files_are_in_flight_together():
    assert PARALLEL >= len(FILES)
    a = arrays(1)
    bucket = MemoryBucket(a, together=len(FILES))  # one row of each file: three requests at once
    got, _ = S3Source(bucket).take_many([(rel, np.array([4])) for rel in FILES])
    assert [r for r, _, _ in sorted(bucket.data_requests)] == FILES
    for rel, rows in zip(FILES, got):
        np.testing.assert_array_equal(rows, a[rel][[4]])


def test_a_row_past_the_file_is_refused_naming_the_object():
    source = S3Source(MemoryBucket(arrays()))
    with pytest.raises(ChunkStoreError, match=r"row 12 is past s3://memory/chunk-00002/x.npy's 12 rows"):
        source.take_many([(FILES[0], np.array([1])), (FILES[2], np.array([3, 12]))])
    assert source.bucket.data_requests == []  # refused before any request
