"""dataset.featureDtype auto, the default (feature_codec.choose_encoding): the smallest lossless
encoding from one read of the features, read back as the input's values; a store prepared before
auto was the default, or by auto, is the same store to a job asking for what it holds."""
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.data.errors import ChunkStoreError
from grappa.data.sources import open_source
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.feature_codec import Codec, choose_encoding
from grappa.data.store.manifest import is_prepared
from grappa.data.store.writer import prepare
from test_prepare_streaming import arrays_config, write_arrays

K, SEED = 4, 2


def counts(rows: int, f: int, per_row: int, seed: int = 0) -> np.ndarray:
    """Word counts: `per_row` non-zero integers a row, most above 1 (so never binary)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, f), dtype=np.float32)
    for i in range(rows):
        x[i, rng.choice(f, per_row, replace=False)] = rng.integers(2, 9, per_row)
    return x


def blocks(x: np.ndarray, size: int, seen: list):
    for start in range(0, len(x), size):
        seen.append(start)
        yield x[start:start + size]


def test_auto_picks_the_fewest_bytes_of_the_lossless_encodings():
    rng = np.random.default_rng(1)
    bits = (rng.random((64, 21)) < 0.3).astype(np.float32)
    assert choose_encoding([bits[:30], bits[30:]], 21) == Codec("binary", 21)
    words = counts(64, 200, 5)
    words[9], words[9, :9] = 0.0, 3.0  # the fullest row: 9 non-zero, 54 bytes against float32's 800
    assert choose_encoding([words[:20], words[20:]], 200) == Codec("sparse", 200, 9)
    # the same counts on 21 columns: 54 bytes is more than half of float32's 84
    assert choose_encoding([counts(64, 21, 5), words[9:10, :21]], 21) == Codec("float32", 21)
    # 0/1 rows with 3 ones in 8,415 columns: 18 bytes sparse against 1,052 packed
    few = np.zeros((8, 8415), dtype=np.float32)
    few[np.arange(8)[:, None], rng.choice(8415, (8, 3), replace=False)] = 1.0
    assert choose_encoding([few], 8415) == Codec("sparse", 8415, 3)


def test_dense_features_are_decided_by_the_first_block():
    x = np.random.default_rng(2).standard_normal((1000, 64)).astype(np.float32)
    seen: list = []
    assert choose_encoding(blocks(x, 100, seen), 64) == Codec("float32", 64)
    assert seen == [0]  # float32 won at once: the other nine blocks were never read


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("auto") / "g"
    write_arrays(folder, f=200)
    x = counts(500, 200, 4, seed=3)
    x[17], x[17, :7] = 0.0, 5.0  # the fullest row: 7 non-zero
    np.save(folder / "features.npy", x)
    return folder


def prepared(graph: Path, out: Path, dtype: str) -> Path:
    cfg = arrays_config(graph, featureDtype=dtype)
    prepare(open_source(cfg), out, K, SEED, {"feature_dtype": dtype}, feature_dtype=dtype, progress=False)
    return out


def test_auto_stores_mostly_zero_counts_as_sparse_rows_with_the_same_values(graph, tmp_path):
    auto = ChunkStore(prepared(graph, tmp_path / "auto", "auto"))
    plain = ChunkStore(prepared(graph, tmp_path / "plain", "float32"))
    assert (auto.manifest["feature_encoding"], auto.manifest["sparse_width"]) == ("sparse", 7)
    assert auto.manifest["source"]["feature_dtype"] == "auto"  # the setting, the choice beside it
    for k in range(K):
        assert torch.equal(auto.load_chunk(k).x, plain.load_chunk(k).x)
    ids = torch.tensor([499, 17, 0, 250])
    for a, b in zip(auto.load_node_rows(ids), plain.load_node_rows(ids)):
        assert torch.equal(a, b)


def test_a_store_is_the_store_asked_for_when_it_holds_what_the_setting_would(graph, tmp_path):
    auto = prepared(graph, tmp_path / "auto", "auto")  # chose sparse
    old = prepared(graph, tmp_path / "old", "float32")  # as the default wrote it before auto
    half = prepared(graph, tmp_path / "half", "float16")
    assert is_prepared(old, {"feature_dtype": "auto"}, K, SEED)
    assert is_prepared(auto, {"feature_dtype": "sparse"}, K, SEED)
    assert is_prepared(auto, {"feature_dtype": "auto"}, K, SEED)
    # asked for float32 rows, and the store holds sparse ones; float16 lost precision auto keeps
    for store, want, have in ((auto, "float32", "auto"), (half, "auto", "float16"), (old, "sparse", "float32")):
        with pytest.raises(ChunkStoreError, match=rf"prepared for a different job: source\.feature_dtype "
                                                  rf"is '{have}' there but '{want}' now"):
            is_prepared(store, {"feature_dtype": want}, K, SEED)
