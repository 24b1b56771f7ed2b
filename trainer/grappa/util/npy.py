"""Memory-mapping .npy files, and parsing .npy headers, from several threads.

numpy parses a .npy header with `ast.literal_eval`, and CPython 3.11 (this project's Python)
keeps the AST builder's recursion depth per interpreter, not per thread: two threads parsing at
once can fail one of them with SystemError "AST constructor recursion depth mismatch"
(python/cpython#106905). In-process shards that opened their chunks at the same moment did
(tests/trainer/test_varco.py, once in many runs). So every header is parsed under one lock; the
data is mapped, not read, so the lock is held for microseconds.
"""
from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np

HEADER_LOCK = threading.Lock()


def map_npy(path: str | Path) -> np.ndarray:
    """np.load(path, mmap_mode="r"), its header parsed under HEADER_LOCK (pickles refused). The
    path goes as a string: given a Path, np.memmap resolves it (a realpath walk, some 0.2 ms a
    file, many files a round)."""
    with HEADER_LOCK:
        return np.load(str(path), mmap_mode="r", allow_pickle=False)


def load_npy(path: str | Path) -> np.ndarray:
    """np.load(path) into memory, its header parsed under HEADER_LOCK (map_npy); the data is
    read after the lock is released, so a large file holds no other thread's parse."""
    return np.array(map_npy(path))


def parse_header(head: bytes) -> tuple[np.dtype, tuple, bool, int]:
    """(dtype, shape, fortran order, data offset) of the .npy header `head` starts with, parsed
    under HEADER_LOCK; ValueError where the bytes end first or are no .npy header."""
    f = io.BytesIO(head)
    with HEADER_LOCK:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
    return np.dtype(dtype), tuple(shape), bool(fortran), f.tell()
