"""A .npy file written block by block, its data hashed as it is written.

The row count may be unknown until the end: numpy pads every header so the first dimension can
grow to 21 digits, so the header is rewritten in place at close with the same length. The
manifest's checksum covers the data (everything after the header); the reader checks the header
against the manifest's dtype and shape.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

import numpy as np


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    return buf.getvalue()


class NpyWriter:
    def __init__(self, path: Path, dtype: Any, row_shape: tuple[int, ...] = (),
                 rows: Optional[int] = None) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.expected_rows = rows
        self.rows = 0
        self._sha = hashlib.sha256()
        self._bytes = 0
        self._fh = open(path, "wb")
        self._header_len = len(_header(self.dtype, (rows or 0,) + self.row_shape))
        self._fh.write(_header(self.dtype, (rows or 0,) + self.row_shape))

    def append(self, rows: np.ndarray) -> None:
        arr = np.ascontiguousarray(rows, dtype=self.dtype)
        if arr.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: rows of shape {arr.shape[1:]}, expected {self.row_shape}")
        view = memoryview(arr).cast("B")
        self._fh.write(view)
        self._sha.update(view)
        self._bytes += arr.nbytes
        self.rows += arr.shape[0]

    def close(self) -> dict[str, Any]:
        """Finish the file; returns its manifest entry."""
        if self.expected_rows is not None and self.rows != self.expected_rows:
            self._fh.close()
            raise RuntimeError(f"{self.path}: wrote {self.rows} rows, expected {self.expected_rows}")
        shape = (self.rows,) + self.row_shape
        if self.expected_rows is None:
            header = _header(self.dtype, shape)
            if len(header) != self._header_len:  # cannot happen with numpy's growth padding
                raise RuntimeError(f"{self.path}: .npy header changed length")
            self._fh.seek(0)
            self._fh.write(header)
        self._fh.close()
        return {"dtype": self.dtype.str, "shape": list(shape), "data_bytes": self._bytes,
                "sha256": self._sha.hexdigest()}
