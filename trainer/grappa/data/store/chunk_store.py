"""Reader of the chunk store (format 2): every file is checked against the manifest before use."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grappa.data.errors import ChunkStoreError
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.assign import ChunkAssignment
from grappa.data.store.feature_codec import rows_view
from grappa.data.store.manifest import CHUNK_OF, chunk_dir, read_manifest
from grappa.util.files import sha256_of
from grappa.util.npy import map_npy

# Files whose checksum already matched in this process: (path, sha256) -> size. Hash once.
_VERIFIED: dict[tuple[str, str], int] = {}
_FIX = "the store must be re-prepared (delete it and run `grappa prepare`)"


@dataclass
class Chunk:
    """One chunk as tensors. In-edges are CSR by destination over `nodes`: node i's sources are
    indices[indptr[i]:indptr[i+1]] (global ids)."""

    k: int
    nodes: torch.Tensor        # int64 [n_k], sorted global ids
    indptr: torch.Tensor       # int64 [n_k + 1]
    indices: torch.Tensor      # int64 [E_k] global source ids
    x: torch.Tensor            # float32 [n_k, f]
    y: torch.Tensor            # int64 [n_k], -1 = unlabelled
    train_mask: torch.Tensor   # bool [n_k]
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def in_degree(self) -> torch.Tensor:
        """Global in-degree (self-loops excluded): every in-edge of a node lives in its chunk."""
        return self.indptr[1:] - self.indptr[:-1]

    @property
    def edge_index(self) -> torch.Tensor:
        """int64 [2, E_k] global (src, dst) of every in-edge of the chunk's nodes."""
        return torch.stack([self.indices, torch.repeat_interleave(self.nodes, self.in_degree)])



