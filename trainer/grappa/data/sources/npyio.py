"""Block readers for .npy files, .npz members and gzipped CSV, in bounded memory.

A .npy file is read through its header and plain reads at row offsets (never a memory map:
mapped pages count as the reader's resident memory until unmapped). An .npz member is read as a
stream through the zip (np.savez_compressed members are deflated, so only forward reads are
possible); a gzipped CSV in byte blocks cut at line ends and parsed with np.loadtxt.
"""
from __future__ import annotations

import gzip
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.util.npy import HEADER_LOCK


@dataclass(frozen=True)
class NpyHeader:
    """Shape and dtype of a stored array, and where its data starts."""

    origin: str            # file path, or "archive.npz:member" for display
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int       # bytes from the start of the file (or member)

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_items(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1


def _read_header(fh: BinaryIO, origin: str) -> NpyHeader:
    try:
        version = np.lib.format.read_magic(fh)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        with HEADER_LOCK:  # numpy parses the header with ast (grappa/util/npy.py)
            shape, fortran, dtype = reader(fh, max_header_size=1 << 16)
    except (ValueError, OSError, EOFError) as err:
        raise DatasetError(f"{origin} is not a .npy array ({err}); write it with numpy.save") from None
    if dtype.hasobject:
        raise DatasetError(f"{origin} holds Python objects (dtype {dtype}); save a numeric array")
    return NpyHeader(origin, tuple(int(s) for s in shape), dtype, bool(fortran), fh.tell())


def npy_header(path: Path) -> NpyHeader:
    if not path.is_file():
        raise DatasetError(f"{path} does not exist")
    with open(path, "rb") as fh:
        return _read_header(fh, str(path))


def npz_header(path: Path, member: str) -> NpyHeader:
    with MemberStream(path, member) as stream:
        return stream.header


def _open_member(path: Path, member: str) -> tuple[zipfile.ZipFile, BinaryIO]:
    if not path.is_file():
        raise DatasetError(f"{path} does not exist")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise DatasetError(f"{path} is not an .npz archive ({err})") from None
    name = member if member.endswith(".npy") else member + ".npy"
    if name not in archive.namelist():
        members = ", ".join(n.removesuffix(".npy") for n in archive.namelist())
        archive.close()
        raise DatasetError(f"{path} has no array '{member}' (it has: {members})")
    return archive, archive.open(name)


def read_rows(header: NpyHeader, path: Path, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of a C-ordered .npy file by a plain read at their offset."""
    if header.fortran_order and len(header.shape) > 1:
        raise DatasetError(f"{header.origin} is stored in Fortran order; save it with "
                           "numpy.save(path, numpy.ascontiguousarray(a))")
    count = (stop - start) * header.row_items
    offset = header.data_offset + start * header.row_items * header.dtype.itemsize
    arr = np.fromfile(path, dtype=header.dtype, count=count, offset=offset)
    if arr.size != count:
        raise DatasetError(f"{header.origin} is truncated: rows {start}..{stop} are not all there")
    return arr.reshape((stop - start,) + header.shape[1:])


class MemberStream:
    """Forward-only reader of an .npz member: `take(count)` returns the next `count` items."""

    def __init__(self, path: Path, member: str, skip_items: int = 0) -> None:
        self._archive, self._fh = _open_member(path, member)
        self.header = _read_header(self._fh, f"{path}:{member}")
        if skip_items:
            self._fh.seek(self.header.data_offset + skip_items * self.header.dtype.itemsize)

    def take(self, count: int) -> np.ndarray:
        nbytes = count * self.header.dtype.itemsize
        buf = self._fh.read(nbytes)
        if len(buf) != nbytes:
            raise DatasetError(f"{self.header.origin} is truncated")
        return np.frombuffer(buf, dtype=self.header.dtype)

    def close(self) -> None:
        self._fh.close()
        self._archive.close()

    def __enter__(self) -> "MemberStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def csv_blocks(path: Path, dtype: type, columns: Optional[int], block_bytes: int = 1 << 24
               ) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, [m, columns] array) per block of a gzipped (or plain) headerless CSV."""
    if not path.is_file():
        raise DatasetError(f"{path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    row = 0
    tail = b""
    with opener(path, "rb") as fh:
        while True:
            try:
                buf = fh.read(block_bytes)
            except (OSError, EOFError) as err:
                raise DatasetError(f"{path} cannot be read ({err}); download it again") from None
            data = tail + buf
            if not buf:
                if data.strip():
                    yield row, _parse(data, path, row, dtype, columns)
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                tail = data
                continue
            block, tail = data[:cut], data[cut:]
            arr = _parse(block, path, row, dtype, columns)
            yield row, arr
            row += arr.shape[0]


def _parse(block: bytes, path: Path, first_row: int, dtype: type, columns: Optional[int]) -> np.ndarray:
    try:
        arr = np.loadtxt(io.BytesIO(block), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as err:
        raise DatasetError(f"{path}: cannot parse the rows after row {first_row} ({err}); expected "
                           f"{columns or 'numeric'} comma-separated values per line") from None
    if columns is not None and arr.shape[1] != columns:
        raise DatasetError(f"{path}: rows from {first_row} have {arr.shape[1]} columns, "
                           f"expected {columns}")
    return arr
