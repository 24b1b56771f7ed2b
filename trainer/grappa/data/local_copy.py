"""A round's data in worker-local storage: the one path by which a worker fetches from the store.

A round needs its owned chunks (the base chunks and the variable chunk) whole, and its halo: the
nodes outside them that their in-edges reach, each with its feature row and global in-degree.
`LocalCopy.fetch(owned)` brings both from the chunk store into the worker's folder (an emptyDir
in a pod, a scratch folder locally); `view(owned)` serves them to local_graph.build_local_graph in
the store's place, which builds the same local graph and reads the same rows from them. A
mini-batch round (rows="as-read") reads a small part of its halo's rows, so its fetch brings the
halo's structure only and each row comes when a step first reads it (data/halo_rows.py).

Bytes fetched (`Fetched`), every byte read from the store, npy headers aside:
    chunk_files = sum over the chunk files copied of their data bytes (manifest data_bytes), but
                  those the folder held (below); from a bucket that holds a file packed too
                  (s3/packed.py), its packed data's bytes instead
    halo_index  = per chunk the halo reaches whose index the folder lacks: its nodes and indptr
                  arrays, read whole (the rows are searched) and kept for the job (`index-<k>`)
    halo_rows   = halo rows read from the store x row bytes (a stored row: store/feature_codec.py);
                  with rows="as-read", the rows the steps read, each once a round (`on_demand` too)
    over_read   = a store in a bucket (storage.s3, data/s3/source.py) only: bytes between rows
                  read in the same ranged request
A chunk already copied is not read again: base chunks are fetched once per job. Halo rows the
folder already holds (a chunk copy, the runs of a halo fetched before) are taken from it, not
read again: `reused` counts their bytes, which are not in the total (data/held_runs.py). So are a
chunk's index files, kept once read (or linked from its copy), and the rows of a new variable
chunk's x.npy that the last halo's runs hold, when they are at least MIN_HELD of them: the rest
of its rows is read from the store, and the whole file checked against the manifest's sha256
(`reused_files` counts what the folder gave, not in the total). From a
bucket the same files and rows are read by GETs (a file whole, rows and entries in ranges); the
bucket's manifest is the local mirror's (storeDir).

The chunks owned every round (`stable`: a worker's base chunks) have a halo of their own, fetched
once a job and kept: most of every round's halo is in it (RMAT-17 at P = 8, counted row by row:
about 80% of a round's 48k halo rows; from a bucket, whose runs hold the rows between, more). A
round's halo folder then holds only the rows that halo lacks, and its xpos places the others at
their rows there: a round no longer writes its whole halo's rows again (a new file's pages were
what a round's fetch spent most on). Those rows count as `reused`. The round's record names that halo (its rows and x.npy's CRC-32): a round's halo is
trusted only beside the one it was made beside.

What a round's halo is found from is kept in memory as the folder keeps its files: per chunk copy,
the distinct sources of its in-edges (8 bytes each; a base chunk's found once a job, a new
variable chunk's once), and each index-<k>'s maps; the build of the round's graph takes the
distinct sources the fetch found (LocalView.take_sources) rather than finding them again.

Nothing half-fetched is used: a copy is written under a `.tmp-` name and renamed into place when
complete; a worker killed mid-fetch leaves only `.tmp-` entries, removed when the folder is opened
again. A chunk file's sha256 is checked against the store's manifest while it is copied, and a
copy found on disk by a new process (a resumed worker) is checked again, size and sha256, before
use; a halo folder records its owned set, the store's manifest digest and its files' sizes and
CRC-32 in fetched.json, checked the same way (a record that does not list exactly HALO_FILES is
not trusted: the halo is fetched again). CRC-32, not sha256: the worker wrote those files itself
(the check is for a torn or damaged copy), and every round hashes a new halo. Halo rows are a
part of their files, so the store's whole-file sha256 cannot check them: their files' dtype,
shape and size are checked instead.

Folder layout:
    chunk-<k>/<name>.npy     an owned chunk's file, whole
    halo-<key>/ids.npy       int64 [h] the halo's global ids, sorted by (chunk, id)
    halo-<key>/chunk.npy     int32 [h] the chunk of each
    halo-<key>/deg.npy       int64 [h] global in-degree
    halo-<key>/row.npy       int64 [h] the row of each in its chunk's files
    halo-<key>/x.npy         [n, f] the runs of store rows that hold the halo's feature rows, in
                             the store's dtype (rows="all" only, as the next two: held_runs.py);
                             beside the stable halo, those it lacks
    halo-<key>/xpos.npy      int64 [h] the row in x.npy of each halo node's; beside the stable
                             halo, its row there, or its row in x.npy + that halo's row count
    halo-<key>/xruns.npy     int64 [runs, 4] (chunk, first row, end row, its first row in x.npy)
    halo-<key>/fetched.json  what the folder was fetched for and each file's size and CRC-32 (and
                             `rows_from`: the stable halo it was made beside)
    halo-<stable key>/       the stable chunks' halo, the same files, kept for the job
    index-<k>/nodes.npy      chunk k's nodes and indptr, whole, kept for the job (16 bytes a node
    index-<k>/indptr.npy     at most, all chunks together): hard links to its copy's if it has one
    rows-<key>/x.bin         rows="as-read": the halo rows the round's steps read so far (halo_rows.py)
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from grappa.data.distinct import MAP_BLOCK, distinct
from grappa.data.errors import ChunkStoreError
from grappa.data.halo_rows import HaloChunkRows, HaloRows
from grappa.data.held_runs import RUN_FILES, HeldRuns, RunRows, locate, spans
from grappa.data.pace import Pace
from grappa.data.store.assign import ChunkAssignment
from grappa.data.store.feature_codec import codec_of, rows_view
from grappa.data.store.manifest import CHUNK_FILES, MANIFEST, chunk_dir, read_manifest
from grappa.util.files import crc32_of, sha256_of
from grappa.util.npy import load_npy, map_npy

log = logging.getLogger("grappa.data.local_copy")
_BLOCK = 1 << 22      # bytes per read when copying a file
_RUNS_SLAB = 1 << 25  # bytes of a halo's runs read from the store at once (their requests together)
# ... and while a fetch ahead keeps to a time budget: small enough that its reads spread over the
# budget's epochs (a slab's bytes come at once, then the pace waits)
_PACED_SLAB = 1 << 20
_TMP = ".tmp-"
_INDEX = "index-"
INDEX_CHUNK_FILES = ("nodes.npy", "indptr.npy")  # what a halo reads of a chunk's structure
MIN_HELD = 0.25  # a variable chunk's x.npy assembled from the runs held when they hold this share of rows
INDEX_FILES = ("ids.npy", "chunk.npy", "deg.npy", "row.npy")
HALO_FILES = INDEX_FILES + RUN_FILES
ROW_MODES = ("all", "as-read")  # a halo's rows fetched with it, or as the steps read them
_ROWS = "rows-"
_FIX = "the store must be re-prepared (delete it and run `grappa prepare`)"


@dataclass
class Fetched:
    """Store bytes one fetch read (module docstring), and the peak bytes of the arrays it held."""

    chunk_files: int = 0
    halo_index: int = 0
    halo_rows: int = 0
    over_read: int = 0
    on_demand: int = 0  # of halo_rows, those fetched as the steps read them (rows="as-read")
    reused: int = 0     # halo rows' bytes taken from the folder instead (not in total)
    reused_files: int = 0  # chunk files' and halo index bytes taken from the folder (not in total)
    memory_peak: int = 0
    memory_now: int = 0

    @property
    def total(self) -> int:
        return self.chunk_files + self.halo_index + self.halo_rows + self.over_read

    def hold(self, *arrays: np.ndarray) -> None:
        """Count arrays the fetch now holds (its index arrays, one slab of rows read, a new file's
        rows filled in memory, at most a slab: _NewRows); numpy's temporaries inside one call
        are not counted."""
        self.memory_now += sum(a.nbytes for a in arrays)
        self.memory_peak = max(self.memory_peak, self.memory_now)

    def drop(self, *arrays: np.ndarray) -> None:
        self.memory_now -= sum(a.nbytes for a in arrays)



def _slab_bytes(pace: Pace | None) -> int:
    return _PACED_SLAB if pace is not None and pace.deadline is not None else _RUNS_SLAB


class _NewRows:
    """A new .npy file's rows for a fetch to fill (`rows`): in memory when they take at most
    _RUNS_SLAB bytes, written to the file by `close()`, else the file's own map. A fresh map's
    first write to each page faults it in, which here costs about twice the copy (a halo's 12 MB
    of rows: 12 ms through a map, 5 ms filled in memory and written)."""

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int, ...], out: Fetched) -> None:
        m = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        self.path, self.offset, self.out = path, int(m.offset), out
        self.in_memory = m.nbytes <= _RUNS_SLAB
        self.rows = np.empty(shape, dtype=dtype) if self.in_memory else m
        if self.in_memory:
            out.hold(self.rows)
        del m  # unmapped, not flushed: its pages stay in the page cache (no fsync: _atomically)

    def close(self) -> int:
        """The rows in the file; returns where its data starts."""
        if self.in_memory:
            with open(self.path, "r+b") as fh:
                fh.seek(self.offset)
                fh.write(memoryview(self.rows.reshape(-1).view(np.uint8)))
            self.out.drop(self.rows)
        self.rows = None
        return self.offset


def halo_key(owned: Sequence[int]) -> str:
    """The halo folder's name: one per owned set, the same in every process."""
    return "halo-" + hashlib.sha256(",".join(map(str, sorted(owned))).encode()).hexdigest()[:16]


