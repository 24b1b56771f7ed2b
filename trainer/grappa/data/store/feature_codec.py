"""How the chunk store keeps feature rows (dataset.featureDtype), and how readers get float32 back.

float32 and float16 rows are stored as they are. Two encodings shrink mostly-zero features, and
with them the store's disk, page cache and link (what a worker fetches each round):

- `binary`: features that are all 0 or 1 (Cora, Amazon) packed eight to a byte (numpy.packbits,
  little bit order): ceil(f / 8) bytes a row. Prepare refuses any other value, naming its row.
- `sparse`: each row as its non-zero entries, W (column, value) pairs, W the graph's largest
  count of non-zeros in a row (found by one more read of the features), rows with fewer padded
  with value 0: W x (2 or 4 + 4) bytes a row, the column a uint16 below 65,536 features. The
  values stay float32. Coauthor-Physics (8,415 word counts, at most 335 non-zero in a row):
  2,010 bytes instead of 33,660.

`auto` (the default) picks the smallest of the lossless ones from one read of the features:
binary where every value is 0 or 1, sparse where the (column, value) pairs take at most half of
float32's bytes, else float32 (`choose_encoding`). float16 loses precision, so only a user picks it.

Whatever the encoding, x.npy stays a 2-D array of fixed-size rows ([n_k, columns]), so fetching,
copying and counting rows work on stored rows unchanged; a reader that needs values wraps them in
`Codec.view` and gets float32 [.., f] by indexing. What crosses the store's link and what the
byte counters count is the stored row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

ENCODINGS = ("float32", "float16", "binary", "sparse")
BINARY, SPARSE, AUTO = "binary", "sparse", "auto"
LOSSLESS = ("float32", BINARY, SPARSE)  # what auto may choose: the values read back are the input's
_VALUE = np.dtype("<f4")  # a sparse entry's value


@dataclass(frozen=True)
class Codec:
    encoding: str
    num_features: int
    width: int = 0  # sparse: the (column, value) entries a row holds

    @property
    def index_dtype(self) -> np.dtype:
        return np.dtype("<u2" if self.num_features <= 1 << 16 else "<u4")

    @property
    def dtype(self) -> np.dtype:
        """x.npy's dtype."""
        return np.dtype(np.uint8 if self.encoding in (BINARY, SPARSE) else self.encoding)

    @property
    def columns(self) -> int:
        """x.npy's second dimension."""
        if self.encoding == BINARY:
            return (self.num_features + 7) // 8
        if self.encoding == SPARSE:
            return self.width * (self.index_dtype.itemsize + _VALUE.itemsize)
        return self.num_features

    @property
    def row_bytes(self) -> int:
        """Bytes of one stored row: what fetching a node's features moves."""
        return self.columns * self.dtype.itemsize

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest records beside feature_dtype (the float encodings: nothing, as
        stores written before the other encodings)."""
        if self.encoding == BINARY:
            return {"feature_encoding": BINARY}
        if self.encoding == SPARSE:
            return {"feature_encoding": SPARSE, "sparse_width": self.width}
        return {}

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Rows as x.npy keeps them (values already checked)."""
        if self.encoding == BINARY:
            return np.packbits(x != 0, axis=1, bitorder="little")
        if self.encoding != SPARSE:
            return x.astype(self.dtype, copy=False)
        m, w = x.shape[0], self.width
        r, c = np.nonzero(x)  # row-major: each row's entries in ascending column
        first = np.searchsorted(r, np.arange(m))
        slot = np.arange(r.size) - first[r]
        if slot.size and slot.max() >= w:
            raise ValueError(f"a row has more than {w} non-zero features")
        cols = np.zeros((m, w), dtype=self.index_dtype)
        vals = np.zeros((m, w), dtype=_VALUE)
        cols[r, slot] = c
        vals[r, slot] = x[r, c]
        return np.concatenate([cols.view(np.uint8), vals.view(np.uint8)], axis=1)

    def decode(self, rows) -> np.ndarray:
        """float32 [.., num_features] of stored rows (binary or sparse)."""
        rows = np.asarray(rows, dtype=np.uint8)
        f = self.num_features
        if self.encoding == BINARY:
            return np.unpackbits(rows, axis=-1, count=f, bitorder="little").astype(np.float32)
        lead = rows.shape[:-1]
        flat = rows.reshape(-1, self.columns)
        split = self.width * self.index_dtype.itemsize
        cols = np.ascontiguousarray(flat[:, :split]).view(self.index_dtype)
        vals = np.ascontiguousarray(flat[:, split:]).view(_VALUE)
        out = np.zeros((flat.shape[0], f), dtype=np.float32)
        r, j = np.nonzero(vals)  # padding holds value 0
        out[r, cols[r, j]] = vals[r, j]
        return out.reshape(lead + (f,))

    def view(self, rows):
        """x rows (a memory map, or anything indexed like one) as values: themselves unless
        binary or sparse."""
        return CodedRows(rows, self) if self.encoding in (BINARY, SPARSE) else rows


class CodedRows:
    """Stored rows read like a float32 array of rows: indexing decodes. `strides[0]` and `nbytes`
    are the stored ones, what reading a row costs."""

    def __init__(self, stored, codec: Codec) -> None:
        self.stored, self.codec = stored, codec
        self.shape = (stored.shape[0], codec.num_features)
        self.dtype = np.dtype(np.float32)
        self.strides = (stored.strides[0], stored.strides[0])
        self.nbytes = stored.nbytes

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        return self.codec.decode(self.stored[idx])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.codec.decode(self.stored[:])
        return out if dtype is None else out.astype(dtype, copy=False)


def codec_of(manifest: dict[str, Any]) -> Codec:
    """A store's codec: `feature_encoding` where binary or sparse, else the float dtype of x.npy."""
    f = int(manifest["num_features"])
    enc = manifest.get("feature_encoding")
    if enc == SPARSE:
        return Codec(SPARSE, f, int(manifest["sparse_width"]))
    if enc == BINARY:
        return Codec(BINARY, f)
    return Codec(np.dtype(manifest["feature_dtype"]).name, f)


def rows_view(manifest: dict[str, Any], rows):
    """x rows of a store with this manifest, as float32 values."""
    return codec_of(manifest).view(rows)


def not_binary(x: np.ndarray) -> np.ndarray:
    """bool per row: it holds a value other than 0 or 1."""
    return ~((x == 0) | (x == 1)).all(axis=1)


def sparse_width(blocks: Iterable[np.ndarray]) -> int:
    """The most non-zero features in any row of `blocks` (at least 1: a row is never empty)."""
    return max([1] + [int(np.count_nonzero(x, axis=1).max()) for x in blocks if x.shape[0]])


def choose_encoding(blocks: Iterable[np.ndarray], num_features: int) -> Codec:
    """What `auto` stores: the lossless codec with the fewest bytes a row, binary on a tie with
    sparse (no scatter to decode). Stops reading once neither binary nor sparse can win."""
    f = num_features
    float32 = Codec("float32", f)
    binary, width = f > 0, 1
    for x in blocks:
        if not x.shape[0]:
            continue
        binary = binary and not not_binary(x).any()
        width = max(width, int(np.count_nonzero(x, axis=1).max()))
        if not binary and 2 * Codec(SPARSE, f, width).row_bytes > float32.row_bytes:
            return float32
    sparse = Codec(SPARSE, f, width)
    options = ([Codec(BINARY, f)] if binary else []) + ([sparse] if 2 * sparse.row_bytes <= float32.row_bytes else [])
    return min(options, key=lambda c: c.row_bytes, default=float32)
