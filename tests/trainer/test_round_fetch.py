"""A round's data fetched into worker-local storage (issue 37, part 2): the fetch path's bytes are
what the store holds for what it fetched, counted against the store's own arrays (np.load of each
file, the stored chunk_of.npy, independently of the code under test); the local copy gives the
same local graph and rows as the store; a mini-batch round fetches its halo's structure and then
each row the steps first read, the same rows and bytes the store gives; a prefetched round trains
the same parameters as one fetched on demand and as one reading the store directly; a worker
killed mid-fetch resumes and uses nothing half-fetched."""
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import grappa
from grappa.config import TrainConfig
from grappa.data.errors import ChunkStoreError
from grappa.data import local_copy
from grappa.data.halo_rows import rows_as_read
from grappa.data.local_copy import HALO_FILES, MIN_HELD, Fetched, LocalCopy, halo_key, index_dir, rows_key
from grappa.data.local_graph import FETCH_COUNTS, build_local_graph
from grappa.data.pace import Pace
from grappa.data.prefetch import RoundFetcher
from grappa.data.store.assign import base_chunks
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.manifest import CHUNK_FILES, chunk_dir
from grappa.models.model_file import read_meta
from grappa.runtime.local_job import LocalJob, rank_modules
from grappa.runtime.zygote import Zygote
from grappa.strategies.base import Strategy
from small_jobs import csbm_job

P, K = 2, 6  # base 3 chunks a worker, a variable chunk, and a halo in the other chunks


class StoreArrays:
    """The store's files as plain arrays, loaded whole (no memory maps, no ChunkStore)."""

    def __init__(self, store_dir: Path):
        self.dir = Path(store_dir)
        self.chunk_of = np.load(self.dir / "chunk_of.npy").astype(np.int64)

    def file(self, k: int, name: str) -> np.ndarray:
        return np.load(self.dir / chunk_dir(k) / name)

    def chunk_bytes(self, chunks) -> int:
        return sum(self.file(k, name).nbytes for k in chunks for name in CHUNK_FILES)

    def halo(self, owned) -> np.ndarray:
        sources = np.unique(np.concatenate([self.file(k, "indices.npy") for k in owned]).astype(np.int64))
        return sources[~np.isin(self.chunk_of[sources], owned)]

    def index_bytes(self, chunks) -> int:
        return sum(self.file(k, name).nbytes for k in chunks for name in ("nodes.npy", "indptr.npy"))

    def halo_chunks(self, owned) -> list[int]:
        return np.unique(self.chunk_of[self.halo(owned)]).tolist()

    def halo_bytes(self, owned) -> tuple[int, int]:
        """(index, rows): the nodes and indptr arrays of each chunk the halo reaches, whole; the
        halo's feature rows."""
        halo = self.halo(owned)
        rows_bytes = 0
        for k in self.halo_chunks(owned):
            rows = np.searchsorted(self.file(k, "nodes.npy"), halo[self.chunk_of[halo] == k])
            rows_bytes += self.file(k, "x.npy")[rows].nbytes
        return self.index_bytes(self.halo_chunks(owned)), rows_bytes

    def held_x_bytes(self, before, k) -> int:
        """The bytes of chunk k's feature rows that the halo of `before` fetched from a folder store
        holds (its runs are its rows exactly), if MIN_HELD of the chunk's rows at least, else 0."""
        halo = self.halo(before)
        x = self.file(k, "x.npy")
        n = int((self.chunk_of[halo] == k).sum())
        return n * x[0].nbytes if n >= MIN_HELD * x.shape[0] else 0

    def rows_not_held(self, before, after) -> int:
        """The bytes of the halo rows of round `after` that the folder of round `before` lacks:
        rows neither in that round's halo nor in its chunks."""
        halo = self.halo(after)
        held = np.isin(halo, self.halo(before)) | np.isin(self.chunk_of[halo], before)
        return int((~held).sum()) * self.file(0, "x.npy")[0].nbytes

    def next_chunk_read(self, before, k) -> int:
        """What a fetch reads of chunk k's files after the round `before` (chunk k in its halo):
        its index is kept in the folder, its rows that halo held taken from it."""
        return self.chunk_bytes([k]) - self.index_bytes([k]) - self.held_x_bytes(before, k)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("round-fetch")
    # sparse enough that a round's halo misses rows of its chunks: the next halo's runs are then
    # held in part by the folder
    cfg = csbm_job(tmp, **{"grappa.chunks": K, "dataset.synthetic.numNodes": 2000,
                           "dataset.synthetic.avgDegree": 3.0})
    return cfg, StoreArrays(Path(cfg.store_dir))


def owned_sets():
    base = base_chunks(0, P, K)
    others = [k for k in range(K) if k not in base]
    return base, others[0], others[1]


def assert_same_graph(a, b):
    for name in ("global_ids", "indptr", "indices", "deg", "y", "split"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.num_base, a.num_owned) == (b.num_base, b.num_owned)
    every = np.arange(a.num_nodes)
    assert torch.equal(a.features.gather(every), b.features.gather(every))


