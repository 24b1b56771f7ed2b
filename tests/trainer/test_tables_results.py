"""Results keyed by the user's ids (grappa/data/tables/results.py): predict on a graph from
tables writes predictions.parquet, which joins back to the nodes table on the original ids."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grappa.models.model_file import read_meta

from inference_helpers import job_for, load_outputs, model_file, run_in_threads
from tables_helpers import CLASSES, config, edges_table, graph, nodes_table, prepared, write


@pytest.mark.parametrize("kind", ["string", "int64"])
def test_predictions_parquet_keeps_every_id_and_matches_the_arrays(tmp_path, kind):
    g = graph(kind=kind, seed=11)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g), parts=2)
    cfg = config(folder, tmp_path, chunks=2)
    prepared(cfg)
    path = model_file(cfg, tmp_path / "model.pt", "sage")
    meta, _ = read_meta(path)
    assert meta["label_names"] == CLASSES  # the model keeps the class names of its labels
    out = tmp_path / "out"
    job = job_for(path, cfg.store_path, out, 2, scores=True, embed_layer=1, embed_dtype="float32",
                  block_rows=64)
    run_in_threads(job)
    arrays = load_outputs(out)
    table = pq.read_table(out / "predictions.parquet")
    assert table.column_names == ["id", "predicted_class", "predicted_label", "scores", "embeddings"]
    assert table.column("id").to_pylist() == list(g["ids"])  # row v is node v: the nodes table's order
    assert str(table.schema.field("id").type) == ("int64" if kind == "int64" else "large_string")
    np.testing.assert_array_equal(table.column("predicted_class").to_numpy(), arrays["predictions"])
    assert table.column("predicted_label").to_pylist() == [CLASSES[c] for c in arrays["predictions"]]
    scores = np.stack(table.column("scores").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(scores, arrays["scores"].astype(np.float32))
    emb = np.stack(table.column("embeddings").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(emb, arrays["embeddings"])
    t = table.schema.field("embeddings").type
    assert pa.types.is_fixed_size_list(t) and t.list_size == 16 and t.value_type == pa.float32()
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["files"]["table"]
    assert entry["file"] == "predictions.parquet" and entry["rows"] == 300 and "'id'" in entry["holds"]


def test_pandas_joins_them_back_on_the_ids(tmp_path):
    pd = pytest.importorskip("pandas")
    g = graph(seed=12)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g))
    cfg = config(folder, tmp_path, chunks=2)
    prepared(cfg)
    path = model_file(cfg, tmp_path / "model.pt", "gcn")
    run_in_threads(job_for(path, cfg.store_path, tmp_path / "out", 1))
    nodes = pd.read_parquet(folder / "nodes")
    pred = pd.read_parquet(tmp_path / "out" / "predictions.parquet")
    joined = nodes.merge(pred, on="id", how="inner", validate="one_to_one")
    assert len(joined) == len(nodes) == 300
    assert set(joined["predicted_label"]) <= set(CLASSES)
    np.testing.assert_array_equal(np.array(joined["predicted_class"]),
                                  np.load(tmp_path / "out" / "predictions.npy"))
