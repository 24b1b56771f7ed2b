"""dataset.name: tables (grappa/data/tables/source.py): tables -> chunk store, exactly, in every
id kind and format; every bad table refused with its file, row and fix, nothing half-written."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grappa.data.errors import ChunkStoreError, DatasetError

from tables_helpers import CLASSES, config, edges_table, graph, nodes_table, prepared, store_arrays, write


def _expected_edges(g: dict) -> set:
    return {(int(s), int(d)) for s, d in zip(g["src"], g["dst"]) if s != d}


@pytest.mark.parametrize("block_edges", [1 << 22, 1024], ids=["one-partition", "4-partitions"])
@pytest.mark.parametrize("kind", ["string", "int64", "uuid"])
def test_round_trip_keeps_every_id_label_and_feature(tmp_path, kind, block_edges):
    g = graph(kind=kind)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g), parts=2)
    cfg = config(folder, tmp_path)
    m = prepared(cfg.model_copy(update={"prepare": cfg.prepare.model_copy(update={"block_edges": block_edges})}))
    assert m["tables"]["partitions"] == (1 if block_edges > 1024 else 4)
    got = store_arrays(tmp_path / "store", m)
    # dense id = row of the nodes table: the ids file gives every original id back, in order
    assert got["ids"] == list(g["ids"])
    np.testing.assert_array_equal(got["x"], g["x"])
    assert m["tables"]["label_names"] == CLASSES and m["num_classes"] == 3
    labelled = np.array([s is not None for s in g["nodes"]["split"]])
    np.testing.assert_array_equal(got["y"], g["cls"])  # every node has a label here
    codes = {"train": 1, "val": 2, "test": 3, None: 0}
    np.testing.assert_array_equal(got["split"], [codes[s] for s in g["nodes"]["split"]])
    assert labelled.sum() == (got["split"] > 0).sum()
    assert got["edges"] == _expected_edges(g)
    assert m["tables"]["id_type"] == ("int64" if kind == "int64" else "string")


def test_csv_and_parquet_give_the_same_store(tmp_path):
    g = graph(kind="string", seed=3)
    nodes = nodes_table(g, features="columns")
    stores = {}
    for fmt in ("parquet", "csv"):
        folder = write(tmp_path / fmt, nodes, edges_table(g), fmt=fmt, parts=3)
        cfg = config(folder, tmp_path / f"run-{fmt}", features=["f_*"])
        m = prepared(cfg)
        stores[fmt] = (m, store_arrays(cfg.store_path, m))
    (mp, p), (mc, c) = stores["parquet"], stores["csv"]
    for key in ("x", "y", "split", "edges", "ids"):
        assert (p[key] == c[key]) if key in ("edges", "ids") else np.array_equal(p[key], c[key]), key
    assert [ch["files"] for ch in mp["chunks"]] == [ch["files"] for ch in mc["chunks"]]
    assert mp["tables"]["ids"]["sha256"] == mc["tables"]["ids"]["sha256"]


def test_feature_forms_agree(tmp_path):
    g = graph(seed=5)
    ref = None
    for form, features in (("list", ["features"]), ("varlist", ["features"]), ("columns", ["f_0", "f_1", "f_[2-5]"])):
        folder = write(tmp_path / form, nodes_table(g, form), edges_table(g))
        cfg = config(folder, tmp_path / f"run-{form}", features=features)
        x = store_arrays(cfg.store_path, prepared(cfg))["x"]
        np.testing.assert_array_equal(x, g["x"].astype(np.float32))
        ref = x if ref is None else ref


def test_integer_labels_fractions_and_unlabelled_nodes(tmp_path):
    g = graph(seed=7)
    nodes = nodes_table(g).drop_columns(["label", "split"])
    y = np.where(np.arange(len(g["cls"])) % 10 == 0, None, g["cls"]).tolist()
    nodes = nodes.append_column("cls", pa.array(y, pa.int64()))
    folder = write(tmp_path / "t", nodes, edges_table(g))
    cfg = config(folder, tmp_path, nodes={"label": "cls", "split": None}, splitFractions=[0.5, 0.25, 0.25])
    m = prepared(cfg)
    got = store_arrays(cfg.store_path, m)
    np.testing.assert_array_equal(got["y"], [-1 if v is None else v for v in y])
    assert (got["split"][got["y"] < 0] == 0).all()  # unlabelled: in no split
    share = np.bincount(got["split"][got["y"] >= 0], minlength=4)[1:] / (got["y"] >= 0).sum()
    assert abs(share[0] - 0.5) < 0.1 and abs(share[1] - 0.25) < 0.1
    assert m["tables"]["label_names"] is None
    again = config(folder, tmp_path / "again", nodes={"label": "cls", "split": None}, splitFractions=[0.5, 0.25, 0.25])
    np.testing.assert_array_equal(store_arrays(again.store_path, prepared(again))["split"], got["split"])


def test_predict_needs_no_label(tmp_path):
    g = graph(seed=8)
    folder = write(tmp_path / "t", nodes_table(g).drop_columns(["label", "split"]), edges_table(g))
    cfg = config(folder, tmp_path, nodes={"label": None, "split": None})
    with pytest.raises(DatasetError, match="dataset.tables.nodes.label is not set.*columns are id, features"):
        prepared(cfg)
    m = prepared(cfg, need_labels=False)
    assert m["num_classes"] == 0 and m["num_nodes"] == 300


# -- bad tables: the file, the row and the fix; nothing half-written --------------------------

def _refused(tmp_path, nodes_t, edges_t, pattern, fmt="parquet", **settings):
    folder = write(tmp_path / "t", nodes_t, edges_t, fmt=fmt)
    cfg = config(folder, tmp_path, **settings)
    with pytest.raises(DatasetError) as err:
        prepared(cfg)
    msg = str(err.value)
    assert re.search(pattern, msg), msg
    store = cfg.store_path
    assert not store.exists() or not os.listdir(store), os.listdir(store)  # nothing half-written
    return msg


def test_missing_column_lists_the_columns(tmp_path):
    g = graph()
    msg = _refused(tmp_path, nodes_table(g), edges_table(g), r"no column 'lable'.*did you mean 'label'.*"
                   r"columns are id, label, split, features", nodes={"label": "lable"})
    assert "part-0.parquet" in msg


def test_null_node_id(tmp_path):
    g = graph()
    ids = list(g["nodes"]["id"])
    ids[17] = None
    nodes = nodes_table(g).set_column(0, "id", pa.array(ids, pa.string()))
    _refused(tmp_path, nodes, edges_table(g), r"nodes/part-0.parquet row 17: 'id' is empty \(null\).*fill it in")


def test_duplicate_node_id(tmp_path):
    g = graph()
    ids = list(g["nodes"]["id"])
    ids[120] = ids[33]
    nodes = nodes_table(g).set_column(0, "id", pa.array(ids))
    _refused(tmp_path, nodes, edges_table(g),
             rf"part-0.parquet row 120: node id '{ids[33]}' is already the id of .*part-0.parquet row 33.*unique")


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_dangling_edges_are_counted_and_refused_or_dropped(tmp_path, fmt):
    g = graph()
    src = list(g["edges"]["src"])
    for i in (40, 41, 900):
        src[i] = "nobody"
    edges = pa.table({"src": pa.array(src), "dst": pa.array(g["edges"]["dst"])})
    _refused(tmp_path, nodes_table(g, "columns"), edges, r"edges/part-0\.\w+ row 40: edge source 'nobody' is "
             r"not an id of the nodes table.*3 of 1,500 edges.*danglingEdges: drop", fmt=fmt, features=["f_*"])
    cfg = config(tmp_path / "t", tmp_path / "drop", danglingEdges="drop", features=["f_*"])
    m = prepared(cfg)
    assert m["tables"]["dangling_edges"] == 3 and m["source_edges"] == 1497
    keep = np.ones(1500, bool)
    keep[[40, 41, 900]] = False
    want = {(int(s), int(d)) for s, d in zip(g["src"][keep], g["dst"][keep]) if s != d}
    assert store_arrays(cfg.store_path, m)["edges"] == want


def test_ragged_and_non_numeric_features(tmp_path):
    g = graph()
    rows = [list(map(float, r)) for r in g["x"]]
    rows[55] = rows[55][:-1]
    nodes = nodes_table(g).set_column(3, "features", pa.array(rows, pa.list_(pa.float64())))
    _refused(tmp_path / "a", nodes, edges_table(g), r"row 55: feature column 'features' has 5 values but the "
             r"table's first row has 6 \(ragged")
    nodes = nodes_table(g, "columns").append_column("f_x", pa.array(["a"] * 300))
    _refused(tmp_path / "b", nodes, edges_table(g), r"feature column 'f_x' has type string.*numeric",
             features=["f_*"])
    x = g["x"].copy()
    x[12, 2] = np.nan
    nodes = nodes_table(graph() | {"nodes": {**g["nodes"], "x": x}})
    _refused(tmp_path / "c", nodes, edges_table(g), r"row 12: a feature is NaN or infinite")


def test_label_null_inside_a_split(tmp_path):
    g = graph()
    labels = list(g["nodes"]["label"])
    i = next(i for i, s in enumerate(g["nodes"]["split"]) if s == "val")
    labels[i] = None
    nodes = nodes_table(g).set_column(1, "label", pa.array(labels, pa.string()))
    _refused(tmp_path, nodes, edges_table(g), rf"row {i}: node '{g['ids'][i]}' is in split val but has no "
             r"label \(null in 'label'\); label it, or leave its split empty")


def test_unknown_split_value(tmp_path):
    g = graph()
    split = list(g["nodes"]["split"])
    split[9] = "training"
    nodes = nodes_table(g).set_column(2, "split", pa.array(split, pa.string()))
    _refused(tmp_path, nodes, edges_table(g), r"row 9: split 'training' in column 'split'.*train, val or test")


def test_mixed_id_types(tmp_path):
    g = graph(kind="int64")
    edges = pa.table({"src": pa.array([str(v) for v in g["edges"]["src"]]), "dst": pa.array(g["edges"]["dst"])})
    _refused(tmp_path, nodes_table(g), edges, r"mixed id types.*nodes.id int64.*edges.src string.*idType: string")
    cfg = config(tmp_path / "t", tmp_path / "as-text", idType="string")
    m = prepared(cfg)
    assert m["tables"]["id_type"] == "string" and store_arrays(cfg.store_path, m)["edges"] == _expected_edges(g)


def test_a_changed_table_is_refused(tmp_path):
    g = graph()
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g))
    cfg = config(folder, tmp_path)
    m = prepared(cfg)
    assert any("edges/part-0.parquet" in k for k in m["source_files"])
    t = edges_table(g).slice(0, 1000)
    pq.write_table(t, folder / "edges" / "part-0.parquet")
    with pytest.raises(ChunkStoreError, match=r"edges/part-0.parquet changed size.*--reprepare"):
        prepared(cfg)
    pq.write_table(t, folder / "edges" / "part-1.parquet")  # a new file in the table's folder
    with pytest.raises(ChunkStoreError, match=r"edges/part-1.parquet is new"):
        prepared(cfg)
    assert json.loads((cfg.store_path / "manifest.json").read_text())["tables"] == m["tables"]


def test_worker_processes_read_the_tables_too(tmp_path):
    """prepare.workers 2: the node pass and the edge parts run in spawned processes (the source
    is pickled to them) and write the same store as one process."""
    g = graph(seed=21)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g), parts=2)
    one = config(folder, tmp_path / "one")
    two = config(folder, tmp_path / "two")
    two = two.model_copy(update={"prepare": two.prepare.model_copy(update={"workers": 2})})
    m1, m2 = prepared(one), prepared(two)
    assert m2["prepare"]["workers"] == 2
    assert [c["files"] for c in m1["chunks"]] == [c["files"] for c in m2["chunks"]]