def test_fetch_counts_what_the_store_holds_for_what_it_fetched(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    copy = LocalCopy(cfg.store_path, tmp_path / "local")
    got = copy.fetch(base + [var])
    index, rows = arrays.halo_bytes(base + [var])
    assert (got.chunk_files, got.halo_index, got.halo_rows) == (arrays.chunk_bytes(base + [var]), index, rows)
    assert rows > 0 and got.memory_peak > 0
    # the copies are the store's arrays; the halo's rows and degrees are the store's
    for k in base + [var]:
        for name in CHUNK_FILES:
            np.testing.assert_array_equal(np.load(tmp_path / "local" / chunk_dir(k) / name), arrays.file(k, name))
    h = tmp_path / "local" / halo_key(base + [var])
    ids = np.load(h / "ids.npy")
    assert sorted(ids.tolist()) == arrays.halo(base + [var]).tolist()
    for i in (0, ids.size // 2, ids.size - 1):
        k = int(arrays.chunk_of[ids[i]])
        r = np.searchsorted(arrays.file(k, "nodes.npy"), ids[i])
        np.testing.assert_array_equal(np.load(h / "x.npy")[np.load(h / "xpos.npy")[i]], arrays.file(k, "x.npy")[r])
        ip = arrays.file(k, "indptr.npy")
        assert np.load(h / "deg.npy")[i] == ip[r + 1] - ip[r]
    # the next round: the base chunks are there, only the new variable chunk and its halo come,
    # the halo's rows this folder holds (the last halo's, the last variable chunk's) from it, and
    # what the folder holds of the new chunk: its index (kept from the last halo), the rows of it
    # the last halo held (most of them: its x.npy assembled, checked by its sha256)
    nxt = copy.fetch(base + [var2])
    index2, rows2 = arrays.halo_bytes(base + [var2])
    assert arrays.held_x_bytes(base + [var], var2) > 0
    assert (nxt.chunk_files, nxt.halo_index) == (arrays.next_chunk_read(base + [var], var2), 0)
    assert nxt.reused_files == arrays.chunk_bytes([var2]) - nxt.chunk_files + index2
    assert nxt.halo_rows + nxt.reused == rows2 and nxt.reused > 0
    # every row the folder holds comes from it, also where a run of the new halo is held in part
    assert nxt.halo_rows == arrays.rows_not_held(base + [var], base + [var2]) > 0
    for name in CHUNK_FILES:
        np.testing.assert_array_equal(np.load(tmp_path / "local" / chunk_dir(var2) / name), arrays.file(var2, name))
    assert {p.name for p in (tmp_path / "local").iterdir() if p.name.startswith("index-")} == \
        {index_dir(k) for k in set(arrays.halo_chunks(base + [var])) | set(arrays.halo_chunks(base + [var2]))}
    assert copy.fetch(base + [var]).total == 0  # already local: nothing read again


def test_halo_rows_taken_from_the_folder_are_the_stores(prepared, tmp_path):
    """A round whose halo rows come from the last round's halo and chunk copies builds the graph
    the store does; with the last variable chunk gone, the rows only it held come from the store."""
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var2)
    copy = LocalCopy(cfg.store_path, tmp_path / "local")
    copy.fetch(base + [var])
    nxt = copy.fetch(base + [var2])
    assert nxt.reused > 0
    assert_same_graph(direct, build_local_graph(copy.view(base + [var2]), base, var2))
    again = LocalCopy(cfg.store_path, tmp_path / "other")
    again.fetch(base + [var])
    again.evict(again.entries(base + [var2]) | {halo_key(base + [var])})  # its halo stays, its chunk goes
    third = again.fetch(base + [var2])
    index2, rows2 = arrays.halo_bytes(base + [var2])
    assert third.halo_rows + third.reused == rows2 and 0 < third.reused < nxt.reused
    assert_same_graph(direct, build_local_graph(again.view(base + [var2]), base, var2))


def test_a_chunk_assembled_from_rows_that_are_not_the_stores_is_copied_from_the_store(prepared, tmp_path, caplog):
    """The new variable chunk's x.npy is checked whole against the manifest's sha256: rows the
    folder held that differ from the store's are never used for it."""
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    copy = LocalCopy(cfg.store_path, tmp_path / "local")
    copy.fetch(base + [var])
    halo = tmp_path / "local" / halo_key(base + [var])
    runs = np.load(halo / "xruns.npy")
    at = int(runs[runs[:, 0] == var2][0, 3])  # the first run of var2's rows the halo holds
    x = np.load(halo / "x.npy", mmap_mode="r+")
    x[at] = x[at] + 1
    x.flush()
    del x
    with caplog.at_level(logging.WARNING, logger="grappa.data.local_copy"):
        nxt = copy.fetch(base + [var2])
    assert f"chunk {var2}'s x.npy assembled from the rows held differs" in caplog.text
    # the rows it lacked read, then the whole file; the rows held not counted as taken from the folder
    assert nxt.chunk_files == arrays.next_chunk_read(base + [var], var2) + arrays.file(var2, "x.npy").nbytes
    assert nxt.reused_files == arrays.index_bytes([var2]) + arrays.halo_bytes(base + [var2])[0]
    np.testing.assert_array_equal(np.load(tmp_path / "local" / chunk_dir(var2) / "x.npy"), arrays.file(var2, "x.npy"))


def test_the_local_copy_builds_the_graph_the_store_does(prepared, tmp_path):
    cfg, _ = prepared
    base, var, _ = owned_sets()
    copy = LocalCopy(cfg.store_path, tmp_path / "local")
    copy.fetch(base + [var])
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var)
    local = build_local_graph(copy.view(base + [var]), base, var)
    assert local.num_halo > 0
    assert_same_graph(direct, local)
    assert all(local.store_reads()[k] == 0 for k in FETCH_COUNTS)  # nothing wired: zeros


def test_the_fetchs_sources_serve_one_build_of_its_own_round(prepared, tmp_path):
    """The distinct in-edge sources a halo's fetch found (each chunk copy's kept between rounds)
    are the store's, handed to the view of that round once; a view of another round finds its own,
    and both build the graph the store does."""
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    copy = LocalCopy(cfg.store_path, tmp_path / "local")
    copy.fetch(base + [var])
    view = copy.view(base + [var])
    uniq, chunk_u = view.take_sources(base + [var])
    want = np.unique(np.concatenate([arrays.file(k, "indices.npy") for k in base + [var]]).astype(np.int64))
    np.testing.assert_array_equal(uniq, want)
    np.testing.assert_array_equal(chunk_u, arrays.chunk_of[want])
    assert view.take_sources(base + [var]) is None  # given once
    copy.fetch(base + [var2])  # the base chunks' sources from the first fetch, var2's new
    copy.fetch(base + [var])  # here already: no halo fetched, so no sources found
    first, second = copy.view(base + [var]), copy.view(base + [var2])
    assert first.sources is None and second.sources is None  # var2's, dropped by the view of another round
    for v, chunk in ((first, var), (second, var2)):
        assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, chunk),
                          build_local_graph(v, base, chunk))


