"""Link prediction on a graph from tables (issue 38 with issue 39): the store's prepare maps the
ids first, then makes the seeded link split of the mapped edges (link_split.LinkSplitSource);
predict writes predictions.parquet with the nodes table's ids and the embeddings; --pairs and
--queries, which take the dataset's own node numbers, are refused on such a store."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from grappa.app.cli import main as cli_main
from grappa.config import config_with
from grappa.data.link_split import LinkEdges
from grappa.data.store.preparation import prepare_store
from grappa.models.model_file import store_fingerprint

from tables_helpers import edges_table, graph, nodes_table, store_arrays, write

N = 300


def link_cfg(folder: Path, root: Path, workers: int = 1):
    """No label column named: link prediction needs edges and features only."""
    return config_with({
        "partitions": 2, "task": "link-prediction", "grappa": {"chunks": 2},
        "dataset": {"name": "tables", "path": str(folder), "addInverseEdges": True,
                    "tables": {"nodes": {"files": ["nodes"], "features": ["features"]},
                               "edges": {"files": ["edges"]}}},
        "model": {"hidden": 8}, "training": {"epochs": 2, "mode": "full-graph"},
        "link": {"evalNegatives": 7, "sharedNegatives": 50},
        "prepare": {"workers": workers},
        "runDir": str(root / "run"), "storeDir": str(root / "store")})


def pairs(e, both: bool = False) -> set:
    e = np.asarray(e)
    out = set(zip(e[0].tolist(), e[1].tolist()))
    return out | set(zip(e[1].tolist(), e[0].tolist())) if both else out


@pytest.mark.parametrize("workers", [1, 2])  # 2: the held-out filter is sent to worker processes
def test_a_tables_graph_is_split_after_its_ids_are_mapped(tmp_path, workers):
    g = graph(n=N, e=1500, seed=3)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g))
    cfg = link_cfg(folder, tmp_path, workers)
    man = prepare_store(cfg, progress=False)
    assert man["tables"]["id_column"] == "id" and man["prepare"]["workers"] == workers
    assert set(man["link"]["sha256"]) == set(man["link"]["files"])
    link = LinkEdges(cfg.store_path, man)
    assert link.undirected  # addInverseEdges: true
    # the candidates are the tables' edges in dense ids (a node's row in the nodes table)
    src, dst = np.asarray(g["src"]), np.asarray(g["dst"])
    keep = src != dst
    candidates = pairs(np.stack([np.minimum(src, dst), np.maximum(src, dst)])[:, keep])
    split = {s: pairs(link[s]) for s in ("train", "val", "test")}
    assert split["train"] | split["val"] | split["test"] == candidates
    assert sum(len(v) for v in split.values()) == len(candidates)
    held = pairs(link["val"], both=True) | pairs(link["test"], both=True)
    stored = store_arrays(Path(cfg.store_path), man)
    assert stored["ids"] == list(g["ids"])
    assert not stored["edges"] & held and stored["edges"] == pairs(link["train"], both=True)
    # the link files are part of the store's fingerprint
    other = {**man, "link": {**man["link"], "sha256": {**man["link"]["sha256"], "val_neg": "0" * 64}}}
    assert store_fingerprint(other) != store_fingerprint(man)


def test_a_link_model_on_tables_predicts_embeddings_keyed_by_the_ids(tmp_path, capsys):
    from grappa.runtime.local_job import LocalJob
    g = graph(n=N, e=1500, seed=4)
    folder = write(tmp_path / "t", nodes_table(g), edges_table(g))
    cfg = link_cfg(folder, tmp_path)
    prepare_store(cfg, progress=False)
    result = LocalJob(cfg, progress=False).run()["result"]
    assert 0 < result["test_mrr"] <= 1
    model = str(Path(cfg.run_dir) / "model.pt")
    out = tmp_path / "pred"
    assert cli_main(["predict", "--model", model, "--out", str(out), "--quiet", "--partitions", "1",
                     "--embedding-dtype", "float32", "--evaluate"]) == 0
    table = pq.read_table(out / "predictions.parquet")
    assert table.column_names == ["id", "embeddings"]
    assert table.column("id").to_pylist() == list(g["ids"])
    emb = np.stack(table.column("embeddings").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(emb, np.load(out / "embeddings.npy"))
    man = json.loads((out / "manifest.json").read_text())
    assert man["files"]["table"]["rows"] == N and man["evaluation"]["test"]["edges"] > 0
    capsys.readouterr()
    np.save(tmp_path / "pairs.npy", np.array([[0, 1], [2, 3]]))
    assert cli_main(["predict", "--model", model, "--out", str(tmp_path / "p2"), "--quiet",
                     "--pairs", str(tmp_path / "pairs.npy")]) != 0
    err = capsys.readouterr().err
    assert "--pairs name nodes by the dataset's own numbering" in err and "'id'" in err
