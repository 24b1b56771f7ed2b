"""Sources refuse malformed input with the file and the row or field named, before a store exists;
OGB's layout rules; the download path, offline through a file:// URL."""
from __future__ import annotations

import gzip
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from fake_ogb import make_arrays, write_dataset
from grappa.config import DatasetConfig
from grappa.data.errors import DatasetError
from grappa.data.sources import open_source
from grappa.data.sources.download import download_ogb
from grappa.data.store import prepare

N = 50


def good(folder: Path) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "edges.npy", rng.integers(0, N, (2, 200)))
    np.save(folder / "features.npy", rng.standard_normal((N, 3)).astype(np.float32))
    np.save(folder / "labels.npy", rng.integers(0, 4, N))
    np.save(folder / "train.npy", np.arange(0, 20))
    np.save(folder / "val.npy", np.arange(20, 30))
    np.save(folder / "test.npy", np.arange(30, 50))


def edit(name, fn):
    """A case that rewrites one file of the good graph with fn(old array)."""
    def apply(folder: Path) -> None:
        np.save(folder / name, fn(np.load(folder / name)))
    return apply


def set_at(index, value, dtype=None):
    def fn(a):
        a = a.astype(dtype) if dtype else a.copy()
        a[index] = value
        return a
    return fn


CASES = {
    # case: (how the good graph is broken, settings, the file and the words the error must name)
    "edge id too large": (edit("edges.npy", set_at((1, 137), N)), {},
                          r"edges\.npy edge 137: destination id 50 is outside \[0, 50\)"),
    "negative edge id": (edit("edges.npy", set_at((0, 3), -2)), {}, r"edges\.npy edge 3: source id -2"),
    "float edges": (edit("edges.npy", lambda a: a.astype(np.float64)), {},
                    r"edges\.npy: edge ids have dtype float64; save them as int32 or int64"),
    "edges as E x 2": (edit("edges.npy", lambda a: a.T.copy()), {}, r"edges\.npy: edges have shape \(200, 2\).*transpose"),
    "float64 features": (edit("features.npy", lambda a: a.astype(np.float64)), {},
                         r"features\.npy: features have dtype float64; save them as float32 or float16"),
    "1-D features": (edit("features.npy", lambda a: a[:, 0].copy()), {}, r"features\.npy: features have shape \(50,\)"),
    "NaN feature": (edit("features.npy", set_at((17, 1), np.nan)), {}, r"features\.npy row 17: NaN or infinite"),
    "inf feature": (edit("features.npy", set_at((42, 0), np.inf)), {}, r"features\.npy row 42: NaN or infinite"),
    "too large for float16": (edit("features.npy", set_at((9, 2), 1e6)), {"featureDtype": "float16"},
                              r"features\.npy row 9: a feature exceeds float16's range.*featureDtype: float32"),
    "labels wrong length": (edit("labels.npy", lambda a: a[:-1]), {}, r"labels\.npy: labels have shape \(49,\); expected \[50\]"),
    "float labels": (edit("labels.npy", lambda a: a.astype(np.float32)), {}, r"labels\.npy: labels have dtype float32"),
    "label out of range": (edit("labels.npy", set_at(5, 9)), {"arrays": {"numClasses": 4}},
                           r"labels\.npy row 5: label 9 is not in \[0, 4\)"),
    "label below -1": (edit("labels.npy", set_at(44, -3)), {}, r"labels\.npy row 44: label -3"),
    "split node unlabelled": (edit("labels.npy", set_at(3, -1)), {}, r"node 3 is in .*train\.npy but has no label"),
    "missing split": (lambda f: (f / "test.npy").unlink(), {}, r"test\.npy does not exist.*train, val and test"),
    "split id out of range": (edit("train.npy", set_at(2, 1000)), {}, r"train\.npy row 2: node id 1000 is outside \[0, 50\)"),
    "split id twice": (edit("val.npy", set_at(4, 20)), {}, r"val\.npy row 4: node 20 is listed twice"),
    "splits overlap": (edit("test.npy", set_at(0, 25)), {}, r"node 25 is in both .*val\.npy and .*test\.npy"),
    "mask of wrong length": (lambda f: np.save(f / "val.npy", np.zeros(N + 1, bool)), {},
                             r"val\.npy: mask has shape \(51,\); expected \[50\]"),
    "masks overlap": (lambda f: [np.save(f / "train.npy", np.arange(N) < 20), np.save(f / "val.npy", np.arange(N) == 19)],
                      {}, r"node 19 is in both .*train\.npy and .*val\.npy"),
    "not an npy file": (lambda f: (f / "labels.npy").write_bytes(b"hello"), {}, r"labels\.npy is not a \.npy array"),
    "truncated edges": (lambda f: (f / "edges.npy").write_bytes((f / "edges.npy").read_bytes()[:-40]), {},
                        r"edges\.npy is truncated"),
    "src without dst file": (lambda f: np.save(f / "src.npy", np.arange(5)), {"arrays": {"src": ["src.npy"], "dst": ["dst.npy"]}},
                             r"dst\.npy does not exist"),
    "src/dst lengths differ": (lambda f: [np.save(f / "s.npy", np.arange(5)), np.save(f / "d.npy", np.arange(4))],
                               {"arrays": {"src": ["s.npy"], "dst": ["d.npy"]}}, r"s\.npy has 5 ids but .*d\.npy has 4"),
    "no edge file matches": (lambda f: None, {"arrays": {"edges": ["part-*.npy"]}}, r"no file matches .*part-\*\.npy"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_arrays_are_refused_naming_file_and_row(tmp_path, case):
    breaker, settings, pattern = CASES[case]
    folder = tmp_path / "graph"
    good(folder)
    breaker(folder)
    out = tmp_path / "store"
    with pytest.raises(DatasetError, match=pattern):
        cfg = DatasetConfig.model_validate({"name": "arrays", "path": str(folder), **settings})
        source = open_source(cfg)
        prepare(source, out, 2, 0, {"case": case}, feature_dtype=cfg.feature_dtype, block_edges=1024,
                progress=False)
    assert not (out / "manifest.json").exists() and not list(out.glob("chunk-*"))


def test_the_good_graph_prepares(tmp_path):
    good(tmp_path / "graph")
    cfg = DatasetConfig.model_validate({"name": "arrays", "path": "graph", "root": str(tmp_path)})
    m = prepare(open_source(cfg), tmp_path / "store", 2, 0, {"t": 0}, progress=False)
    assert m["num_nodes"] == N and m["num_classes"] == 4


def test_missing_folder_names_the_setting(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset\.path: folder .*nowhere does not exist"):
        open_source(DatasetConfig(name="arrays", path="nowhere", root=str(tmp_path)))


@pytest.mark.parametrize("settings,words", [
    ({"name": "arrays"}, "dataset.path is required when dataset.name is 'arrays'"),
    ({"name": "cora", "arrays": {"features": "f.npy"}}, "dataset.arrays applies to dataset.name 'arrays' only"),
    ({"name": "cora", "addInverseEdges": True}, "dataset.addInverseEdges applies to ogbn-\\*, ogbl-\\*, arrays and tables only"),
    ({"name": "arrays", "path": "g", "arrays": {"edges": ["e.npy"], "src": ["s.npy"], "dst": ["d.npy"]}},
     "either edges or src/dst"),
    ({"name": "arrays", "path": "g", "arrays": {"src": ["s.npy"]}}, "pair every src file"),
    ({"name": "rmat", "featureDtype": "float64"}, "featureDtype"),
])
def test_settings_that_do_not_fit_the_dataset_are_refused(settings, words):
    with pytest.raises(ValidationError, match=words):
        DatasetConfig.model_validate(settings)


def ogb(tmp_path, name="ogbn-arxiv"):
    write_dataset(tmp_path / "data", name, make_arrays(name, nodes=60, edges=300))
    return tmp_path / "data" / name.replace("-", "_")


def test_ogb_without_release_marker_names_the_fix(tmp_path):
    folder = ogb(tmp_path)
    (folder / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match=r"RELEASE_v1\.txt is missing.*dataset\.download: true.*arxiv\.zip"):
        open_source(DatasetConfig(name="ogbn-arxiv", root=str(tmp_path / "data")))


def test_ogb_missing_split_and_wrong_counts(tmp_path):
    folder = ogb(tmp_path)
    cfg = DatasetConfig(name="ogbn-arxiv", root=str(tmp_path / "data"))
    with gzip.open(folder / "raw" / "num-edge-list.csv.gz", "wt") as fh:
        fh.write("301\n")
    with pytest.raises(DatasetError, match="read 300 edges but the source declares 301"):
        prepare(open_source(cfg), tmp_path / "store", 2, 0, {"t": 1}, progress=False)
    shutil.rmtree(folder / "split")
    with pytest.raises(DatasetError, match=r"split/time has no split .*download ogbn-arxiv again"):
        open_source(cfg)


def test_ogb_binary_edge_id_out_of_range_names_the_member(tmp_path):
    arrays = make_arrays("ogbn-papers100M", nodes=60, edges=300)
    arrays["edge_index"][0, 123] = 60
    write_dataset(tmp_path / "data", "ogbn-papers100M", arrays)
    cfg = DatasetConfig(name="ogbn-papers100M", root=str(tmp_path / "data"))
    with pytest.raises(DatasetError, match=r"data\.npz:edge_index edge 123: source id 60 is outside \[0, 60\)"):
        prepare(open_source(cfg), tmp_path / "store", 2, 0, {"t": 2}, block_edges=1024, progress=False)


def test_download_from_a_file_url_lands_in_the_ogb_layout(tmp_path):
    """The real download path minus the network: zip a fake dataset the way OGB serves it."""
    src = ogb(tmp_path)
    archive = tmp_path / "arxiv.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in src.rglob("*"):
            z.write(p, Path("arxiv") / p.relative_to(src))
    root = tmp_path / "fresh"
    folder = download_ogb("ogbn-arxiv", root, progress=False, url=archive.as_uri())
    assert folder == root / "ogbn_arxiv" and (folder / "RELEASE_v1.txt").is_file()
    assert [p.name for p in root.iterdir()] == ["ogbn_arxiv"]  # no zip or scratch folder left
    assert open_source(DatasetConfig(name="ogbn-arxiv", root=str(root))).num_nodes == 60
    with pytest.raises(DatasetError, match="exists but is not a complete ogbn-arxiv download; delete it"):
        download_ogb("ogbn-arxiv", root, progress=False, url=archive.as_uri())
    with pytest.raises(DatasetError, match="cannot download ogbn-arxiv"):
        download_ogb("ogbn-arxiv", tmp_path / "other", progress=False, url=(tmp_path / "absent.zip").as_uri())


def test_ogb_split_dict_pt_is_read_when_the_csv_split_is_absent(tmp_path):
    """ogb >= 1.2.3 may ship split/<name>/split_dict.pt instead of the three CSV files."""
    import torch

    arrays = make_arrays("ogbn-arxiv", nodes=60, edges=300)
    folder = write_dataset(tmp_path / "data", "ogbn-arxiv", arrays)
    split = folder / "split" / "time"
    for f in split.iterdir():
        f.unlink()
    torch.save({k: arrays[k] for k in ("train", "valid", "test")}, split / "split_dict.pt")
    source = open_source(DatasetConfig(name="ogbn-arxiv", root=str(tmp_path / "data")))
    codes = np.concatenate([b.split for b in source.node_blocks(1 << 10)])
    assert np.array_equal(np.flatnonzero(codes == 1), arrays["train"])
    assert np.array_equal(np.flatnonzero(codes == 3), arrays["test"])


def test_a_mask_of_the_wrong_length_names_the_fix(tmp_path):
    good(tmp_path / "graph")
    np.save(tmp_path / "graph" / "train.npy", np.zeros(N - 3, bool))
    with pytest.raises(DatasetError) as info:
        open_source(DatasetConfig.model_validate({"name": "arrays", "path": str(tmp_path / "graph")}))
    message = str(info.value)
    assert "train.npy: mask has shape (47,); expected [50]" in message
    assert f"numpy.zeros({N}, bool)" in message and "features.npy" in message and "node ids" in message
