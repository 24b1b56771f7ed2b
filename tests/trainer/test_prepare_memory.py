"""What one block costs the prepare: the edge pass's buffers per block edge, and a Parquet table
read a batch at a time (not a row group at a time). Bytes counted, never time."""
from __future__ import annotations

import multiprocessing
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grappa.data.sources.arrays import EdgeColumns
from grappa.data.sources.npyio import npy_header
from grappa.data.store.passes import Plan, edge_pass
from grappa.data.store.prepare_progress import Counters
from grappa.data.store.spill import plan_range_bits
from grappa.data.tables.files import Table


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_edge_pass_holds_under_56_bytes_per_block_edge(tmp_path, dtype):
    """A block of ids, a copy without self-loops, then one direction at a time: the range of
    each edge (4 + 2 B), its sort order (8), its packed record (8) and the record sorted (8).
    Widening to int64 and holding both directions together cost 105-113 B per edge."""
    n, e = 100_000, 1 << 19
    rng = np.random.default_rng(0)
    for name in ("s", "d"):
        np.save(tmp_path / f"{name}.npy", rng.integers(0, n, e).astype(dtype))
    (tmp_path / "spill").mkdir()
    plan = Plan(n, 4, 0, np.dtype(np.int32), "float32", plan_range_bits(n, 2 * e, e), e,
                tmp_path, tmp_path / "spill")
    part = EdgeColumns(npy_header(tmp_path / "s.npy"), npy_header(tmp_path / "d.npy"), 0, e, True)
    counters = Counters(multiprocessing.get_context("spawn"))
    tracemalloc.start()
    try:
        assert edge_pass(part, n, True, plan, counters) == e
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    spilled = sum(p.stat().st_size for p in (tmp_path / "spill").iterdir())
    assert spilled == 2 * e * 8 - 16 * int((np.load(tmp_path / "s.npy") == np.load(tmp_path / "d.npy")).sum())
    assert peak < 56 * e, peak / e


def test_a_parquet_row_group_is_read_a_batch_at_a_time(tmp_path):
    """One 400,000-row group (26 MB of float32 features decoded) read in batches of 4,096 rows:
    Arrow holds about a batch, not the group (the dataset scanner held the group)."""
    rows, f = 400_000, 16
    x = np.random.default_rng(0).normal(size=(rows, f)).astype(np.float32)
    table = pa.table({"id": pa.array(np.arange(rows)),
                      "features": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), f)})
    pq.write_table(table, tmp_path / "nodes.parquet", row_group_size=rows)
    del table
    nodes = Table(tmp_path, ["nodes.parquet"], None, "dataset.tables.nodes")
    before, live, seen = pa.total_allocated_bytes(), [], 0  # other tests' buffers may be alive
    for b in nodes.batches(["features"], batch_rows=4096):
        live.append(pa.total_allocated_bytes() - before)
        seen += b.data.num_rows
    assert seen == rows
    assert max(live) < 8 << 20, max(live)
