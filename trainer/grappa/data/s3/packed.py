"""A chunk's structure files packed for the wire: what is copied whole from a bucket, smaller.

A round's fetch from a bucket copies a new variable chunk's structure whole (its in-edges'
source ids above all, most of a round's store bytes on RMAT graphs), and those bytes cross the
storage machine's one link for every worker; a mirror (exact evaluation, predict) downloads
every chunk's. Integer ids deflate poorly as they lie, but well once their bytes are regrouped
by significance, the high bytes of small ids being mostly equal (the regrouping of HDF5's and
Blosc's shuffle filter; tests/trainer/test_s3_packed.py checks the order on ids):

    shuffle(block) = the block's bytes viewed as [n, itemsize], transposed: byte 0 of every
                     value, then byte 1 of every value, ...
    packed object  = u32 LE len(header) | the .npy header | per block of BLOCK bytes of data
                     (the last shorter): u32 LE len(deflated) | deflate(shuffle(block), LEVEL)

Blocks keep a reader's memory to one block, whatever the file's size. The upload keeps the
store's own objects as they are (ranged reads, and older versions, read them) and adds a packed
one beside each file of PACKED_FILES (KEY_SUFFIX), then `packed.json`, their index, before the
manifest: a bucket whose manifest is there has them all, and one uploaded before them has no
index, so its files are read as they lie. What is unpacked is checked against the manifest's
sha256 like any file read from the store (local_copy.py, chunk_store.py).
"""
from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np

from grappa.data.errors import ChunkStoreError
from grappa.util.npy import map_npy, parse_header

INDEX = "packed.json"
KEY_SUFFIX = ".packed"
CODEC = "shuffle-deflate"
PACKED_FILES = ("nodes.npy", "indptr.npy", "indices.npy", "y.npy", "split.npy")  # x.npy: read in rows
BLOCK = 1 << 22  # data bytes a block (a multiple of every itemsize)
LEVEL = 1  # deflate's fastest: shuffled ids gain little from more effort, uploads much
LENGTH = struct.Struct("<I")  # before the header, and before each block


def read_index(blob: bytes | None, where: str) -> dict[str, int]:
    """packed.json's files (key -> bytes of its packed object); None (no index): {}."""
    if blob is None:
        return {}
    index = json.loads(blob)
    if index.get("codec") != CODEC:
        raise ChunkStoreError(f"{where}{INDEX} names codec {index.get('codec')!r}, which this version "
                              f"does not read ({CODEC}); run the version that prepared the store, or "
                              "prepare it again")
    return {str(k): int(v) for k, v in index.get("files", {}).items()}


def shuffle(data: bytes | memoryview, itemsize: int) -> bytes:
    return np.frombuffer(data, np.uint8).reshape(-1, itemsize).T.tobytes()


def unshuffle(data: bytes, itemsize: int) -> bytes:
    return np.frombuffer(data, np.uint8).reshape(itemsize, -1).T.tobytes()


def pack_file(src: Path, dst: Path) -> int:
    """dst = src (a .npy file) packed; returns dst's size."""
    arr = map_npy(src)
    itemsize, offset = arr.dtype.itemsize, arr.offset
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        header = fi.read(offset)
        fo.write(LENGTH.pack(len(header)) + header)
        while block := fi.read(BLOCK):
            z = zlib.compress(shuffle(block, itemsize), LEVEL)
            fo.write(LENGTH.pack(len(z)) + z)
    return dst.stat().st_size


def _itemsize(header: bytes, where: str) -> int:
    """The bytes of a value of the .npy header's dtype."""
    try:
        return parse_header(header)[0].itemsize
    except ValueError as err:
        raise ChunkStoreError(f"{where} is corrupt (its header: {err}); prepare the store in the bucket again") from None


def unpack(chunks: Iterator[bytes], where: str) -> Iterator[tuple[bytes, bytes]]:
    """(bytes of the packed object as read, what they unpack to) from a packed object's bytes as
    they come: first its .npy header, then each block's data, its values of the header's dtype. A
    cut or malformed object raises, naming `where`."""
    buf = bytearray()
    it = iter(chunks)

    def need(n: int) -> bool:
        while len(buf) < n:
            piece = next(it, None)
            if piece is None:
                return False
            buf.extend(piece)
        return True

    def take(n: int) -> bytes:
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def frame(what: str) -> bytes:
        """A length, then that many bytes: `what` names the frame in the error if they end first."""
        if need(LENGTH.size):
            n = LENGTH.unpack(take(LENGTH.size))[0]
            if need(n):
                return take(n)
        raise ChunkStoreError(f"{where} is cut short (in {what}); prepare the store in the bucket again")

    header = frame("its header")
    itemsize = _itemsize(header, where)
    yield b"", header
    while need(1):
        z = frame("a block")
        try:
            data = zlib.decompress(z)
        except zlib.error as err:
            raise ChunkStoreError(f"{where} is corrupt ({err}); prepare the store in the bucket again") from None
        if len(data) % itemsize:
            raise ChunkStoreError(f"{where} is corrupt (a block of {len(data)} bytes holds no whole "
                                  f"values of {itemsize}); prepare the store in the bucket again")
        yield z, unshuffle(data, itemsize)


def copy_unpacked(chunks: Iterator[bytes], fo: BinaryIO, on_data: Callable[[bytes], None],
                  on_read: Callable[[int], None], where: str) -> tuple[bytes, int]:
    """A packed object's bytes as they come, unpacked into fo: (its .npy header, the bytes of its
    packed data, framing included); on_data sees each block unpacked, on_read its packed bytes."""
    header, read = b"", 0
    for i, (z, data) in enumerate(unpack(chunks, where)):
        fo.write(data)
        if i == 0:
            header = data
            continue
        on_data(data)
        on_read(LENGTH.size + len(z))
        read += LENGTH.size + len(z)
    return header, read
