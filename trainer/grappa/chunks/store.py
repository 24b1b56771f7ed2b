"""Reader of the chunk store: every file is checked against the manifest before use."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grappa.chunks.errors import ChunkStoreError
from grappa.chunks.manifest import CHUNK_OF, chunk_dir, file_digest, read_manifest

# Files whose checksum already matched in this process: (path, sha256) -> size. Hash once.
_VERIFIED: dict[tuple[str, str], int] = {}


@dataclass
class Chunk:
    """One chunk as tensors; `intra` and `bridge` hold global ids, shape [2, E]."""

    k: int
    nodes: torch.Tensor        # int64 [n_k], sorted global ids
    intra: torch.Tensor        # int64 [2, E_k], src and dst in the chunk
    bridge: torch.Tensor       # int64 [2, B_k], src outside, dst inside
    x: torch.Tensor            # float32 [n_k, f]
    y: torch.Tensor            # int64 [n_k]
    train_mask: torch.Tensor   # bool [n_k]
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    in_degree: torch.Tensor    # int64 [n_k], global in-degree, self-loops excluded


class ChunkStore:
    """Read access to a prepared store. `bytes_read` counts array bytes loaded for use;
    `bytes_hashed` counts bytes read only to verify checksums."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest: dict[str, Any] = read_manifest(self.path)
        self.num_chunks: int = int(self.manifest["num_chunks"])
        self.bytes_read = 0
        self.bytes_hashed = 0
        self._chunk_of: torch.Tensor | None = None
        self._nodes: dict[int, np.ndarray] = {}

    def _verified(self, rel: str, expected: dict[str, Any]) -> Path:
        """Path of a file whose size and sha256 match the manifest, else ChunkStoreError."""
        path = self.path / rel
        fix = "the store must be re-prepared (delete it and run `grappa prepare`)"
        if not path.is_file():
            raise ChunkStoreError(f"chunk store file {path} is missing; {fix}")
        size = path.stat().st_size
        key = (str(path.resolve()), expected["sha256"])
        if _VERIFIED.get(key) == size:
            return path
        if size == expected["bytes"]:
            digest = file_digest(path)
            self.bytes_hashed += size
        if size != expected["bytes"] or digest["sha256"] != expected["sha256"]:
            raise ChunkStoreError(
                f"chunk store file {path} is corrupt (size or sha256 differs from manifest.json); {fix}")
        _VERIFIED[key] = size
        return path

    def _load(self, k: int, name: str, mmap: bool = False) -> np.ndarray:
        if not 0 <= k < self.num_chunks:
            raise ChunkStoreError(f"chunk {k} does not exist: the store has {self.num_chunks} chunks")
        rel = f"{chunk_dir(k)}/{name}"
        path = self._verified(rel, self.manifest["chunks"][k]["files"][name])
        arr = np.load(path, mmap_mode="r" if mmap else None)
        if not mmap:
            self.bytes_read += arr.nbytes
        return arr

    def load_chunk(self, k: int) -> Chunk:
        t = {name: torch.from_numpy(self._load(k, name + ".npy"))
             for name in ("nodes", "intra", "bridge", "x", "y", "masks", "in_degree")}
        masks = t.pop("masks")
        return Chunk(k=k, **t, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])

    def chunk_of(self) -> torch.Tensor:
        """Chunk id per global node (int64 [num_nodes])."""
        if self._chunk_of is None:
            path = self._verified(CHUNK_OF, self.manifest["chunk_of"])
            arr = np.load(path)
            self.bytes_read += arr.nbytes
            self._chunk_of = torch.from_numpy(arr)
        return self._chunk_of

    def load_node_rows(self, global_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, in_degree) rows of arbitrary nodes (e.g. a halo), in the order given. Groups the
        ids by owning chunk and reads only those rows from memory-mapped, verified files."""
        ids = global_ids.long().view(-1)
        owner = self.chunk_of()[ids]
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
            xr = self._load(k, "x.npy", mmap=True)[rows[sort]]
            dr = self._load(k, "in_degree.npy", mmap=True)[rows[sort]]
            self.bytes_read += xr.nbytes + dr.nbytes
            x[pos[torch.from_numpy(sort)]] = torch.from_numpy(np.ascontiguousarray(xr))
            deg[pos[torch.from_numpy(sort)]] = torch.from_numpy(np.ascontiguousarray(dr))
        return x, deg
