"""The out-of-core id map (grappa/data/tables/idmap.py): partitioning, exact lookups, duplicates,
and memory bounded by a partition, not by the number of ids."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from grappa.data.tables import idmap


def test_string_hash_is_deterministic_and_spreads():
    ids = pa.array([f"acct-{i:07d}" for i in range(50_000)] + ["", "é", "a" * 300])
    h = idmap.string_hash(ids)
    assert h.dtype == np.uint64 and len(np.unique(h)) == len(ids)
    np.testing.assert_array_equal(h, idmap.string_hash(ids.cast(pa.large_string())))
    np.testing.assert_array_equal(h[10:20], idmap.string_hash(ids.slice(10, 10)))  # offsets of a slice
    parts = idmap.partition_of(ids, 4)
    counts = np.bincount(parts, minlength=16)
    assert counts.min() > 0.8 * len(ids) / 16 and counts.max() < 1.2 * len(ids) / 16


def test_string_hash_uses_every_byte():
    middle = pa.array([f"https://example.com/users/{i:06d}/profile/main" for i in range(20_000)])
    counts = np.bincount(idmap.partition_of(middle, 3), minlength=8)
    assert counts.min() > 0.8 * 20_000 / 8, counts
    assert idmap.string_hash(pa.array(["ab"]))[0] != idmap.string_hash(pa.array(["ba"]))[0]


def test_partition_bits():
    assert idmap.partition_bits(10, 100) == 0
    assert idmap.partition_bits(1000, 100) == 4
    assert idmap.partition_bits(10**12, 1) == idmap.MAX_PARTITION_BITS


def test_lookup_is_exact_and_misses_are_minus_one():
    ids = pa.array(["b", "a", "c"], pa.large_string())
    rows = np.array([10, 11, 12])
    got = idmap.lookup(pa.array(["a", "zz", "c", "a"], pa.large_string()), ids, rows)
    np.testing.assert_array_equal(got, [11, -1, 12, 11])
    big = pa.array(np.array([-(2**62), 5, 2**62], dtype=np.int64))
    np.testing.assert_array_equal(idmap.lookup(pa.array(np.array([2**62, 4], np.int64)), big, np.arange(3)), [2, -1])


def test_first_duplicate_names_both_rows():
    ids = pa.array(["x", "y", "z", "y", "x"])
    assert idmap.first_duplicate(ids, np.array([0, 1, 2, 3, 4])) == ("y", 1, 3)
    assert idmap.first_duplicate(ids, np.array([0, 1, 2, 8, 4])) == ("x", 0, 4)  # the earliest repeat row
    assert idmap.first_duplicate(pa.array(["x", "y"]), np.array([0, 1])) is None


def test_runs_keep_every_row_by_partition(tmp_path):
    schema = pa.schema([("id", pa.large_string()), ("row", pa.int64())])
    runs = idmap.RunSet(tmp_path, "t", 3, schema, flush_rows=1000)
    ids = pa.array([f"n{i}" for i in range(5000)], pa.large_string())
    for lo in range(0, 5000, 700):
        piece = ids.slice(lo, 700)
        runs.add(idmap.partition_of(piece, 3), [piece, pa.array(np.arange(lo, lo + len(piece)))])
    runs.close()
    seen = []
    for p in range(8):
        t = runs.read(p)
        assert (idmap.partition_of(t.column("id").combine_chunks(), 3) == p).all()
        seen += t.column("row").to_pylist()
    assert sorted(seen) == list(range(5000))


CHILD = r"""
import json, sys
from pathlib import Path
from grappa.config import TablesConfig
from grappa.data.tables.source import TablesSource

def peak():  # VmHWM: this process's peak RSS (unlike ru_maxrss, not inherited across exec)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024

folder, work = Path(sys.argv[1]), Path(sys.argv[2])
cfg = TablesConfig.model_validate({"nodes": {"files": ["nodes.parquet"], "features": ["f"]},
                                   "edges": {"files": ["edges.parquet"]}})
src = TablesSource(folder, cfg, False, 0, need_labels=False)
before = peak()
staged = src.stage(work, work / "runs", block_edges=1 << 17)
print(json.dumps({"grew": peak() - before, "num_nodes": src.num_nodes, "num_edges": src.num_edges,
                  "partitions": staged["tables"]["partitions"]}))
"""


def _tables(folder: Path, n: int, e: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    ids = pc.binary_join_element_wise("user-", pc.cast(pa.array(rng.permutation(n) * 7 + 11), pa.string()), "")
    pq.write_table(pa.table({"id": ids, "f": pa.array(np.zeros(n, np.float32))}), folder / "nodes.parquet",
                   row_group_size=1 << 16)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    pq.write_table(pa.table({"src": ids.take(pa.array(src)), "dst": ids.take(pa.array(dst))}),
                   folder / "edges.parquet", row_group_size=1 << 16)
    return src, dst, int(ids.nbytes + 2 * (ids.nbytes / n) * e)


def _stage(folder: Path) -> dict:
    work = folder / "staging"
    work.mkdir()
    repo = Path(__file__).resolve().parents[2]
    env_path = ":".join([str(repo / "trainer"), *sys.path])
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(work)], capture_output=True, text=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_the_id_map_of_millions_of_string_ids_stays_in_bounded_memory(tmp_path):
    """1M string ids and 2M edges (5M id strings, ~75 MB as Arrow holds them) through the map
    in partitions of 64K rows, and a graph 5 times smaller: the peak RSS the map adds does not grow
    with the ids (one partition at a time), and every edge lands on the right dense ids."""
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    _tables(small, 200_000, 400_000)
    n, e = 1_000_000, 2_000_000
    src, dst, held = _tables(big, n, e, seed=1)
    r_small, r_big = _stage(small), _stage(big)
    assert r_big["num_nodes"] == n and r_big["num_edges"] == e and r_big["partitions"] == 32
    print(f"peak RSS added: {r_small['grew'] / 2**20:.0f} MiB at 200K ids, {r_big['grew'] / 2**20:.0f} MiB at "
          f"1M ids, whose id columns take {held / 2**20:.0f} MiB")
    assert r_big["grew"] < 1.25 * r_small["grew"] + 24 * 2**20, (r_small, r_big)
    assert r_big["grew"] < 200 * 2**20
    # the edges as dense ids: the rows of their endpoints in the nodes table
    s = np.load(big / "staging" / "runs" / "edges-src.npy")
    d = np.load(big / "staging" / "runs" / "edges-dst.npy")
    np.testing.assert_array_equal(np.sort(s.astype(np.int64) * n + d), np.sort(src * n + dst))