def test_a_halo_beside_the_stable_halo_takes_its_rows_from_it_and_writes_only_the_others(prepared, tmp_path):
    """With the chunks owned every round named (a worker's base chunks), their halo is fetched once
    and kept; a round's halo places its rows held there at their rows there and writes only the
    others. Every round builds the store's graph, reads from the store what the folder lacks and
    no more, and the first round reads the rows it read without the stable halo."""
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    folder = tmp_path / "local"
    copy = LocalCopy(cfg.store_path, folder, stable=base)
    got = {}
    for owned, before in ((base + [var], None), (base + [var2], base + [var])):
        got[owned[-1]] = f = copy.fetch(owned)
        halo = arrays.halo(owned)
        lacking = ~np.isin(halo, arrays.halo(base))
        own = np.load(folder / halo_key(owned) / "x.npy")  # from a folder store, a run is its rows exactly
        assert 0 < own.shape[0] == lacking.sum() < halo.size
        assert f.halo_rows + f.reused >= arrays.halo_bytes(owned)[1]  # the stable halo's rows reused
        if before is not None:
            assert f.halo_rows == arrays.rows_not_held(before, owned)
        assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, owned[-1]),
                          build_local_graph(copy.view(owned), base, owned[-1]))
        assert halo_key(base) in copy.entries(owned)
        copy.evict(copy.entries(owned))  # the last round's halo goes, the stable one stays
        assert (folder / halo_key(base)).is_dir() and not (before and (folder / halo_key(before)).exists())
    plain = LocalCopy(cfg.store_path, tmp_path / "plain")
    first = plain.fetch(base + [var])
    # the same rows read as without it, counted once; the stable halo's rows in the variable chunk
    # taken from its copy
    in_var = int((arrays.chunk_of[arrays.halo(base)] == var).sum()) * arrays.file(0, "x.npy")[0].nbytes
    assert (got[var].halo_rows, got[var].reused) == (first.halo_rows, first.reused + in_var)
    assert plain.fetch(base + [var2]).halo_rows == got[var2].halo_rows


def test_a_halo_beside_the_stable_halo_is_trusted_only_beside_the_one_it_was_made_beside(prepared, tmp_path):
    """A resumed worker keeps a halo beside the stable halo when that halo is the same (rows and
    CRC-32 as recorded); else, or by a copy that keeps no stable halo, it is fetched again."""
    cfg, arrays = prepared
    base, var, _ = owned_sets()
    owned, folder = base + [var], tmp_path / "local"
    LocalCopy(cfg.store_path, folder, stable=base).fetch(owned)
    record = folder / halo_key(owned) / "fetched.json"
    made = json.loads(record.read_text())
    assert made["rows_from"]["halo"] == halo_key(base)
    assert LocalCopy(cfg.store_path, folder, stable=base).fetch(owned).total == 0  # resumed: all kept
    record.write_text(json.dumps({**made, "rows_from": {**made["rows_from"], "crc32": made["rows_from"]["crc32"] ^ 1}}))
    copy = LocalCopy(cfg.store_path, folder, stable=base)
    again = copy.fetch(owned)
    assert again.chunk_files == again.halo_index == 0 and again.halo_rows > 0  # the halo, fetched again
    assert json.loads(record.read_text())["rows_from"] == made["rows_from"]
    assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, var),
                      build_local_graph(copy.view(owned), base, var))
    plain = LocalCopy(cfg.store_path, folder)  # keeps all of a halo's rows in its own folder
    assert plain.fetch(owned).halo_rows > 0
    assert "rows_from" not in json.loads(record.read_text())
    assert np.load(folder / halo_key(owned) / "x.npy").shape[0] == arrays.halo(owned).size


def fetched_once(cfg, tmp_path):
    """A round (the base chunks and the first other one) fetched into tmp_path/local: (owned, folder)."""
    base, var, _ = owned_sets()
    folder = tmp_path / "local"
    LocalCopy(cfg.store_path, folder).fetch(base + [var])
    return base + [var], folder


def test_rows_filled_in_memory_or_through_the_files_map_make_the_same_folder(prepared, tmp_path, monkeypatch):
    """A new file's rows (the halo's x.npy, a variable chunk assembled from the rows held) are
    filled in memory and written when they fit a slab, counted among the fetch's held bytes;
    larger, through the file's map. The folder is the same either way, the store's rows."""
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    folders, peaks, whole = {}, {}, local_copy._RUNS_SLAB
    for slab in (whole, 64):  # 64 bytes: nothing fits, every file filled through its map
        monkeypatch.setattr(local_copy, "_RUNS_SLAB", slab)
        folder = folders[slab] = tmp_path / f"slab-{slab}"
        copy = LocalCopy(cfg.store_path, folder)
        copy.fetch(base + [var])
        f = Fetched()
        copy.fetch(base + [var2], f)  # var2's x.npy assembled from the rows var's halo holds
        peaks[slab] = f.memory_peak
    big, small = folders[whole], folders[64]
    x_bytes = (big / halo_key(base + [var2]) / "x.npy").stat().st_size - 128  # a header at most
    assert peaks[whole] >= x_bytes > peaks[64]  # counted while held in memory
    files = sorted(p.relative_to(big) for p in big.rglob("*.npy"))
    assert files == sorted(p.relative_to(small) for p in small.rglob("*.npy"))
    for rel in files:
        assert (big / rel).read_bytes() == (small / rel).read_bytes(), rel
    np.testing.assert_array_equal(np.load(big / chunk_dir(var2) / "x.npy"), arrays.file(var2, "x.npy"))


