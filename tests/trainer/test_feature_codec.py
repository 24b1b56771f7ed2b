"""dataset.featureDtype binary and sparse (data/store/feature_codec.py): mostly-zero features kept
small in the store, every reader getting the float32 values a float32 store gives, every byte
counter counting the stored rows; a value binary cannot keep refused naming its row, nothing
written."""
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.data.errors import DatasetError
from grappa.data.halo_rows import rows_as_read
from grappa.data.local_copy import Fetched, LocalCopy
from grappa.data.local_graph import build_local_graph
from grappa.data.sources import open_source
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.feature_codec import Codec, codec_of, sparse_width
from grappa.data.store.manifest import chunk_dir
from grappa.data.store.writer import prepare
from grappa.models.layerwise import StoreGraph, block_inputs
from test_prepare_streaming import arrays_config, write_arrays

K, SEED, F = 6, 3, 21  # 21 features: three bytes a packed row, the last one partly used
BASE, VAR = [0, 2, 4], 1


@pytest.mark.parametrize("f", [1, 8, 13, 8415])
def test_packing_is_lossless_and_takes_a_bit_a_feature(f):
    x = (np.random.default_rng(f).random((5, f)) < 0.3).astype(np.float32)
    codec = Codec("binary", f)
    packed = codec.encode(x)
    assert packed.dtype == np.uint8 and packed.shape == (5, (f + 7) // 8) == (5, codec.columns)
    np.testing.assert_array_equal(codec.decode(packed), x)
    np.testing.assert_array_equal(codec.decode(packed[2]), x[2])  # one row


@pytest.mark.parametrize("f", [3, 8415, 70000])
def test_sparse_rows_are_lossless_and_as_wide_as_the_fullest_row(f):
    rng = np.random.default_rng(f)
    x = np.where(rng.random((6, f)) < min(0.5, 40 / f), rng.standard_normal((6, f)), 0).astype(np.float32)
    x[1] = 0.0  # an empty row
    x[2, -1] = 98.0  # the last column
    width = sparse_width([x[:3], x[3:]])
    assert width == int(np.count_nonzero(x, axis=1).max())
    codec = Codec("sparse", f, width)
    stored = codec.encode(x)
    index_bytes = 2 if f <= 65536 else 4
    assert stored.shape == (6, width * (index_bytes + 4)) and codec.row_bytes == stored.shape[1]
    np.testing.assert_array_equal(codec.decode(stored), x)
    np.testing.assert_array_equal(codec.decode(stored[[4, 2]]), x[[4, 2]])
    with pytest.raises(ValueError, match="more than"):
        Codec("sparse", f, width - 1).encode(x)


def write_graph(folder: Path, kind: str) -> None:
    """500 nodes, F features: 0/1 ("bits"; one full row and one empty), or mostly-zero floats
    and counts ("counts")."""
    write_arrays(folder, f=F)
    rng = np.random.default_rng(5)
    if kind == "bits":
        x = (rng.random((500, F)) < 0.2).astype(np.float32)
        x[0], x[1] = 1.0, 0.0
    else:
        x = np.where(rng.random((500, F)) < 0.1, rng.integers(1, 99, (500, F)), 0).astype(np.float32)
        x[7, :9], x[7, 9:] = rng.standard_normal(9), 0.0  # the fullest row: 9 non-zero
        x[8] = 0.0
    np.save(folder / "features.npy", x)


ENCODED = {"binary": "bits", "sparse": "counts"}  # each encoding on a graph it can keep


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(graph, featureDtype) -> store folder."""
    tmp = tmp_path_factory.mktemp("codec")
    out = {}
    for enc, kind in ENCODED.items():
        write_graph(tmp / kind, kind)
        for dtype in ("float32", enc):
            cfg = arrays_config(tmp / kind, featureDtype=dtype)
            out[kind, dtype] = tmp / f"{kind}-{dtype}"
            prepare(open_source(cfg), out[kind, dtype], K, SEED, {"d": dtype}, feature_dtype=dtype, progress=False)
    return out


@pytest.mark.parametrize("enc", ENCODED)
def test_the_store_holds_encoded_rows_and_says_so(stores, enc):
    kind = ENCODED[enc]
    plain, coded = ChunkStore(stores[kind, "float32"]), ChunkStore(stores[kind, enc])
    codec = codec_of(coded.manifest)
    assert coded.manifest["feature_encoding"] == enc and "feature_encoding" not in plain.manifest
    assert codec.row_bytes == (3 if enc == "binary" else 9 * (2 + 4))  # sparse: the fullest row's 9
    assert codec_of(plain.manifest).row_bytes == 4 * F
    for k in range(K):
        x = np.load(stores[kind, enc] / chunk_dir(k) / "x.npy")
        assert x.dtype == np.uint8 and x.shape == (coded.manifest["chunks"][k]["nodes"], codec.row_bytes)
        assert torch.equal(coded.load_chunk(k).x, plain.load_chunk(k).x)
    ids = torch.tensor([499, 0, 1, 7, 8, 250, 3, 3])
    for a, b in zip(coded.load_node_rows(ids), plain.load_node_rows(ids)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("enc", ENCODED)
def test_local_graphs_gather_the_same_values_from_encoded_rows(stores, enc):
    kind = ENCODED[enc]
    coded, plain = (build_local_graph(ChunkStore(stores[kind, d]), BASE, VAR) for d in (enc, "float32"))
    every = np.arange(plain.num_nodes)
    assert torch.equal(coded.features.gather(every), plain.features.gather(every))
    # the counters count what the store holds: the stored row, not 4 x F bytes
    row = codec_of(ChunkStore(stores[kind, enc]).manifest).row_bytes
    assert coded.features.bytes_read * 4 * F == plain.features.bytes_read * row
    assert sum(coded.features.distinct_bytes()) == every.size * row


@pytest.mark.parametrize("rows", ["all", "as-read"])
@pytest.mark.parametrize("enc", ENCODED)
def test_a_round_fetched_from_an_encoded_store_moves_stored_rows(stores, tmp_path, rows, enc):
    kind = ENCODED[enc]
    want = build_local_graph(ChunkStore(stores[kind, "float32"]), BASE, VAR)
    copy = LocalCopy(stores[kind, enc], tmp_path / "local", rows=rows)
    fetched, counts = copy.fetch(BASE + [VAR]), Fetched()
    local = build_local_graph(copy.view(BASE + [VAR], counts), BASE, VAR)
    every = np.arange(local.num_nodes)
    assert torch.equal(local.features.gather(every), want.features.gather(every))
    halo_rows = local.num_nodes - local.num_owned
    assert halo_rows > 0
    # at the round's start, or as the steps read them: each halo row once, as stored
    assert fetched.halo_rows + counts.halo_rows == halo_rows * codec_of(copy.manifest).row_bytes
    assert (fetched.halo_rows == 0) == (rows == "as-read")


@pytest.mark.parametrize("enc", ENCODED)
def test_layerwise_inference_reads_the_values(stores, enc):
    kind = ENCODED[enc]
    graphs = {d: StoreGraph(ChunkStore(stores[kind, d])) for d in (enc, "float32")}
    out = {d: block_inputs(g, g, F, 2, 0, 40)[0] for d, g in graphs.items()}
    assert torch.equal(out[enc], out["float32"])


def test_encoded_rows_of_a_wide_graph_come_whole_not_as_read():
    physics = {"num_features": 8415, "feature_dtype": "<f4"}
    assert rows_as_read(physics)  # 33.7 kB rows: one request each anyway
    assert not rows_as_read({**physics, "feature_dtype": "|u1", "feature_encoding": "binary"})  # 1,052 B
    # its word counts as sparse rows: at most 335 non-zero, 2,010 B
    assert not rows_as_read({**physics, "feature_dtype": "|u1", "feature_encoding": "sparse", "sparse_width": 335})


def test_a_value_other_than_0_or_1_is_refused_naming_the_row_and_nothing_is_written(tmp_path):
    write_graph(tmp_path / "g", "bits")
    x = np.load(tmp_path / "g" / "features.npy")
    x[321, 4] = 0.5
    np.save(tmp_path / "g" / "features.npy", x)
    cfg = arrays_config(tmp_path / "g", featureDtype="binary")
    with pytest.raises(DatasetError, match=r"features\.npy row 321: feature value 0\.5 is not 0 or 1.*"
                                           r"dataset\.featureDtype: sparse .* or float32"):
        prepare(open_source(cfg), tmp_path / "store", K, SEED, {"d": "binary"}, feature_dtype="binary",
                progress=False)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