def index_dir(k: int) -> str:
    """The folder entry keeping chunk k's INDEX_CHUNK_FILES for the job."""
    return f"{_INDEX}{k}"


def rows_key(owned: Sequence[int]) -> str:
    """The folder of a round's rows fetched as read (this process's own)."""
    return _ROWS + halo_key(owned)[len("halo-"):]


class LocalCopy:
    """A worker's folder of fetched round data, over the store at `store_path`."""

    def __init__(self, store_path: str | Path, folder: str | Path, remote=None, rows: str = "all",
                 stable: Sequence[int] = ()) -> None:
        if rows not in ROW_MODES:
            raise ValueError(f"rows must be one of {ROW_MODES}, not {rows!r}")
        self.store = Path(store_path)
        self.folder = Path(folder)
        self.as_read = rows == "as-read"
        self.halo_files = INDEX_FILES if self.as_read else HALO_FILES
        # the chunks owned every round (a worker's base chunks): their halo's rows kept for the job
        self.stable = sorted(stable)
        self.remote = None
        if remote is not None:  # a data.s3 Bucket: storeDir is its mirror, holding the manifest
            from grappa.data.s3.source import S3Source
            self.remote = S3Source(remote)
        self.manifest = read_manifest(self.store)
        self.num_chunks = int(self.manifest["num_chunks"])
        self.assignment = ChunkAssignment(int(self.manifest["num_nodes"]), self.num_chunks,
                                          int(self.manifest["seed"]))
        self.digest = hashlib.sha256((self.store / MANIFEST).read_bytes()).hexdigest()
        self.folder.mkdir(parents=True, exist_ok=True)
        for entry in self.folder.iterdir():  # a killed fetch's leftovers, another process's rows: never used
            if entry.name.startswith((_TMP, _ROWS)):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        self._checked: set[str] = set()  # entries written or checked by this process
        # Kept between rounds, as the folder keeps what they are made of (the base chunks' are
        # the same every round): per chunk copy, its in-edges' distinct sources; per index-<k>,
        # its maps. And the last halo's owned set, distinct sources and their chunks, until its
        # view takes them for the build (LocalView.take_sources).
        self._sources: dict[int, np.ndarray] = {}
        self._index_maps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._last_sources: tuple[tuple[int, ...], np.ndarray, np.ndarray] | None = None
        self._stable_runs: tuple[str, np.ndarray, dict] | None = None  # the stable halo's (_stable)
        self._halo_runs: dict[str, dict] = {}  # per halo folder, what HeldRuns.add_halo read of it

    def stable_of(self, owned: Sequence[int]) -> list[int] | None:
        """The stable chunks whose halo's rows `owned`'s halo takes its own from (None: it keeps
        all of its rows itself: as read, no stable chunks, or they are not all owned, or owned
        are those alone)."""
        if self.as_read or not self.stable or not set(self.stable) < set(owned):
            return None
        return self.stable

    # -- the store's side ----------------------------------------------------------------------
    def _entry(self, k: int, name: str) -> dict:
        return self.manifest["chunks"][k]["files"][name]

    def _store_file(self, k: int, name: str) -> np.ndarray:
        """Chunk k's store file as a memory map, its dtype, shape and size as the manifest says."""
        path = self.store / chunk_dir(k) / name
        e = self._entry(k, name)
        if self.remote is not None:  # the header checked; its data read by copy / read_rows
            dtype, shape, _ = self.remote.header(f"{chunk_dir(k)}/{name}")
            if dtype.str != e["dtype"] or list(shape) != e["shape"]:
                raise ChunkStoreError(f"{self.remote.bucket.where}{chunk_dir(k)}/{name} is corrupt "
                                      "(dtype or shape differs from manifest.json); prepare the store "
                                      "in the bucket again")
            return None
        try:
            arr = map_npy(path)
        except (ValueError, OSError) as err:
            raise ChunkStoreError(f"chunk store file {path} is missing or corrupt ({err}); {_FIX}") from None
        if arr.dtype.str != e["dtype"] or list(arr.shape) != e["shape"] or \
                path.stat().st_size - arr.offset != e["data_bytes"]:
            raise ChunkStoreError(f"chunk store file {path} is corrupt (dtype, shape or size differs "
                                  f"from manifest.json); {_FIX}")
        return arr

    def _copy_file(self, k: int, name: str, dst: Path, pace: Pace | None = None) -> int:
        """Copy chunk k's file to dst, its data's sha256 checked against the manifest while it
        is read; returns the data bytes read."""
        src = self.store / chunk_dir(k) / name
        h = hashlib.sha256()

        def spend(n: int) -> None:
            if pace is not None:
                pace.spend(n)

        def data(buf) -> None:
            h.update(buf)
            spend(len(buf))
        e = self._entry(k, name)
        read = e["data_bytes"]
        if self.remote is not None:  # the header checked once it came (packed: with the data)
            src = f"{self.remote.bucket.where}{chunk_dir(k)}/{name}"
            with open(dst, "wb") as fo:
                read = self.remote.copy(f"{chunk_dir(k)}/{name}", fo, h.update, spend)
            self._store_file(k, name)
        else:
            offset = self._store_file(k, name).offset
            with open(src, "rb") as fi, open(dst, "wb") as fo:
                fo.write(fi.read(offset))
                while buf := fi.read(_BLOCK):
                    data(buf)
                    fo.write(buf)
        if h.hexdigest() != e["sha256"]:
            raise ChunkStoreError(f"chunk store file {src} is corrupt (sha256 differs from manifest.json); {_FIX}")
        return read

    # -- fetching -------------------------------------------------------------------------------
    def fetch(self, owned: Sequence[int], out: Fetched | None = None, pace: Pace | None = None,
              expect_rows: int = 0) -> Fetched:
        """Bring the owned chunks and their halo into the folder (what is there and intact
        stays); `out` is filled as it goes, so another thread can watch the bytes it holds;
        `pace` spreads the chunk files' and the halo rows' bytes over its budget (a fetch ahead:
        data/pace.py), the rows' counted from the start as `expect_rows` bytes (the halo is
        known only once the chunks are here; as read, the rows a LocalView.warm brings)."""
        out = out if out is not None else Fetched()
        todo = [k for k in owned if not self._usable_chunk(k)]
        held = self._held() if todo else None
        plans = {k: self._plan_chunk(k, held) for k in todo}
        if pace is not None:
            pace.begin(sum(p.read_bytes for p in plans.values()))
            pace.expect(expect_rows)
        for k in todo:
            self._atomically(chunk_dir(k), lambda tmp, k=k: self._fetch_chunk(k, tmp, plans[k], held, out, pace))
        stable = self.stable_of(owned)
        fresh = stable is not None and not self._usable_halo(stable)  # once a job (round 0's fetch)
        if fresh:
            self._atomically(halo_key(stable), lambda tmp: self._fetch_halo(stable, tmp, out, pace))
        if not self._usable_halo(owned):  # its rows in a stable halo fetched just now: not counted reused
            self._atomically(halo_key(owned), lambda tmp: self._fetch_halo(owned, tmp, out, pace, not fresh))
        if pace is not None and not self.as_read:  # as read, rows fetched ahead settle it (LocalView.warm)
            pace.settle(0)
        return out

    def halo_row_bytes(self, owned: Sequence[int]) -> int:
        """The bytes of the runs of feature rows in `owned`'s fetched halo (0: none here, or as
        read): about what the next round's fetch reads of rows, before what it finds here."""
        path = self.folder / halo_key(owned) / "x.npy"
        if self.as_read or not path.exists():
            return 0
        return path.stat().st_size - map_npy(path).offset

    def _atomically(self, name: str, write) -> None:
        """write(tmp folder), then the folder renamed to `name`: complete, or not there at all."""
        tmp = self.folder / f"{_TMP}{name}-{os.getpid()}"
        final = self.folder / name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            write(tmp)
            shutil.rmtree(final, ignore_errors=True)  # a stale copy that failed its check
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # No fsync: a killed process's writes survive in the page cache; a machine crash takes a
        # pod's emptyDir with it, and a local folder's copies are checked again on reuse.
        self._checked.add(name)
        self._forget(name)

    def _forget(self, name: str) -> None:
        """Drop what this process kept of a folder entry rewritten or removed."""
        self._halo_runs.pop(name, None)
        if self._stable_runs is not None and self._stable_runs[0] == name:
            self._stable_runs = None

    def _plan_chunk(self, k: int, held: HeldRuns) -> "_ChunkPlan":
        """Where chunk k's files come from: its index kept in the folder, x.npy's rows from the
        runs held (MIN_HELD of them at least), the rest from the store."""
        plan = _ChunkPlan(from_index=self._usable_index(k))
        x = self._entry(k, "x.npy")
        rows = int(x["shape"][0]) if x["shape"] else 0
        mask = held.mask(k, rows)
        if rows and mask.sum() >= MIN_HELD * rows:
            plan.x_held = mask
        for name in CHUNK_FILES:
            data = self._entry(k, name)["data_bytes"]
            if self.remote is not None and (packed := self.remote.packed_bytes(f"{chunk_dir(k)}/{name}")):
                data = packed
            if plan.from_index and name in INDEX_CHUNK_FILES:
                continue
            if name == "x.npy" and plan.x_held is not None:
                data = int((~plan.x_held).sum()) * (data // rows)
            plan.read_bytes += data
        return plan

    def _fetch_chunk(self, k: int, tmp: Path, plan: "_ChunkPlan", held: HeldRuns, out: Fetched,
                     pace: Pace | None) -> None:
        for name in CHUNK_FILES:
            if plan.from_index and name in INDEX_CHUNK_FILES:
                _link_or_copy(self.folder / index_dir(k) / name, tmp / name)
                out.reused_files += self._entry(k, name)["data_bytes"]
            elif name == "x.npy" and plan.x_held is not None:
                self._assemble_x(k, tmp / name, plan.x_held, held, out, pace)
            else:
                out.chunk_files += self._copy_file(k, name, tmp / name, pace)

    def _assemble_x(self, k: int, dst: Path, mask: np.ndarray, held: HeldRuns, out: Fetched,
                    pace: Pace | None) -> None:
        """Chunk k's x.npy from the rows the folder holds (`mask`) and the others read from the
        store, a slab at a time (_slab_bytes); checked whole against the manifest's sha256
        (on a mismatch, copied from the store instead)."""
        e = self._entry(k, "x.npy")
        new = _NewRows(dst, np.dtype(e["dtype"]), tuple(e["shape"]), out)
        x = new.rows
        row_bytes = e["data_bytes"] // max(1, x.shape[0])
        held.fill(k, x)
        missing = np.flatnonzero(~mask)
        out.hold(missing)
        a = 0
        while a < missing.size:
            idx = missing[a:a + max(1, _slab_bytes(pace) // max(1, row_bytes))]
            a += idx.size
            (block,) = self.read_rows([(k, idx)], out)
            x[idx] = block
            out.chunk_files += block.nbytes
            if pace is not None:
                pace.spend(block.nbytes)
        out.drop(missing)
        del x
        offset = new.close()
        out.reused_files += int(mask.sum()) * row_bytes
        if sha256_of(dst, offset) != e["sha256"]:  # the folder's runs were not the store's rows
            log.warning("chunk %d's x.npy assembled from the rows held differs from the store's "
                        "(sha256): copying it from the store", k)
            out.reused_files -= int(mask.sum()) * row_bytes
            out.chunk_files += self._copy_file(k, "x.npy", dst)

    def _index(self, k: int, out: Fetched) -> tuple[np.ndarray, np.ndarray]:
        """Chunk k's nodes and indptr, from the folder's index-<k> (made from its copy, or read
        from the store whole, when missing)."""
        name = index_dir(k)
        if self._usable_index(k):
            out.reused_files += sum(self._entry(k, f)["data_bytes"] for f in INDEX_CHUNK_FILES)
            if k in self._index_maps:
                return self._index_maps[k]
        else:
            copy = self.folder / chunk_dir(k)

            def write(tmp: Path) -> None:
                for f in INDEX_CHUNK_FILES:
                    if chunk_dir(k) in self._checked and copy.is_dir():
                        _link_or_copy(copy / f, tmp / f)
                        out.reused_files += self._entry(k, f)["data_bytes"]
                    else:
                        out.halo_index += self._copy_file(k, f, tmp / f)
            self._atomically(name, write)
        self._index_maps[k] = tuple(map_npy(self.folder / name / f) for f in INDEX_CHUNK_FILES)
        return self._index_maps[k]

    def _chunk_sources(self, k: int) -> np.ndarray:
        """The distinct sources of owned chunk k's in-edges (its copy's indices), sorted."""
        if k not in self._sources:
            self._sources[k] = distinct([map_npy(self.folder / chunk_dir(k) / "indices.npy")])
        return self._sources[k]

    def _fetch_halo(self, owned: Sequence[int], tmp: Path, out: Fetched, pace: Pace | None = None,
                    held_stable: bool = True) -> None:
        owned = list(owned)
        # The halo from the owned chunks' local copies, as build_local_graph finds it.
        uniq = distinct([self._chunk_sources(k) for k in owned])
        chunk_u = np.empty(uniq.size, dtype=self.assignment.dtype)
        for lo in range(0, uniq.size, MAP_BLOCK):
            chunk_u[lo:lo + MAP_BLOCK] = self.assignment.chunk_of(uniq[lo:lo + MAP_BLOCK])
        out.hold(uniq, chunk_u)
        halo = ~np.isin(chunk_u, owned)
        ids, chunks = uniq[halo].astype(np.int64), chunk_u[halo].astype(np.int32)
        self._last_sources = (tuple(sorted(owned)), uniq, chunk_u)  # the view's build needs them too
        out.drop(uniq, chunk_u)
        del uniq, chunk_u, halo
        order = np.lexsort((ids, chunks))
        ids, chunks = ids[order], chunks[order]
        deg = np.empty(ids.size, dtype=np.int64)
        out.hold(ids, chunks, deg)
        store_row = np.empty(ids.size, dtype=np.int64)
        out.hold(store_row)
        bounds = np.flatnonzero(np.r_[True, chunks[1:] != chunks[:-1], True]) if ids.size else np.zeros(1, int)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            k = int(chunks[a])
            nodes, indptr = self._index(k, out)  # memory maps of the folder's index-<k>
            rows = np.searchsorted(nodes, ids[a:b])
            if rows.size and (rows[-1] >= nodes.size or not np.array_equal(nodes[rows], ids[a:b])):
                raise ChunkStoreError(f"chunk store file {self.store / chunk_dir(k) / 'nodes.npy'} lacks "
                                      f"nodes the assignment puts in chunk {k}; {_FIX}")
            store_row[a:b] = rows
            deg[a:b] = indptr[rows + 1] - indptr[rows]
            del nodes, indptr
        record = {"owned": sorted(owned), "store": self.digest}
        if not self.as_read:  # as read, the steps fetch the rows they read (halo_rows.py)
            stable = self.stable_of(owned)
            if stable is None:
                xpos = self._fetch_runs(tmp, chunks, store_row, bounds, out, pace)
            else:
                xpos, record["rows_from"] = self._fetch_runs_beside(stable, tmp, chunks, store_row, out, pace,
                                                                    held_stable)
            np.save(tmp / "xpos.npy", xpos)
            out.drop(xpos)
        np.save(tmp / "ids.npy", ids)
        np.save(tmp / "chunk.npy", chunks.astype(np.int32))
        np.save(tmp / "deg.npy", deg)
        np.save(tmp / "row.npy", store_row)
        out.drop(ids, chunks, deg, store_row)
        files = {name: {"size": (tmp / name).stat().st_size, "crc32": crc32_of(tmp / name)}
                 for name in self.halo_files}
        (tmp / "fetched.json").write_text(json.dumps({**record, "files": files}, indent=1))

    def _stable(self, stable: Sequence[int]) -> tuple[str, np.ndarray, dict]:
        """The stable halo's folder name, runs (xruns.npy), and what a halo beside it records of
        it (its x.npy's rows and CRC-32): written once a job, so read once a process."""
        name = halo_key(stable)
        if self._stable_runs is None or self._stable_runs[0] != name:
            crc = json.loads((self.folder / name / "fetched.json").read_text())["files"]["x.npy"]["crc32"]
            self._stable_runs = (name, load_npy(self.folder / name / "xruns.npy"),
                                 {"halo": name, "rows": int(map_npy(self.folder / name / "x.npy").shape[0]),
                                  "crc32": crc})
        return self._stable_runs

    def _fetch_runs_beside(self, stable: Sequence[int], tmp: Path, chunks: np.ndarray, store_row: np.ndarray,
                           out: Fetched, pace: Pace | None, held: bool) -> tuple[np.ndarray, dict]:
        """The halo's rows beside the stable halo's: a row that one holds is its row there (no
        copy; counted `reused` when `held`, the halo kept from a fetch before), the others' runs
        written to tmp (_fetch_runs) and placed after its rows. Returns each halo row's position
        and the record naming the stable halo (fetched.json)."""
        _, runs, record = self._stable(stable)
        split = record["rows"]
        xpos = locate(runs, chunks, store_row)
        out.hold(xpos)
        rest = np.flatnonzero(xpos < 0)
        codec = codec_of(self.manifest)
        if held:
            out.reused += (xpos.size - rest.size) * codec.columns * codec.dtype.itemsize
        c = chunks[rest]
        bounds = np.flatnonzero(np.r_[True, c[1:] != c[:-1], True]) if c.size else np.zeros(1, int)
        own = self._fetch_runs(tmp, c, store_row[rest], bounds, out, pace)
        xpos[rest] = own + split
        out.drop(own)
        return xpos, record

    def _fetch_runs(self, tmp: Path, chunks: np.ndarray, store_row: np.ndarray, bounds: np.ndarray,
                    out: Fetched, pace: Pace | None) -> np.ndarray:
        """The halo's feature rows into tmp as runs (held_runs.py), returning each row's position
        in its x.npy (counted as held: the caller drops it): the rows this folder holds
        are taken from it (a run held whole, or the rows of one held in part), the others read
        from the store, about _RUNS_SLAB bytes at a time (a bucket's requests in parallel), or
        _PACED_SLAB while a fetch ahead keeps to its budget."""
        from grappa.data.s3.source import GAP_BYTES, runs_of
        codec = codec_of(self.manifest)
        row_bytes = codec.columns * codec.dtype.itemsize
        gap = GAP_BYTES if self.remote is not None else 0  # a folder's rows are read exactly
        parts = []  # per halo chunk: (chunk, first rows, end rows, halo rows in each)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            rows = store_row[a:b]
            i, j = runs_of(rows, row_bytes, gap)
            parts.append((np.full(i.size, int(chunks[a]), np.int64), rows[i], rows[j - 1] + 1, j - i))
        k, lo, hi, want = (np.concatenate([p[c] for p in parts]) if parts else np.zeros(0, np.int64)
                           for c in range(4))
        at = np.cumsum(hi - lo) - (hi - lo)  # each run's first row in x.npy
        n = int((hi - lo).sum())
        run_of_row = np.repeat(np.arange(lo.size), want)
        out.hold(run_of_row, k, lo, hi, want, at)
        xpos = at[run_of_row] + store_row - lo[run_of_row]
        out.hold(xpos)
        out.drop(run_of_row)
        np.save(tmp / "xruns.npy", np.stack([k, lo, hi, at], axis=1).reshape(-1, 4))
        if not n:  # no halo (one worker, or every chunk owned): an empty x.npy
            np.save(tmp / "x.npy", np.empty((0, codec.columns), dtype=codec.dtype))
            out.drop(k, lo, hi, want, at)
            return xpos
        new = _NewRows(tmp / "x.npy", codec.dtype, (n, codec.columns), out)
        x_out = new.rows
        held, todo = self._held(), np.ones(lo.size, dtype=bool)
        for c in np.unique(k).tolist():
            sel = np.flatnonzero(k == c)
            todo[sel[held.take(c, lo[sel], hi[sel], x_out, at[sel])]] = False
        out.reused += int(want[~todo].sum()) * row_bytes
        todo = np.flatnonzero(todo)
        first_of = {int(chunks[a]): (a, b) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())}
        runs = self._runs_not_held(held, tuple(a[todo] for a in (k, lo, hi, want, at)),
                                   lambda c: store_row[slice(*first_of[c])], x_out, out, row_bytes)
        out.drop(k, lo, hi, want, at)
        k, lo, hi, want, at = runs
        out.hold(*runs)
        size = (hi - lo) * row_bytes
        if pace is not None:  # the rows are paced too (the index is small)
            pace.settle(int(size.sum()))
        ends, start = np.cumsum(size), 0
        while start < size.size:  # runs in slabs, their requests together
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] - size[start] + _slab_bytes(pace), "right")))
            slab, start = np.arange(start, stop), stop
            cs = np.unique(k[slab]).tolist()
            of = [slab[k[slab] == c] for c in cs]
            blocks = self.read_rows([(c, spans(lo[r], hi[r] - lo[r])) for c, r in zip(cs, of)], out)
            out.hold(*blocks)
            for r, block in zip(of, blocks):
                x_out[spans(at[r], hi[r] - lo[r])] = block
            out.drop(*blocks)
            out.halo_rows += int(want[slab].sum()) * row_bytes
            out.over_read += int((hi - lo - want)[slab].sum()) * row_bytes
            if pace is not None:
                pace.spend(int(size[slab].sum()))
        del x_out
        new.close()
        out.drop(k, lo, hi, want, at)
        return xpos

    @staticmethod
    def _runs_not_held(held: HeldRuns, runs: tuple[np.ndarray, ...], halo_rows, x_out: np.ndarray,
                       out: Fetched, row_bytes: int) -> tuple[np.ndarray, ...]:
        """Of `runs` (chunk, first row, end row, halo rows in each, position in x_out), none held
        whole, the rows the folder holds are copied into x_out; returns what is left to read, as
        runs of the same form: a run held in part leaves the stretches it lacks.
        `halo_rows(c)`: chunk c's halo rows (ascending), to tell its rows from the gaps'."""
        k, lo, hi, want, at = runs
        whole = ~np.isin(k, held.chunks())  # of chunks the folder holds nothing of: left as they are
        pieces = [tuple(a[whole] for a in runs)]
        for c in np.unique(k[~whole]).tolist():
            sel = np.flatnonzero(k == c)
            n = hi[sel] - lo[sel]
            rows, pos = spans(lo[sel], n), spans(at[sel], n)
            out.hold(rows, pos)
            got = held.take_rows(c, rows, x_out, pos)
            halo = halo_rows(c)
            i = np.minimum(np.searchsorted(halo, rows), halo.size - 1)
            wanted = halo[i] == rows
            out.reused += int(np.count_nonzero(got & wanted)) * row_bytes
            out.drop(rows, pos)
            rows, pos, wanted = rows[~got], pos[~got], wanted[~got]
            cut = np.flatnonzero((np.diff(rows) != 1) | (np.diff(pos) != 1)) + 1  # adjacent in both
            first, end = np.r_[0, cut].astype(np.int64), np.r_[cut, rows.size].astype(np.int64)
            count = np.r_[0, np.cumsum(wanted)]
            if rows.size:
                pieces.append((np.full(first.size, c, np.int64), rows[first], rows[end - 1] + 1,
                               count[end] - count[first], pos[first]))
        return tuple(np.concatenate([p[i] for p in pieces]) for i in range(5))

    def _held(self) -> HeldRuns:
        """The store rows this folder holds that this process wrote or checked: chunk copies, and
        the runs of fetched halos."""
        held = HeldRuns()
        for k in range(self.num_chunks):
            if chunk_dir(k) in self._checked and (self.folder / chunk_dir(k)).is_dir():
                held.add_chunk(k, map_npy(self.folder / chunk_dir(k) / "x.npy"))
        for name in sorted(n for n in list(self._checked) if n.startswith("halo-")):
            if (self.folder / name / "xruns.npy").is_file():  # a halo folder, once written, never changes
                self._halo_runs[name] = held.add_halo(self.folder / name, self._halo_runs.get(name))
        return held

    def read_rows(self, reads: Sequence[tuple[int, np.ndarray]], out: Fetched) -> list[np.ndarray]:
        """Feature rows of several chunks from the store: per (chunk k, rows ascending and
        distinct), those rows; a bucket's requests all at once (s3.source.S3Source.take_many)."""
        if self.remote is None:
            return [self._store_file(k, "x.npy")[rows] for k, rows in reads]
        for k, _ in reads:
            self._store_file(k, "x.npy")
        blocks, over = self.remote.take_many([(f"{chunk_dir(k)}/x.npy", rows) for k, rows in reads])
        out.over_read += over
        return blocks

    # -- checks before use ---------------------------------------------------------------------
    def _usable_chunk(self, k: int) -> bool:
        """Chunk k's copy is there and intact (checked once a process: this one wrote it, or a
        size and sha256 check against the manifest)."""
        return self._usable_files(k, chunk_dir(k), CHUNK_FILES)

    def _usable_index(self, k: int) -> bool:
        return self._usable_files(k, index_dir(k), INDEX_CHUNK_FILES)

    def _usable_files(self, k: int, name: str, names: Sequence[str]) -> bool:
        d = self.folder / name
        if name in self._checked:
            return d.is_dir()
        if not d.is_dir():
            return False
        for f in names:
            e = self._entry(k, f)
            try:
                offset = map_npy(d / f).offset
            except (ValueError, OSError):
                return False
            if (d / f).stat().st_size - offset != e["data_bytes"] or sha256_of(d / f, offset) != e["sha256"]:
                return False
        self._checked.add(name)
        return True

    def _usable_halo(self, owned: Sequence[int]) -> bool:
        name = halo_key(owned)
        d = self.folder / name
        if name in self._checked:
            return d.is_dir()
        try:
            rec = json.loads((d / "fetched.json").read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(rec, dict) or rec.get("owned") != sorted(owned) or rec.get("store") != self.digest:
            return False
        files = rec.get("files")
        if not isinstance(files, dict) or set(files) != set(self.halo_files):  # damaged, or the other mode
            return False
        stable = self.stable_of(owned)
        if rec.get("rows_from") is not None or stable is not None:  # its rows beside the stable halo's
            if stable is None or not self._usable_halo(stable) or \
                    rec.get("rows_from") != self._stable(stable)[2]:
                return False
        for f in self.halo_files:
            p, want = d / f, files[f]
            if not isinstance(want, dict) or not p.is_file() or p.stat().st_size != want.get("size") or \
                    crc32_of(p) != want.get("crc32"):
                return False
        self._checked.add(name)
        return True

    # -- use and upkeep --------------------------------------------------------------------------
    def view(self, owned: Sequence[int], counts: Fetched | None = None) -> "LocalView":
        """The round of `owned` (fetched); `counts` grows by the rows an as-read round fetches."""
        view = LocalView(self, owned, counts if counts is not None else Fetched())
        last, self._last_sources = self._last_sources, None
        if last is not None and last[0] == tuple(sorted(owned)):
            view.sources = last[1:]
        return view

    def entries(self, owned: Sequence[int]) -> set[str]:
        """The folder entries an owned set's round reads, and the chunks' index kept for the job."""
        stable = self.stable_of(owned)
        return {chunk_dir(k) for k in owned} | {halo_key(owned), rows_key(owned)} | \
            {index_dir(k) for k in range(self.num_chunks)} | ({halo_key(stable)} if stable else set())

    def disk_bytes(self, exclude: set[str] = frozenset()) -> int:
        """Bytes of the files in the folder (a fetch's `.tmp-` files included), but `exclude`'s;
        a file linked twice (a chunk copy's index) counted once."""
        total, seen = 0, set()
        for top in os.listdir(self.folder):
            if top in exclude:
                continue
            for root, _, files in os.walk(self.folder / top):
                for f in files:
                    try:
                        st = os.stat(os.path.join(root, f))
                    except FileNotFoundError:  # a background fetch renamed or removed it
                        continue
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_size
        return total

    def evict(self, keep: set[str]) -> None:
        """Remove every finished entry but `keep`'s (a fetch's `.tmp-` folder is its own)."""
        for entry in self.folder.iterdir():
            if entry.name not in keep and not entry.name.startswith(_TMP):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                self._checked.discard(entry.name)
                self._forget(entry.name)
        on_disk = {int(n.name.split("-", 1)[1]) for n in self.folder.iterdir() if n.name.startswith("chunk-")}
        self._sources = {k: v for k, v in self._sources.items() if k in on_disk}
        self._index_maps = {k: v for k, v in self._index_maps.items() if index_dir(k) in keep}


@dataclass
class _ChunkPlan:
    from_index: bool = False  # nodes and indptr from the folder's index-<k>
    x_held: np.ndarray | None = None  # x.npy's rows held in the folder, assembled from them
    read_bytes: int = 0  # what is read from the store


def _link_or_copy(src: Path, dst: Path) -> None:
    """dst the same file as src (checked already): a hard link, or a copy where links fail."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class LocalView:
    """What build_local_graph reads of the store, served from a LocalCopy: an owned chunk's maps
    are its copies; any other chunk's are its halo rows only, in ascending id (nodes, x, and an
    indptr whose differences are their degrees), so a row found by searching nodes is the same
    node's row, and the degree the same, as in the store. An as-read round's halo rows come from
    the store as they are read (halo_rows.HaloRows)."""

    def __init__(self, copy: LocalCopy, owned: Sequence[int], counts: Fetched) -> None:
        self.manifest, self.num_chunks, self.assignment = copy.manifest, copy.num_chunks, copy.assignment
        self.path = copy.store
        self.bytes_hashed = 0  # checked when fetched (LocalCopy), nothing read here to check it
        self.folder, self.owned = copy.folder, set(owned)
        halo = copy.folder / halo_key(owned)
        self._halo = {f[:-4]: map_npy(halo / f) for f in copy.halo_files}
        stable = copy.stable_of(owned)  # its rows beside the stable halo's (checked by the fetch)
        self._stable = map_npy(copy.folder / halo_key(stable) / "x.npy") if stable is not None else None
        self.rows = HaloRows(copy, halo, copy.folder / rows_key(owned), counts) if copy.as_read else None
        self._maps: dict[int, dict[str, np.ndarray]] = {}
        self.sources: tuple[np.ndarray, np.ndarray] | None = None  # given by LocalCopy.view

    def take_sources(self, chunks: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """The owned chunks' distinct in-edge sources and the chunk of each, as the fetch found
        them (None: not found in this process), given once: build_local_graph need not find them
        again."""
        got, self.sources = self.sources, None
        return got if got is not None and set(chunks) == self.owned else None

    def warm(self, ids: np.ndarray, pace=None) -> int:
        """Fetch now, before the steps read them, the as-read halo rows of the global `ids` (those
        in this view's halo; others are ignored), paced by `pace`; returns how many rows that is.
        A no-op when the halo rows came whole."""
        h = self._halo
        if self.rows is None or not h["ids"].size:  # rows whole, or no halo (one worker)
            return 0
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        ids = ids[~np.isin(self.assignment.chunk_of(ids), list(self.owned))] if ids.size else ids
        # the folder's order is (chunk, id): one sorted key for both
        span = np.int64(self.manifest["num_nodes"])
        folder_key = h["chunk"].astype(np.int64) * span + h["ids"]
        want = self.assignment.chunk_of(ids).astype(np.int64) * span + ids
        pos = np.searchsorted(folder_key, want)
        pos = pos[(pos < folder_key.size) & (folder_key[np.minimum(pos, folder_key.size - 1)] == want)]
        with self.rows._lock:
            self.rows.fetch(pos, pace, ahead=True)
        return int(pos.size)

    def chunk_maps(self, k: int) -> dict[str, np.ndarray]:
        if k not in self._maps:
            if k in self.owned:
                d = self.folder / chunk_dir(k)
                self._maps[k] = {name[:-4]: map_npy(d / name) for name in CHUNK_FILES}
                self._maps[k]["x"] = rows_view(self.manifest, self._maps[k]["x"])
            else:
                h = self._halo
                a, b = np.searchsorted(h["chunk"], [k, k + 1])
                deg = np.asarray(h["deg"][a:b])
                x = RunRows(h["x"], h["xpos"][a:b], self._stable) if self.rows is None else \
                    HaloChunkRows(self.rows, int(a), int(b - a))
                self._maps[k] = {"nodes": h["ids"][a:b], "x": rows_view(self.manifest, x),
                                 "indptr": np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)}
        return self._maps[k]