def test_a_halo_file_changed_in_place_is_not_trusted_by_a_resumed_worker(prepared, tmp_path):
    """A halo file of the same size but other bytes fails its CRC-32: fetched again."""
    cfg, arrays = prepared
    owned, folder = fetched_once(cfg, tmp_path)
    deg = folder / halo_key(owned) / "deg.npy"
    raw = bytearray(deg.read_bytes())
    raw[-1] ^= 0x01
    deg.write_bytes(bytes(raw))
    again = LocalCopy(cfg.store_path, folder).fetch(owned)  # a resumed worker
    assert again.chunk_files == again.halo_index == 0
    assert again.halo_rows == arrays.halo_bytes(owned)[1]  # the halo fetched again
    halo = arrays.halo(owned)  # the folder's order: by chunk, then id
    degs = [np.diff(arrays.file(c, "indptr.npy"))[np.searchsorted(arrays.file(c, "nodes.npy"),
                                                                  halo[arrays.chunk_of[halo] == c])]
            for c in arrays.halo_chunks(owned)]
    np.testing.assert_array_equal(np.load(deg), np.concatenate(degs))


def test_an_as_read_round_fetches_the_halo_structure_then_each_row_when_first_read(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, _ = owned_sets()
    owned = base + [var]
    copy = LocalCopy(cfg.store_path, tmp_path / "local", rows="as-read")
    got = copy.fetch(owned)
    index, rows_bytes = arrays.halo_bytes(owned)
    assert (got.chunk_files, got.halo_index, got.halo_rows, got.on_demand) == \
        (arrays.chunk_bytes(owned), index, 0, 0)
    halo = tmp_path / "local" / halo_key(owned)
    assert not (halo / "x.npy").exists()
    ids, chunk, row = (np.load(halo / f) for f in ("ids.npy", "chunk.npy", "row.npy"))
    for i in range(ids.size):  # each halo node's row in its chunk's store files
        assert arrays.file(int(chunk[i]), "nodes.npy")[row[i]] == ids[i]

    counts = Fetched()
    local = build_local_graph(copy.view(owned, counts), base, var)
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var)
    assert counts.halo_rows == 0  # building the graph reads no feature row
    row_bytes = int(arrays.file(0, "x.npy")[0].nbytes)
    halo_ids = np.arange(local.num_owned, local.num_nodes)
    some = np.concatenate([halo_ids[::3], halo_ids[:5], np.arange(10)])  # repeats, and owned rows
    assert torch.equal(local.features.gather(some), direct.features.gather(some))
    first = np.unique(halo_ids[::3].tolist() + halo_ids[:5].tolist()).size * row_bytes
    assert counts.halo_rows == counts.on_demand == first
    assert torch.equal(local.features.gather(halo_ids[::3]), direct.features.gather(halo_ids[::3]))
    assert counts.halo_rows == first  # read again: local
    assert_same_graph(direct, local)  # every row: the rest fetched now
    assert counts.halo_rows == counts.on_demand == rows_bytes  # each halo row once, in all
    cache = tmp_path / "local" / rows_key(owned) / "x.bin"
    assert cache.stat().st_size == rows_bytes

    # another process's rows are never used: a new LocalCopy removes them; its structure stays
    again = LocalCopy(cfg.store_path, tmp_path / "local", rows="as-read")
    assert not (tmp_path / "local" / rows_key(owned)).exists()
    assert again.fetch(owned).total == 0
    # a halo fetched for the other mode is not taken for this one's: fetched again (the chunks'
    # index kept, checked)
    whole = LocalCopy(cfg.store_path, tmp_path / "local").fetch(owned)
    assert (whole.chunk_files, whole.halo_index, whole.halo_rows) == (0, 0, rows_bytes)
    assert whole.reused_files == index


def test_warming_fetches_the_halo_rows_named_once_and_ignores_the_rest(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, _ = owned_sets()
    owned = base + [var]
    copy = LocalCopy(cfg.store_path, tmp_path / "local", rows="as-read")
    copy.fetch(owned)
    counts = Fetched()
    view = copy.view(owned, counts)
    halo = np.load(tmp_path / "local" / halo_key(owned) / "ids.npy")
    owned_ids = arrays.file(base[0], "nodes.npy")[:3]
    row_bytes = int(arrays.file(0, "x.npy")[0].nbytes)
    # halo ids twice, and owned ids: only the halo's rows, each once
    assert view.warm(np.r_[halo[::4], halo[::4], owned_ids]) == halo[::4].size
    assert counts.halo_rows == halo[::4].size * row_bytes and counts.on_demand == 0
    local = build_local_graph(view, base, var)
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var)
    warmed = local.num_owned + np.flatnonzero(np.isin(local.global_ids[local.num_owned:].numpy(), halo[::4]))
    assert torch.equal(local.features.gather(warmed), direct.features.gather(warmed))
    assert counts.on_demand == 0  # read, and all of them already here
    whole = LocalCopy(cfg.store_path, tmp_path / "whole")
    whole.fetch(owned)
    assert whole.view(owned).warm(halo) == 0  # rows that came whole: nothing to warm
    every = list(range(K))  # one worker owns every chunk: no halo, nothing to warm
    alone = LocalCopy(cfg.store_path, tmp_path / "alone", rows="as-read")
    alone.fetch(every)
    assert alone.view(every).warm(halo) == 0


def test_auto_halo_rows_come_as_read_when_wide_and_whole_when_narrow():
    # a bucket read merges rows closer than GAP_BYTES (64 KiB): rows over half that (Physics's
    # 8,415 float32, 33.7 kB) are one request each anyway; narrower ones come whole in few requests
    manifest = {"num_features": 8415, "feature_dtype": "<f4"}
    assert rows_as_read(manifest)
    manifest["num_features"] = 8192  # exactly half the gap: whole
    assert not rows_as_read(manifest)
    manifest["feature_dtype"] = "<f8"
    assert rows_as_read(manifest)
    assert TrainConfig().storage.halo_rows == "auto"


