"""A [2, E] int64 .npy (sources in row 0, destinations in row 1) written block by block.

The column count E is known first, so the file is laid out at once: row 0's bytes start after
the header, row 1's E x 8 bytes later, and each block of columns is two positioned writes. The
manifest's sha256 covers the data in file order (row 0, then row 1), so it is read back once the
file is complete. Memory: one block.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from grappa.data.store.npywriter import _header
from grappa.util.files import sha256_of
from grappa.util.npy import HEADER_LOCK



class ColumnsWriter:
    def __init__(self, path: Path, columns: int) -> None:
        self.path, self.columns, self.written = Path(path), int(columns), 0
        header = _header(np.dtype(np.int64), (2, self.columns))
        self.offset = len(header)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(self._fd, header)
        os.ftruncate(self._fd, self.offset + 16 * self.columns)

    def append(self, src: np.ndarray, dst: np.ndarray) -> None:
        src = np.ascontiguousarray(src, dtype=np.int64)
        dst = np.ascontiguousarray(dst, dtype=np.int64)
        at = self.offset + 8 * self.written
        os.pwrite(self._fd, memoryview(src).cast("B"), at)
        os.pwrite(self._fd, memoryview(dst).cast("B"), at + 8 * self.columns)
        self.written += src.size

    def close(self) -> tuple[list[int], str]:
        """The shape and the sha256 of the data."""
        os.close(self._fd)
        if self.written != self.columns:
            raise RuntimeError(f"{self.path}: wrote {self.written} columns, expected {self.columns}")
        return [2, self.columns], sha256_of(self.path, self.offset)



def data_offset(path: Path) -> tuple[int, tuple[int, ...]]:
    """Where a .npy's data starts, and its shape."""
    with open(path, "rb") as fh, HEADER_LOCK:  # numpy parses it with ast (util/npy.py)
        major, _ = np.lib.format.read_magic(fh)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, _ = read(fh)
        return fh.tell(), shape