class ChunkStore:
    """Read access to a prepared store. `bytes_read` counts array bytes loaded for use;
    `bytes_hashed` counts bytes read only to verify checksums. With `remote` (a data.s3 Bucket),
    `path` is the bucket's local mirror (data/s3/mirror.py): a file is downloaded whole when
    first opened (`bytes_downloaded`), then checked like any other."""

    def __init__(self, path: str | Path, remote=None) -> None:
        self.path = Path(path)
        self.remote = remote
        self.bytes_downloaded = 0
        self.manifest: dict[str, Any] = read_manifest(self.path)
        self.num_chunks: int = int(self.manifest["num_chunks"])
        self.bytes_read = 0
        self.bytes_hashed = 0
        self._chunk_of: torch.Tensor | None = None
        self._nodes: dict[int, np.ndarray] = {}
        self._maps: dict[str, np.ndarray] = {}

    def _verified(self, rel: str, expected: dict[str, Any]) -> np.ndarray:
        """The file as a read-only memory map, after its header and data checksum matched."""
        if self.remote is not None:
            return self._mirrored(rel, expected)
        return self._verified_here(rel, expected)

    def _verified_here(self, rel: str, expected: dict[str, Any]) -> np.ndarray:
        path = self.path / rel
        if not path.is_file():
            raise ChunkStoreError(f"chunk store file {path} is missing; {_FIX}")
        try:
            arr = map_npy(path)
        except (ValueError, OSError) as err:
            raise ChunkStoreError(f"chunk store file {path} is corrupt ({err}); {_FIX}") from None
        if arr.dtype.str != expected["dtype"] or list(arr.shape) != expected["shape"]:
            raise ChunkStoreError(f"chunk store file {path} is corrupt (dtype/shape {arr.dtype.str} "
                                  f"{list(arr.shape)}, manifest says {expected['dtype']} "
                                  f"{expected['shape']}); {_FIX}")
        size = path.stat().st_size
        key = (str(path.resolve()), expected["sha256"])
        if _VERIFIED.get(key) != size:
            offset = arr.offset
            if size - offset != expected["data_bytes"] or \
                    sha256_of(path, offset) != expected["sha256"]:
                raise ChunkStoreError(
                    f"chunk store file {path} is corrupt (size or sha256 differs from manifest.json); {_FIX}")
            self.bytes_hashed += size - offset
            _VERIFIED[key] = size
        return arr

    def _mirrored(self, rel: str, expected: dict[str, Any]) -> np.ndarray:
        """A mirrored file, downloaded when missing or when the copy there fails its check."""
        from grappa.data.s3.mirror import download
        if (self.path / rel).is_file():
            try:
                return self._verified_here(rel, expected)
            except ChunkStoreError:
                pass  # a stale or cut copy: the bucket's is fetched again
        self.bytes_downloaded += download(self.remote, rel, self.path / rel)
        try:
            return self._verified_here(rel, expected)
        except ChunkStoreError as err:
            raise ChunkStoreError(f"{self.remote.where}{rel} does not match the store's manifest "
                                  f"({err}); prepare the store in the bucket again") from None

    def _array(self, k: int, name: str) -> np.ndarray:
        """Chunk k's file as a verified, read-only memory map (opened once per store object)."""
        if not 0 <= k < self.num_chunks:
            raise ChunkStoreError(f"chunk {k} does not exist: the store has {self.num_chunks} chunks")
        rel = f"{chunk_dir(k)}/{name}"
        if rel not in self._maps:
            self._maps[rel] = self._verified(rel, self.manifest["chunks"][k]["files"][name])
        return self._maps[rel]

    def chunk_file(self, k: int, name: str) -> np.ndarray:
        """Chunk k's file `name` (e.g. "x.npy") as a verified, read-only memory map: what a pass
        over a few of a chunk's arrays opens without verifying the others."""
        return self._array(k, name)

    def chunk_maps(self, k: int) -> dict[str, np.ndarray]:
        """Chunk k's arrays as verified read-only memory maps, keyed by name without .npy: what a
        worker builds its local graph from without copying whole files."""
        maps = {name[:-4]: self._array(k, name) for name in
                ("nodes.npy", "indptr.npy", "indices.npy", "x.npy", "y.npy", "split.npy")}
        maps["x"] = rows_view(self.manifest, maps["x"])  # float32 values, whatever the encoding
        return maps

    @property
    def assignment(self) -> ChunkAssignment:
        """The chunk of any node id, computed (the store's chunk_of.npy holds the same values)."""
        m = self.manifest
        return ChunkAssignment(int(m["num_nodes"]), int(m["num_chunks"]), int(m["seed"]))

    def _load(self, k: int, name: str) -> np.ndarray:
        arr = np.array(self._array(k, name))
        self.bytes_read += arr.nbytes
        return arr

    def load_chunk(self, k: int) -> Chunk:
        split = torch.from_numpy(self._load(k, "split.npy"))
        return Chunk(
            k=k, nodes=torch.from_numpy(self._load(k, "nodes.npy")).long(),
            indptr=torch.from_numpy(self._load(k, "indptr.npy")),
            indices=torch.from_numpy(self._load(k, "indices.npy")).long(),
            x=torch.from_numpy(np.asarray(rows_view(self.manifest, self._load(k, "x.npy")))).float(),
            y=torch.from_numpy(self._load(k, "y.npy")).long(),
            train_mask=split == SPLIT_TRAIN, val_mask=split == SPLIT_VAL, test_mask=split == SPLIT_TEST)

    def chunk_of(self) -> torch.Tensor:
        """Chunk id per global node (int64 [num_nodes])."""
        if self._chunk_of is None:
            arr = np.array(self._verified(CHUNK_OF, self.manifest["chunk_of"]))
            self.bytes_read += arr.nbytes
            self._chunk_of = torch.from_numpy(arr).long()
        return self._chunk_of

    def load_node_rows(self, global_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, in_degree) rows of arbitrary nodes (e.g. a halo), in the order given. Groups the
        ids by owning chunk and reads only those rows from memory-mapped, verified files."""
        ids = global_ids.long().view(-1)
        owner = torch.from_numpy(self.assignment.chunk_of(ids.numpy()))
        x = torch.empty(ids.numel(), int(self.manifest["num_features"]), dtype=torch.float32)
        deg = torch.empty(ids.numel(), dtype=torch.long)
        order = torch.sort(owner, stable=True).indices
        counts = torch.bincount(owner, minlength=self.num_chunks).tolist()
        start = 0
        for k, cnt in enumerate(counts):
            if cnt == 0:
                continue
            pos = order[start:start + cnt]
            start += cnt
            if k not in self._nodes:  # sorted global ids of chunk k: maps global id -> row
                self._nodes[k] = self._load(k, "nodes.npy")
            rows = np.searchsorted(self._nodes[k], ids[pos].numpy())
            sort = np.argsort(rows, kind="stable")  # ascending rows: sequential reads
            x_map, indptr = rows_view(self.manifest, self._array(k, "x.npy")), self._array(k, "indptr.npy")
            xr = np.asarray(x_map[rows[sort]], dtype=np.float32)
            dr = indptr[rows[sort] + 1] - indptr[rows[sort]]
            self.bytes_read += xr.shape[0] * x_map.strides[0] + 2 * indptr.itemsize * dr.size
            x[pos[torch.from_numpy(sort)]] = torch.from_numpy(xr)
            deg[pos[torch.from_numpy(sort)]] = torch.from_numpy(np.ascontiguousarray(dr))
        return x, deg


def open_store(cfg) -> ChunkStore:
    """The job's store (a TrainConfig's storeDir, or its storage.s3 bucket through the local
    mirror in storeDir)."""
    if cfg.storage.bucket_store is None:
        return ChunkStore(cfg.store_path)
    from grappa.data.s3.bucket import Bucket
    from grappa.data.s3.mirror import open_mirror
    bucket = Bucket(cfg.storage.bucket_store)
    open_mirror(bucket, cfg.store_path)
    return ChunkStore(cfg.store_path, remote=bucket)
