"""dataset.featureDtype: binary (data/store/feature_codec.py): 0/1 features packed 8 to a byte in
the store, every reader getting the float32 values a float32 store gives, every byte counter
counting the packed rows; a value other than 0 or 1 refused naming its row, nothing written."""
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
from grappa.data.store.feature_codec import decode, encode, stored_row_bytes
from grappa.data.store.manifest import chunk_dir
from grappa.data.store.writer import prepare
from grappa.models.layerwise import StoreGraph, block_inputs
from test_prepare_streaming import arrays_config, write_arrays

K, SEED, F = 6, 3, 21  # 21 features: three bytes a row, the last one partly used


@pytest.mark.parametrize("f", [1, 8, 13, 8415])
def test_packing_is_lossless_and_takes_a_bit_a_feature(f):
    x = (np.random.default_rng(f).random((5, f)) < 0.3).astype(np.float32)
    packed = encode(x, "binary")
    assert packed.dtype == np.uint8 and packed.shape == (5, (f + 7) // 8)
    np.testing.assert_array_equal(decode(packed, f), x)
    np.testing.assert_array_equal(decode(packed[2], f), x[2])  # one row


def binary_graph(folder: Path) -> None:
    write_arrays(folder, f=F)
    x = (np.random.default_rng(5).random((500, F)) < 0.2).astype(np.float32)
    x[0] = 1.0  # a full row, and an empty one
    x[1] = 0.0
    np.save(folder / "features.npy", x)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("codec")
    binary_graph(tmp / "g")
    out = {}
    for enc in ("float32", "binary"):
        cfg = arrays_config(tmp / "g", featureDtype=enc)
        prepare(open_source(cfg), tmp / enc, K, SEED, {"enc": enc}, feature_dtype=enc, progress=False)
        out[enc] = tmp / enc
    return out


def test_the_store_holds_packed_rows_and_says_so(stores):
    plain, packed = ChunkStore(stores["float32"]), ChunkStore(stores["binary"])
    assert packed.manifest["feature_encoding"] == "binary" and "feature_encoding" not in plain.manifest
    assert stored_row_bytes(packed.manifest) == 3 and stored_row_bytes(plain.manifest) == 4 * F
    for k in range(K):
        x = np.load(stores["binary"] / chunk_dir(k) / "x.npy")
        assert x.dtype == np.uint8 and x.shape == (packed.manifest["chunks"][k]["nodes"], 3)
        assert torch.equal(packed.load_chunk(k).x, plain.load_chunk(k).x)
    ids = torch.tensor([499, 0, 1, 250, 3, 3])
    for a, b in zip(packed.load_node_rows(ids), plain.load_node_rows(ids)):
        assert torch.equal(a, b)


def test_local_graphs_gather_the_same_values_from_packed_rows(stores, tmp_path):
    base, var = [0, 2, 4], 1
    graphs = {enc: build_local_graph(ChunkStore(stores[enc]), base, var) for enc in stores}
    every = np.arange(graphs["float32"].num_nodes)
    assert torch.equal(graphs["binary"].features.gather(every), graphs["float32"].features.gather(every))
    # the counters count what the store holds: 3 bytes a row, not 4 x 21
    assert graphs["binary"].features.bytes_read * 4 * F == graphs["float32"].features.bytes_read * 3
    assert sum(graphs["binary"].features.distinct_bytes()) == every.size * 3


@pytest.mark.parametrize("rows", ["all", "as-read"])
def test_a_round_fetched_from_a_packed_store_moves_packed_rows(stores, tmp_path, rows):
    base, var = [0, 2, 4], 1
    want = build_local_graph(ChunkStore(stores["float32"]), base, var)
    copies = {enc: LocalCopy(stores[enc], tmp_path / enc, rows=rows) for enc in stores}
    fetched = {enc: c.fetch(base + [var]) for enc, c in copies.items()}
    counts = Fetched()
    local = build_local_graph(copies["binary"].view(base + [var], counts), base, var)
    every = np.arange(local.num_nodes)
    assert torch.equal(local.features.gather(every), want.features.gather(every))
    halo_rows = local.num_nodes - local.num_owned
    assert halo_rows > 0
    got = fetched["binary"].halo_rows + counts.halo_rows  # at the round's start, or as read
    assert got == halo_rows * 3
    assert fetched["float32"].halo_rows == (halo_rows * 4 * F if rows == "all" else 0)


def test_layerwise_inference_reads_the_values(stores):
    graphs = {enc: StoreGraph(ChunkStore(stores[enc])) for enc in stores}
    out = {enc: block_inputs(g, g, F, 2, 0, 40)[0] for enc, g in graphs.items()}
    assert torch.equal(out["binary"], out["float32"])


def test_packed_rows_of_a_wide_graph_come_whole_not_as_read():
    physics = {"num_features": 8415, "feature_dtype": "<f4"}
    assert rows_as_read(physics)  # 33.7 kB rows: one request each anyway
    assert not rows_as_read({**physics, "feature_dtype": "|u1", "feature_encoding": "binary"})  # 1,052 B


def test_a_value_other_than_0_or_1_is_refused_naming_the_row_and_nothing_is_written(tmp_path):
    binary_graph(tmp_path / "g")
    x = np.load(tmp_path / "g" / "features.npy")
    x[321, 4] = 0.5
    np.save(tmp_path / "g" / "features.npy", x)
    cfg = arrays_config(tmp_path / "g", featureDtype="binary")
    with pytest.raises(DatasetError, match=r"features\.npy row 321: feature value 0\.5 is not 0 or 1.*"
                                           r"dataset\.featureDtype: float32"):
        prepare(open_source(cfg), tmp_path / "store", K, SEED, {"enc": "binary"}, feature_dtype="binary",
                progress=False)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