def folder_bytes(*dirs: Path) -> int:
    """The files' bytes, a file linked twice (a chunk copy's index) once."""
    files = {(st.st_dev, st.st_ino): st.st_size for d in dirs for f in d.rglob("*") if f.is_file()
             for st in [f.stat()]}
    return sum(files.values())


def round_entries(local: Path) -> set[str]:
    """The folder's entries but the chunks' index, kept for the job."""
    return {p.name for p in local.iterdir() if not p.name.startswith("index-")}


def test_rounds_fetched_ahead_hold_two_rounds_at_most_and_a_changed_schedule_fetches_on_demand(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    var3 = next(k for k in range(K) if k not in base + [var, var2])
    local = tmp_path / "local"
    fetcher = RoundFetcher(LocalCopy(cfg.store_path, local))
    fetcher.take(base + [var])
    first = fetcher.counts()
    assert first["fetched"] == arrays.chunk_bytes(base + [var]) + sum(arrays.halo_bytes(base + [var]))
    assert first["fetched_ahead"] == first["prefetch_disk"] == 0
    fetcher.ahead(base + [var2])
    fetcher.close()  # waits for the background fetch, keeps the folder
    held = fetcher.counts()
    assert held["prefetch_disk"] == folder_bytes(local / chunk_dir(var2), local / halo_key(base + [var2])) > 0
    assert held["local_disk"] == folder_bytes(local) and held["prefetch_memory"] > 0
    fetcher.take(base + [var2])
    second = fetcher.counts()
    index2, rows2 = arrays.halo_bytes(base + [var2])  # its halo's rows: from the store, or held here
    assert second["fetched"] == second["fetched_ahead"] == \
        arrays.next_chunk_read(base + [var], var2) + second["fetched_rows"]
    assert second["fetched"] + second["fetched_reused"] == arrays.chunk_bytes([var2]) + index2 + rows2
    assert second["fetched_rows"] < rows2
    assert second["prefetch_disk"] == second["prefetch_memory"] == 0  # nothing fetched ahead since `held`
    assert round_entries(local) == {chunk_dir(k) for k in base + [var2]} | {halo_key(base + [var2])}
    fetcher.ahead(base + [var3])
    fetcher.close()
    var3_bytes = folder_bytes(local / chunk_dir(var3), local / halo_key(base + [var3]))
    fetcher.take(base + [var])  # not the round fetched ahead: fetched now, the other evicted
    third = fetcher.counts()
    index, rows = arrays.halo_bytes(base + [var])  # the halo's rows: from the store, or held here
    assert third["fetched"] + third["fetched_reused"] == arrays.chunk_bytes([var]) + index + rows
    assert third["fetched"] <= arrays.chunk_bytes([var]) - arrays.index_bytes([var]) + third["fetched_rows"]
    assert third["fetched_ahead"] == 0
    assert round_entries(local) == {chunk_dir(k) for k in base + [var]} | {halo_key(base + [var])}
    # the fetch ahead completed, and was evicted, with no report in between: the next report has
    # what it held when it completed; the one after it, nothing (no fetch ahead since)
    assert third["prefetch_disk"] == var3_bytes > 0 and third["prefetch_memory"] > 0
    fourth = fetcher.counts()
    assert fourth["prefetch_disk"] == fourth["prefetch_memory"] == 0
    fetcher.close(remove=True)
    assert not local.exists()


def test_a_stable_halo_is_kept_beside_two_rounds_and_the_folder_holds_no_more_than_without_it(prepared, tmp_path):
    """Fetched ahead with the base chunks' halo kept, the folder holds it, the base chunks and two
    rounds at most (the stable halo never counted as the next round's); here no more bytes than
    the same rounds' folder without it (each round's halo holds most of the stable halo's rows)."""
    cfg, _ = prepared
    base, var, var2 = owned_sets()
    disk = {}
    for stable in (base, ()):
        local = tmp_path / f"local-{len(stable)}"
        fetcher = RoundFetcher(LocalCopy(cfg.store_path, local, stable=stable))
        fetcher.take(base + [var])
        fetcher.ahead(base + [var2])
        fetcher.close()
        held = fetcher.counts()
        assert held["prefetch_disk"] == folder_bytes(local / chunk_dir(var2), local / halo_key(base + [var2]))
        disk[stable != ()] = held["local_disk"]
        fetcher.take(base + [var2])
        assert round_entries(local) == {chunk_dir(k) for k in base + [var2]} | {halo_key(base + [var2])} | \
            ({halo_key(base)} if stable else set())
    assert disk[True] <= disk[False]


def test_a_paced_fetch_ahead_is_spread_over_its_budget_and_a_take_lifts_it(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, var2 = owned_sets()
    fetcher = RoundFetcher(LocalCopy(cfg.store_path, tmp_path / "local"))
    fetcher.take(base + [var])
    build = lambda view: build_local_graph(view, base, var2)  # noqa: E731 - once the data is here
    fetcher.ahead(base + [var2], seconds=3600.0, build=build)  # an hour for the chunk: it waits, block by block
    pace = fetcher._pace
    deadline = time.monotonic() + 60
    while pace.done == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    # what is read of the chunk's files, and the next halo's rows expected as many as this round's
    assert pace.total == arrays.next_chunk_read(base + [var], var2) + arrays.halo_bytes(base + [var])[1]
    assert 0 < pace.done < pace.total and pace.due() > 0  # the first block came, the rest waits
    fetcher.ahead(base + [var2], seconds=7200.0)  # budgeted anew, not fetched twice
    assert fetcher._pace is pace and pace.deadline > pace.t_ref + 7000
    taken = {}
    t = threading.Thread(target=lambda: taken.update(view=fetcher.take(base + [var2])), daemon=True)
    t.start()
    t.join(120)  # the round starts: the rest at once, not in two hours
    assert not t.is_alive() and pace.waited > 0
    got = fetcher._round  # the halo's rows paced: those read from the store, not those held here
    assert pace.done == pace.total == arrays.next_chunk_read(base + [var], var2) + got.halo_rows
    assert got.halo_rows + got.reused == arrays.halo_bytes(base + [var2])[1]
    got = fetcher.counts()
    assert got["fetched"] == got["fetched_ahead"] == arrays.next_chunk_read(base + [var], var2) + got["fetched_rows"]
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var2)
    assert_same_graph(direct, build_local_graph(taken["view"], base, var2))
    # the graph the fetch ahead built is handed over, and was counted while it was held
    built = fetcher.hand_over()
    assert_same_graph(direct, built)
    assert got["prefetch_memory"] >= built.nbytes() > 0 and fetcher.hand_over() is None  # given once
    fetcher.close(remove=True)


def test_a_paced_fetch_reads_its_halo_rows_a_small_slab_at_a_time(prepared, tmp_path, monkeypatch):
    """A slab's bytes come at once and then the pace waits: with a budget, slabs of _PACED_SLAB
    bytes (a run longer than that alone) spread the rows over it; without, one slab."""
    cfg, arrays = prepared
    base, var, _ = owned_sets()
    monkeypatch.setattr(local_copy, "_PACED_SLAB", 2048)
    read, original = [], LocalCopy.read_rows
    monkeypatch.setattr(LocalCopy, "read_rows", lambda self, reads, out: (
        read.append([rows for _, rows in reads]), original(self, reads, out))[1])
    now = [0.0]
    paced = Pace(3600.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    halos = {}
    for name, pace in (("at-once", None), ("paced", paced)):
        read.clear()
        LocalCopy(cfg.store_path, tmp_path / name).fetch(base + [var], pace=pace)
        halos[name] = tmp_path / name / halo_key(base + [var])
        row_bytes = np.load(halos[name] / "x.npy", mmap_mode="r")[0].nbytes
        runs = np.load(halos[name] / "xruns.npy")
        slabs = [sum(r.size for r in rows) * row_bytes for rows in read]
        if pace is None:
            assert len(slabs) == 1
        else:
            longest = int((runs[:, 2] - runs[:, 1]).max()) * row_bytes
            assert len(slabs) > 1 and max(slabs) <= max(2048, longest)
            assert sum(slabs) == int((runs[:, 2] - runs[:, 1]).sum()) * row_bytes and paced.waited > 0
    np.testing.assert_array_equal(np.load(halos["paced"] / "x.npy"), np.load(halos["at-once"] / "x.npy"))


def test_the_fetch_ahead_is_budgeted_to_end_an_epoch_before_the_next_round():
    calls = []

    built = []

    class Recorder:
        def ahead(self, owned, seconds=None, reach=None, build=None):
            calls.append((owned, seconds))
            built.append(build("view"))
    s = SimpleNamespace(_ahead=([0, 1, 5], 10, 0), _epoch_seconds=[], fetcher=Recorder(), _warm_ahead=False,
                        base=[0, 1], round_graph=lambda view, var: (view, var))
    Strategy._pace_ahead(s, 0)  # round 0's first epoch: not during it
    assert calls == []
    s._epoch_seconds = [9.0]
    Strategy._pace_ahead(s, 1)  # 9 epochs before round 1's first (epoch 10), this one included
    assert calls[-1] == ([0, 1, 5], 8 * 9.0)
    s._epoch_seconds = [9.0, 2.0]  # the shorter of two
    Strategy._pace_ahead(s, 2)
    assert calls[-1][1] == 7 * 2.0
    s._epoch_seconds = [9.0, 2.0, 3.0]  # the median of three
    Strategy._pace_ahead(s, 3)
    assert calls[-1][1] == 6 * 3.0
    Strategy._pace_ahead(s, 9)  # the last epoch before the round: at once
    assert calls[-1][1] is None
    s._ahead, s._epoch_seconds = ([0, 1, 6], 12, 10), [2.0, 2.0, 2.0]
    Strategy._pace_ahead(s, 10)  # round 1's first epoch (its set-up and its new halo's rows): not yet
    assert len(calls) == 4
    Strategy._pace_ahead(s, 11)  # rounds every 2: in the round's second epoch, at once
    assert calls[-1] == ([0, 1, 6], None)
    s._ahead, s._epoch_seconds = ([0, 1, 7], 1, 0), []
    Strategy._pace_ahead(s, 0)  # rounds every epoch: in the round's only epoch, at once
    assert calls[-1] == ([0, 1, 7], None)
    s._ahead = None
    Strategy._pace_ahead(s, 12)  # no round follows
    assert len(calls) == 6
    # each fetch ahead ends building its round's graph, with that round's variable chunk
    assert built == [("view", 5)] * 4 + [("view", 6), ("view", 7)]


class _FailingCopy(LocalCopy):
    """A LocalCopy whose fetch of one owned set fails (a full disk, say)."""

    def __init__(self, store, folder, fails):
        super().__init__(store, folder)
        self.fails = fails

    def fetch(self, owned, out=None, pace=None, expect_rows=0):
        if list(owned) == self.fails:
            raise OSError("No space left on device")
        return super().fetch(owned, out, pace, expect_rows)


def test_a_failed_fetch_ahead_is_reported_with_the_round_it_was_for(prepared, tmp_path, caplog):
    cfg, _ = prepared
    base, var, var2 = owned_sets()
    fetcher = RoundFetcher(_FailingCopy(cfg.store_path, tmp_path / "local", fails=base + [var2]))
    fetcher.take(base + [var])
    caplog.set_level(logging.WARNING, logger="grappa.data.prefetch")
    fetcher.ahead(base + [var2])
    fetcher.take(base + [var])  # another round than the one that failed: fetched now, no error
    assert [r.getMessage() for r in caplog.records] == [
        f"fetching round data ahead (chunks {base + [var2]}) failed (No space left on device); this round "
        f"needs chunks {base + [var]} instead: fetching them now"]
    caplog.clear()
    fetcher.ahead(base + [var2])
    with pytest.raises(OSError, match="No space left"):  # the round that failed: fetched now, fails again
        fetcher.take(base + [var2])
    assert [r.getMessage() for r in caplog.records] == [
        f"fetching this round's data (chunks {base + [var2]}) ahead failed (No space left on device); "
        "fetching it now"]
    fetcher.close(remove=True)


def fetch_job(tmp: Path, fetch: str, halo_rows: str = "as-read") -> TrainConfig:
    return csbm_job(tmp, **{"grappa.chunks": K, "training.mode": "mini-batch", "training.batchSize": 60,
                            "training.epochs": 3, "training.evalEvery": 3, "grappa.rounds.every": 1,
                            "storage.fetch": fetch, "storage.haloRows": halo_rows})


class _KeptZygote:
    """A zygote both runs fork their ranks from: LocalJob ends the zygote it is given once its
    ranks are done; this one stays for the next run (the test ends it). Each rank still gets its
    own job's env, argv and log (zygote.py); what costs a job is the zygote's import of torch and
    torch._dynamo (~4 of its ~5.5 CPU-s here), paid once instead of twice."""

    def __init__(self, zygote: Zygote) -> None:
        self.zygote = zygote

    def log_to(self, path: Path) -> None:
        self.zygote.log_to(path)

    def start(self, argv, env, log):
        return self.zygote.start(argv, env, log)

    def close(self) -> None:
        pass


def test_a_prefetched_round_trains_the_same_parameters_as_one_fetched_on_demand(tmp_path):
    """Mini-batch rounds: their halo rows come as the steps read them (halo_rows.py), and training
    is the same as on the store itself (direct)."""
    runs = {}
    cfgs = {fetch: fetch_job(tmp_path / fetch, fetch) for fetch in ("on-demand", "prefetch", "direct")}
    cfgs["reachable"] = fetch_job(tmp_path / "reachable", "prefetch", "reachable")
    threads = LocalJob(cfgs["prefetch"]).threads  # the zygote's env as LocalJob's own would be
    zygote = Zygote({**os.environ, "OMP_NUM_THREADS": str(threads)}, rank_modules(cfgs["prefetch"]),
                    tmp_path / "zygote.log")
    try:
        for fetch, cfg in cfgs.items():
            report = LocalJob(cfg, progress=False, zygote=_KeptZygote(zygote)).run()
            _, state = read_meta(Path(cfg.run_dir) / "model.pt")  # evaluated once, at the end: the last step's
            runs[fetch] = (report, state)
            assert not (Path(cfg.run_dir) / "local").exists() or not any((Path(cfg.run_dir) / "local").rglob("*.npy"))
    finally:
        zygote.close()
    (rep_d, state_d), (rep_p, state_p), (rep_s, state_s) = runs["on-demand"], runs["prefetch"], runs["direct"]
    rep_r, state_r = runs["reachable"]
    assert [h["round"] for h in rep_p["history"]] == [0, 1, 2]
    assert [h["loss"] for h in rep_p["history"]] == [h["loss"] for h in rep_d["history"]] == \
        [h["loss"] for h in rep_s["history"]] == [h["loss"] for h in rep_r["history"]]
    assert state_p.keys() == state_d.keys() == state_s.keys() == state_r.keys()
    for name in state_p:
        assert torch.equal(state_p[name], state_d[name]) and torch.equal(state_p[name], state_s[name]), name
        assert torch.equal(state_p[name], state_r[name]), name
    for w in range(P):  # haloRows reachable: every row a step read came with its round, rounds 1 and 2's ahead
        for h_r, h_d in zip(rep_r["history"], rep_d["history"]):
            r, d = h_r["worker_store_read_bytes"], h_d["worker_store_read_bytes"]
            assert r["fetched_on_demand"][w] == 0
            assert r["fetched_ahead"][w] == (r["fetched"][w] if h_r["round"] > 0 else 0)
            assert r["fetched_rows"][w] >= d["fetched_on_demand"][w] > 0
    for w in range(P):
        for h_d, h_p, h_s in zip(rep_d["history"], rep_p["history"], rep_s["history"]):
            d, p = h_d["worker_store_read_bytes"], h_p["worker_store_read_bytes"]
            assert d["fetched"][w] == p["fetched"][w] > 0  # the same bytes, whenever fetched
            assert d["fetched_ahead"][w] == 0 and d["prefetch_disk"][w] == 0
            # the halo's rows came as the steps read them: those the direct run read of the store
            assert p["fetched_rows"][w] == p["fetched_on_demand"][w] == d["fetched_on_demand"][w] == \
                h_s["worker_store_read_bytes"]["halo_features_distinct"][w] > 0
            # the rest of rounds 1 and 2 came ahead, during the round before; round 0 had nothing before it
            assert p["fetched_ahead"][w] == (p["fetched"][w] - p["fetched_rows"][w] if h_p["round"] > 0 else 0)
            assert p["local_disk"][w] >= d["local_disk"][w] > 0
        # while round 0 trained, round 1's data was held on disk, and the fetch's buffers: in round 0's
        # report, or, when that fetch completed after it, in round 1's (the first report after a fetch
        # ahead completes has what it held then, however short the epochs)
        for kind in ("prefetch_disk", "prefetch_memory"):
            assert any(h["worker_store_read_bytes"][kind][w] > 0 for h in rep_p["history"][:2]), kind
    summary = rep_p["store_reads"]
    assert summary["fetched"] and summary["rounds"][1]["worker_bytes"]["from_store"] == \
        rep_p["history"][1]["worker_store_read_bytes"]["fetched"]
    assert summary["peak_held_bytes"]["prefetch_disk"] == [
        max(h["worker_store_read_bytes"]["prefetch_disk"][w] for h in rep_p["history"]) for w in range(P)]


# The killed fetch stalls in the second chunk's copy of this file, after its header: a chunk's fetch
# writes CHUNK_FILES in their order (local_copy._fetch_chunk), one chunk after the other.
STALL_FILE = "indptr.npy"

_KILLED_FETCH = """
import builtins, sys, time
from grappa.data import local_copy
store, folder, ready, owned = sys.argv[1], sys.argv[2], sys.argv[3], [int(a) for a in sys.argv[4].split(",")]
stall_at = int(sys.argv[5])
real_open, opened = builtins.open, [0]

class Stalling:  # the stall_at-th file opened for writing stops after its header
    def __init__(self, fh): self.fh = fh
    def write(self, data):
        n = self.fh.write(data)
        if opened[0] == stall_at:
            self.fh.flush()
            real_open(ready, "w").close()
            time.sleep(600)
        return n
    def __enter__(self): return self
    def __exit__(self, *exc): return self.fh.__exit__(*exc)

def stalling_open(path, mode="r", *args, **kwargs):
    fh = real_open(path, mode, *args, **kwargs)
    if "w" in mode:
        opened[0] += 1
        return Stalling(fh)
    return fh

local_copy.open = stalling_open
local_copy.LocalCopy(store, folder).fetch(owned)
"""


def test_a_worker_killed_mid_fetch_resumes_and_uses_nothing_half_fetched(prepared, tmp_path):
    cfg, arrays = prepared
    base, var, _ = owned_sets()
    owned = base + [var]
    folder, ready = tmp_path / "local", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(Path(grappa.__file__).parents[1])}
    stall_at = len(CHUNK_FILES) + CHUNK_FILES.index(STALL_FILE) + 1  # the second chunk's STALL_FILE
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_FETCH, str(cfg.store_path), str(folder), str(ready),
                             ",".join(map(str, owned)), str(stall_at)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, "the fetch ended before it was killed"
            assert time.monotonic() < deadline, "the fetch never reached its second chunk"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first, second = owned[0], owned[1]
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([chunk_dir(first), f".tmp-{chunk_dir(second)}-{proc.pid}"])  # half: not renamed
    half = folder / f".tmp-{chunk_dir(second)}-{proc.pid}" / STALL_FILE
    assert 0 < half.stat().st_size < (cfg.store_path / chunk_dir(second) / STALL_FILE).stat().st_size

    # resumed: the half-fetched folder is gone, the complete chunk checked and kept, the rest fetched
    copy = LocalCopy(cfg.store_path, folder)
    assert not any(p.name.startswith(".tmp-") for p in folder.iterdir())
    got = copy.fetch(owned)
    assert got.chunk_files == arrays.chunk_bytes(owned[1:])
    assert (got.halo_index, got.halo_rows) == arrays.halo_bytes(owned)
    assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, var),
                      build_local_graph(copy.view(owned), base, var))

    # a complete copy that no longer matches the manifest (or its own record) is fetched again
    x = folder / chunk_dir(first) / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-1] ^= 0xFF
    x.write_bytes(bytes(raw))
    halo_x = folder / halo_key(owned) / "x.npy"
    halo_x.write_bytes(halo_x.read_bytes()[:-4])
    index = folder / index_dir(arrays.halo_chunks(owned)[0]) / "nodes.npy"  # and a chunk's index
    index.write_bytes(index.read_bytes()[:-8])
    again = LocalCopy(cfg.store_path, folder).fetch(owned)
    assert again.chunk_files == arrays.chunk_bytes([first])
    assert (again.halo_index, again.halo_rows) == \
        (arrays.index_bytes(arrays.halo_chunks(owned)[:1]), arrays.halo_bytes(owned)[1])
    assert again.reused_files == arrays.index_bytes(arrays.halo_chunks(owned)[1:])  # the others checked, kept
    np.testing.assert_array_equal(np.load(x), arrays.file(first, "x.npy"))
    np.testing.assert_array_equal(np.load(index), arrays.file(arrays.halo_chunks(owned)[0], "nodes.npy"))


