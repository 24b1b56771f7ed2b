"""How the chunk store keeps feature rows (dataset.featureDtype), and how readers get float32 back.

float32 and float16 rows are stored as they are. `binary` packs features that are all 0 or 1 (the
bag-of-words graphs: Cora, Coauthor, Amazon) eight to a byte, numpy.packbits with little bit
order, so a row of f features takes ceil(f / 8) bytes: a Coauthor-Physics row (8,415 columns)
takes 1,052 bytes instead of 33,660. Lossless: prepare refuses any other value, naming its row.

Whatever the encoding, x.npy stays a 2-D array of rows ([n_k, width], width = stored_width), so
fetching, copying and row counting work on stored rows unchanged; a reader that needs values wraps
the rows in `rows_view` and gets float32 [.., f] from indexing. What crosses the store's link and
what the byte counters count is the stored row.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ENCODINGS = ("float32", "float16", "binary")
BINARY = "binary"


def encoding_of(manifest: dict[str, Any]) -> str:
    """A store's encoding: `feature_encoding` where binary (stores written before it have none),
    else the float dtype its x.npy files hold."""
    if manifest.get("feature_encoding") == BINARY:
        return BINARY
    return np.dtype(manifest["feature_dtype"]).name


def stored_dtype(encoding: str) -> np.dtype:
    return np.dtype(np.uint8 if encoding == BINARY else encoding)


def stored_width(encoding: str, num_features: int) -> int:
    """Columns of x.npy for `num_features` features."""
    return (num_features + 7) // 8 if encoding == BINARY else num_features


def stored_row_bytes(manifest: dict[str, Any]) -> int:
    """Bytes of one stored row: what fetching a node's features moves."""
    enc = encoding_of(manifest)
    return stored_width(enc, int(manifest["num_features"])) * stored_dtype(enc).itemsize


def not_binary(x: np.ndarray) -> np.ndarray:
    """bool per row: it holds a value other than 0 or 1."""
    return ~((x == 0) | (x == 1)).all(axis=1)


def encode(x: np.ndarray, encoding: str) -> np.ndarray:
    """Rows as x.npy keeps them (values already checked)."""
    if encoding == BINARY:
        return np.packbits(x != 0, axis=1, bitorder="little")
    return x.astype(stored_dtype(encoding), copy=False)


def decode(rows: np.ndarray, num_features: int) -> np.ndarray:
    """float32 [.., num_features] of packed binary rows."""
    bits = np.unpackbits(np.asarray(rows, dtype=np.uint8), axis=-1, count=num_features, bitorder="little")
    return bits.astype(np.float32)


class PackedRows:
    """Packed binary rows read like a float32 array of rows: indexing decodes. `strides[0]` and
    `nbytes` are the stored ones, what reading a row costs."""

    def __init__(self, packed, num_features: int) -> None:
        self.packed = packed
        self.num_features = num_features
        self.shape = (packed.shape[0], num_features)
        self.dtype = np.dtype(np.float32)
        self.strides = (packed.strides[0], packed.strides[0])
        self.nbytes = packed.nbytes

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        return decode(self.packed[idx], self.num_features)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = decode(self.packed[:], self.num_features)
        return out if dtype is None else out.astype(dtype, copy=False)


def rows_view(manifest: dict[str, Any], rows):
    """x rows (a memory map, or anything indexed like one) as values: themselves unless packed."""
    if encoding_of(manifest) == BINARY:
        return PackedRows(rows, int(manifest["num_features"]))
    return rows
