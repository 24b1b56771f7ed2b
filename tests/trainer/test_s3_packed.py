"""s3.packed (issue 37): a chunk's structure files byte-shuffled and deflated for the wire unpack to
the file exactly, in blocks, whatever their dtype; an object cut short or corrupt fails naming it.
Pure: no bucket."""
import io

import numpy as np
import pytest

from grappa.data.errors import ChunkStoreError
from grappa.data.s3 import packed


def roundtrip(path, pieces: int = 3):
    """Pack `path`, then unpack it fed in `pieces` uneven slices: (bytes out, header, read, blob)."""
    blob_path = path.with_suffix(".packed")
    size = packed.pack_file(path, blob_path)
    blob = blob_path.read_bytes()
    assert size == len(blob)
    cuts = sorted({0, len(blob), *np.random.default_rng(0).integers(0, len(blob), pieces).tolist()})
    out, seen, read = io.BytesIO(), [], []
    header, n = packed.copy_unpacked(iter([blob[a:b] for a, b in zip(cuts[:-1], cuts[1:])]), out,
                                     seen.append, read.append, str(path))
    return out.getvalue(), header, n, blob, b"".join(seen), sum(read)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.float32])
def test_a_file_unpacks_to_itself_in_blocks(tmp_path, monkeypatch, dtype):
    monkeypatch.setattr(packed, "BLOCK", 1 << 10)  # many blocks, the last one shorter
    a = np.sort(np.random.default_rng(1).integers(0, 1 << 17, 3000)).astype(dtype)
    np.save(tmp_path / "a.npy", a)
    raw = (tmp_path / "a.npy").read_bytes()
    out, header, n, blob, data, read = roundtrip(tmp_path / "a.npy")
    offset = np.load(tmp_path / "a.npy", mmap_mode="r").offset
    assert out == raw and header == raw[:offset] and data == raw[offset:]
    assert n == read == len(blob) - 4 - offset  # the data's packed bytes, block framing included
    blocks = -(-a.nbytes // (1 << 10))
    assert blocks > 1 and n > 4 * blocks


def test_ids_pack_smaller_shuffled_than_as_they_lie(tmp_path):
    import zlib
    ids = np.sort(np.random.default_rng(2).integers(0, 1 << 17, 200_000)).astype(np.int32)
    np.save(tmp_path / "ids.npy", ids)
    _, _, n, _, _, _ = roundtrip(tmp_path / "ids.npy")
    assert n < len(zlib.compress(ids.tobytes(), packed.LEVEL)) < ids.nbytes


def test_an_empty_file_packs_to_its_header(tmp_path):
    np.save(tmp_path / "e.npy", np.zeros(0, np.int64))
    out, header, n, _, data, _ = roundtrip(tmp_path / "e.npy")
    assert out == header == (tmp_path / "e.npy").read_bytes() and n == 0 and data == b""


def test_a_cut_or_corrupt_object_fails_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(packed, "BLOCK", 1 << 10)
    np.save(tmp_path / "a.npy", np.arange(2001, dtype=np.int32))  # its last block: 836 bytes
    packed.pack_file(tmp_path / "a.npy", tmp_path / "a.packed")
    blob = (tmp_path / "a.packed").read_bytes()

    def unpack(b):
        return packed.copy_unpacked(iter([b]), io.BytesIO(), lambda d: None, lambda n: None, "s3://b/a.npy.packed")
    for cut in (2, 40, len(blob) - 3):
        with pytest.raises(ChunkStoreError, match=r"s3://b/a\.npy\.packed is cut short"):
            unpack(blob[:cut])
    bad = bytearray(blob)
    bad[-5] ^= 0xFF  # inside the last block's deflate stream
    with pytest.raises(ChunkStoreError, match=r"s3://b/a\.npy\.packed is corrupt"):
        unpack(bytes(bad))
    # a header naming another dtype than the blocks were packed with
    header = np.lib.format.header_data_from_array_1_0(np.zeros(2001, np.int64))
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, header)
    old_len = packed.LENGTH.unpack(blob[:4])[0]
    assert len(f.getvalue()) == old_len
    wrong = blob[:4] + f.getvalue() + blob[4 + old_len:]
    with pytest.raises(ChunkStoreError, match="holds no whole values of 8"):
        unpack(wrong)