def test_a_halo_record_missing_a_file_is_not_trusted_the_halo_fetched_again(prepared, tmp_path):
    cfg, arrays = prepared
    owned, folder = fetched_once(cfg, tmp_path)
    halo = folder / halo_key(owned)
    record = json.loads((halo / "fetched.json").read_text())
    assert set(record["files"]) == set(HALO_FILES)
    del record["files"]["x.npy"]  # a damaged record: x.npy's size and CRC-32 no longer checked
    (halo / "fetched.json").write_text(json.dumps(record))
    x = halo / "x.npy"
    size = x.stat().st_size
    x.write_bytes(x.read_bytes()[:-4])
    again = LocalCopy(cfg.store_path, folder).fetch(owned)  # a resumed worker: checks what it finds
    assert again.chunk_files == again.halo_index == 0  # the chunks' copies and index are intact
    assert again.halo_rows == arrays.halo_bytes(owned)[1]
    assert x.stat().st_size == size
    assert set(json.loads((halo / "fetched.json").read_text())["files"]) == set(HALO_FILES)


def test_a_store_file_that_differs_from_its_manifest_is_refused_nothing_kept(prepared, tmp_path):
    cfg, _ = prepared
    base, var, _ = owned_sets()
    store = tmp_path / "store"
    shutil.copytree(cfg.store_path, store)
    x = store / chunk_dir(var) / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-1] ^= 0xFF
    x.write_bytes(bytes(raw))
    copy = LocalCopy(store, tmp_path / "local")
    with pytest.raises(ChunkStoreError, match=rf"{chunk_dir(var)}/x.npy is corrupt \(sha256.*grappa prepare"):
        copy.fetch(base + [var])
    assert chunk_dir(var) not in {p.name for p in (tmp_path / "local").iterdir()}
    assert not any(p.name.startswith(".tmp-") for p in (tmp_path / "local").iterdir())


def test_fetching_is_refused_for_a_strategy_that_reads_the_store_directly(tmp_path):
    with pytest.raises(ValueError, match="storage.fetch 'prefetch'.*strategy: grappa"):
        TrainConfig.model_validate({"strategy": "full", "storage": {"fetch": "prefetch"}})
    assert TrainConfig().storage.fetch == "direct"
    assert TrainConfig.model_validate({"runDir": "r"}).local_path(2) == Path("r/local/rank-2")
