"""The chunk store's bytes read by a worker (issue 37, "count it"): per round, structure, own and
halo feature rows, every read and distinct; counted against the store's own arrays, read here
independently of the code under test (np.load of each file, the stored chunk_of.npy)."""
import json
from pathlib import Path

import numpy as np
import pytest

from grappa.app.metrics import TrainerMetrics
from grappa.app.report import store_reads_summary
from grappa.data.local_graph import build_local_graph
from grappa.data.store.assign import base_chunks
from grappa.data.store import chunk_store
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.manifest import chunk_dir
from grappa.runtime.local_job import LocalJob
from grappa.strategies.grappa.rounds import RoundDecision, round_seed, variable_chunk
from small_jobs import csbm_job

P, K = 2, 6  # six chunks for two workers: base 3 each, a variable chunk, and a halo in the others


class StoreArrays:
    """The store's files as plain arrays, loaded whole (no memory maps, no ChunkStore)."""

    def __init__(self, store_dir: Path):
        self.dir = Path(store_dir)
        self.chunk_of = np.load(self.dir / "chunk_of.npy").astype(np.int64)
        self._files: dict[tuple[int, str], np.ndarray] = {}

    def file(self, k: int, name: str) -> np.ndarray:
        if (k, name) not in self._files:
            self._files[(k, name)] = np.load(self.dir / chunk_dir(k) / f"{name}.npy")
        return self._files[(k, name)]

    def structure(self, owned: list[int]) -> tuple[int, int]:
        """(every read, distinct) bytes the build of a local graph over `owned` reads: the owned
        chunks' nodes, indptr, indices (two passes), y and split; for every chunk the halo
        reaches, its nodes and each halo row's two indptr entries."""
        total = distinct = 0
        for k in owned:
            once = sum(self.file(k, n).nbytes for n in ("nodes", "indptr", "indices", "y", "split"))
            total += once + self.file(k, "indices").nbytes
            distinct += once
        sources = np.unique(np.concatenate([self.file(k, "indices") for k in owned]).astype(np.int64))
        halo = sources[~np.isin(self.chunk_of[sources], owned)]
        for k in np.unique(self.chunk_of[halo]):
            rows = np.searchsorted(self.file(k, "nodes"), halo[self.chunk_of[halo] == k])
            itemsize = self.file(k, "indptr").itemsize
            total += self.file(k, "nodes").nbytes + 2 * rows.size * itemsize
            distinct += self.file(k, "nodes").nbytes + np.unique(np.r_[rows, rows + 1]).size * itemsize
        return total, distinct

    def row(self, global_id: int) -> np.ndarray:
        k = int(self.chunk_of[global_id])
        return self.file(k, "x")[np.searchsorted(self.file(k, "nodes"), global_id)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("store-reads")
    cfg = csbm_job(tmp, **{"grappa.chunks": K, "training.mode": "mini-batch", "training.batchSize": 40,
                           "training.epochs": 4, "grappa.rounds.every": 2, "training.evalEvery": 4})
    return cfg, StoreArrays(Path(cfg.store_dir))


def test_bytes_counted_are_what_the_store_holds_for_the_rows_read(prepared, monkeypatch):
    cfg, arrays = prepared
    monkeypatch.setattr(chunk_store, "_VERIFIED", {})  # as in a fresh process: nothing checked yet
    store = ChunkStore(cfg.store_path)
    base = base_chunks(0, P, K)
    var = next(k for k in range(K) if k not in base)
    g = build_local_graph(store, base, var)
    owned = base + [var]
    total, distinct = arrays.structure(owned)
    assert (g.structure_bytes, g.structure_distinct_bytes) == (total, distinct)
    # every file of every chunk the build touched (owned, and those holding its halo) read whole
    # once to check its sha256
    touched = set(owned) | set(np.unique(g.features.halo_chunk).tolist())
    assert g.store_reads()["verify"] == sum(arrays.file(k, name).nbytes for k in touched
                                            for name in ("nodes", "indptr", "indices", "x", "y", "split"))
    assert build_local_graph(store, base, var).store_reads()["verify"] == 0  # checked once a process
    assert g.num_halo > 0 and g.store_reads()["own_features"] == g.store_reads()["halo_features"] == 0

    rng = np.random.default_rng(0)
    reads = [rng.integers(0, g.num_nodes, 150), rng.integers(0, g.num_nodes, 150), np.arange(20)]
    expected_own = expected_halo = 0
    seen_own, seen_halo = set(), set()
    for ids in reads:  # repeats inside and across reads: every read counted, distinct once
        x = g.features.gather(ids).numpy()
        for local, got in zip(ids.tolist(), x):
            gid = int(g.global_ids[local])
            row = arrays.row(gid)
            np.testing.assert_array_equal(got, row)  # the counted row is the row read
            if local < g.num_owned:
                expected_own += row.nbytes
                seen_own.add(gid)
            else:
                expected_halo += row.nbytes
                seen_halo.add(gid)
    row_bytes = arrays.file(base[0], "x")[0].nbytes
    counts = g.store_reads()
    assert counts["own_features"] == expected_own and counts["halo_features"] == expected_halo
    assert counts["own_features_distinct"] == len(seen_own) * row_bytes
    assert counts["halo_features_distinct"] == len(seen_halo) * row_bytes
    assert 0 < counts["halo_features_distinct"] < counts["halo_features"]
    assert g.features.bytes_read == expected_own + expected_halo
    # a new round's graph starts from zero
    g2 = build_local_graph(store, base, var)
    assert g2.store_reads()["own_features"] == 0 and g2.features.serial != g.features.serial


def test_a_job_reports_each_rounds_reads_per_worker_and_epoch(prepared):
    """metrics.jsonl: round-so-far counts after every epoch, from zero at each round (the round's
    build counted once, as the store holds it), growing within it; report.json: per round."""
    cfg, arrays = prepared
    report = LocalJob(cfg, progress=False).run()
    hist = report["history"]
    assert [h["round"] for h in hist] == [0, 0, 1, 1]
    lines = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [x["worker_store_read_bytes"] for x in lines if "loss" in x] == \
        [h["worker_store_read_bytes"] for h in hist]
    for h in hist:
        decision = RoundDecision(h["round"], round_seed(cfg.grappa.partition_seed, h["round"]), h["round_start"])
        reads = h["worker_store_read_bytes"]
        for w in range(P):
            owned = base_chunks(w, P, K) + [variable_chunk(w, P, K, decision, cfg.grappa.rounds.pairing)]
            # the structure of this round's graph only: not added to the previous round's
            assert (reads["structure"][w], reads["structure_distinct"][w]) == arrays.structure(owned)
            for kind in ("own_features", "halo_features"):
                assert 0 < reads[f"{kind}_distinct"][w] <= reads[kind][w]
    for first, second in ((hist[0], hist[1]), (hist[2], hist[3])):  # within a round: accumulates
        for kind in ("own_features", "halo_features"):
            for w in range(P):
                assert second["worker_store_read_bytes"][kind][w] > first["worker_store_read_bytes"][kind][w]
                assert second["worker_store_read_bytes"][kind + "_distinct"][w] >= \
                    first["worker_store_read_bytes"][kind + "_distinct"][w]
    # a round starts from zero: its first epoch read about one epoch's rows, not two epochs' more
    for w in range(P):
        assert hist[2]["worker_store_read_bytes"]["own_features"][w] < \
            hist[1]["worker_store_read_bytes"]["own_features"][w]
    summary = report["store_reads"]
    assert [(r["round"], r["epochs"]) for r in summary["rounds"]] == [(0, [1, 2]), (1, [3, 4])]
    for r, last in zip(summary["rounds"], (hist[1], hist[3])):
        per = r["worker_bytes"]
        for kind, values in last["worker_store_read_bytes"].items():
            assert per[kind] == values
        assert per["total"] == [sum(per[k][w] for k in ("verify", "structure", "own_features", "halo_features"))
                                for w in range(P)]
    assert summary["total_bytes"]["own_features"] == sum(
        sum(h["worker_store_read_bytes"]["own_features"]) for h in (hist[1], hist[3]))


def test_prometheus_counts_every_read_across_rounds_and_the_rounds_so_far():
    m = TrainerMetrics(rank=1, job="demo")
    kinds = ("structure", "own_features", "halo_features")

    def reads(s, o, h):
        return {"verify": 0, "verify_distinct": 0, "structure": s, "structure_distinct": s,
                "own_features": o, "own_features_distinct": o // 2,
                "halo_features": h, "halo_features_distinct": h // 2}
    m.observe_store_reads(7, reads(100, 10, 20))
    m.observe_store_reads(7, reads(100, 30, 50))   # the same round, later: grew by 20 and 30
    m.observe_store_reads(8, reads(90, 4, 6))      # a new round: its counts start from zero

    def value(name, kind):
        return m.registry.get_sample_value(name, {"rank": "1", "job": "demo", "kind": kind})
    assert [value("grappa_trainer_store_read_bytes_total", k) for k in kinds] == [190, 34, 56]
    assert [value("grappa_trainer_store_round_read_bytes", k) for k in kinds] == [90, 4, 6]
    assert [value("grappa_trainer_store_round_distinct_bytes", k) for k in kinds] == [90, 2, 3]


def test_report_splits_a_round_resumed_midway():
    def rec(epoch, rnd, own):
        return {"epoch": epoch, "round": rnd, "worker_store_read_bytes": {
            "structure": [5], "structure_distinct": [4], "own_features": [own], "own_features_distinct": [own],
            "halo_features": [1], "halo_features_distinct": [1]}}
    hist = [rec(1, 0, 10), rec(2, 0, 20), rec(3, 0, 8), rec(4, 1, 9)]  # resumed after epoch 2
    out = store_reads_summary(hist, resumed_at=[2])
    assert [(r["round"], r["epochs"]) for r in out["rounds"]] == [(0, [1, 2]), (0, [3, 3]), (1, [4, 4])]
    assert out["total_bytes"]["own_features"] == 20 + 8 + 9
    assert out["rounds"][0]["worker_bytes"]["total"] == [5 + 20 + 1]
    assert store_reads_summary([{"epoch": 1, "round": 0}], []) is None
