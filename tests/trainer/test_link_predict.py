"""`grappa predict` / `grappa evaluate` with a link-prediction model (inference/link_outputs.py):
embeddings, pair scores and top-k candidates equal one process's full-graph computation; the
evaluation equals the training run's reported test metrics; bad files and flags are refused
naming the file, its row and the fix."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.app.cli import main as cli_main
from grappa.config import ConfigError
from grappa.data.blocks import full_blocks
from grappa.data.datasets import load_dataset
from grappa.data.errors import DatasetError
from grappa.data.store.chunk_store import ChunkStore
from grappa.inference.link_outputs import read_nodes, read_pairs
from grappa.models.model_file import load_model
from small_jobs import csbm_job

N = 300


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A link model trained 3 epochs on a 300-node CSBM (P = 2, mlp decoder: the broadcast path)."""
    from grappa.runtime.local_job import LocalJob
    tmp = tmp_path_factory.mktemp("linkpredict")
    cfg = csbm_job(tmp, task="link-prediction", **{
        "dataset.synthetic.numNodes": N, "training.epochs": 3, "link.decoder": "mlp",
        "link.evalNegatives": 20, "link.sharedNegatives": 200})
    report = LocalJob(cfg, progress=False).run()
    return cfg, report, tmp


def full_graph_embeddings(cfg, model_path):
    """Every node's embedding in one process, on the store's message-passing edges."""
    loaded = load_model(model_path)
    store = ChunkStore(cfg.store_path)
    edges = torch.cat([store.load_chunk(k).edge_index for k in range(store.num_chunks)], 1)
    data = load_dataset(cfg.dataset)
    with torch.no_grad():
        emb = loaded.model(data.x, full_blocks(edges, data.num_nodes, loaded.model.num_layers))
    return loaded.model, emb


def test_predict_writes_embeddings_pair_scores_and_top_k_of_one_process(trained, tmp_path, capsys):
    cfg, report, _ = trained
    model_path = Path(cfg.run_dir) / "model.pt"
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, N, size=(37, 2))
    np.save(tmp_path / "pairs.npy", pairs)
    queries = np.array([5, 0, 299, 17, 5])
    (tmp_path / "queries.txt").write_text("node\n" + "\n".join(map(str, queries)) + "\n")
    cand = np.arange(0, N, 3)  # 0, 3, ..., 297: query 0 is among them, 5 is not
    (tmp_path / "cand.csv").write_text("# candidates\n" + ",\n".join(map(str, cand)) + "\n")
    out = tmp_path / "pred"
    assert cli_main(["predict", "--model", str(model_path), "--out", str(out), "--quiet",
                     "--partitions", "2", "--embedding-dtype", "float32", "--pairs", str(tmp_path / "pairs.npy"),
                     "--queries", str(tmp_path / "queries.txt"), "--candidates", str(tmp_path / "cand.csv"),
                     "--top-k", "4", "--evaluate"]) == 0
    printed = capsys.readouterr().out
    assert "test MRR" in printed and "pair_scores.npy" in printed

    model, emb = full_graph_embeddings(cfg, model_path)
    got = np.load(out / "embeddings.npy")
    assert got.shape == (N, cfg.model.hidden) and np.allclose(got, emb.numpy(), atol=1e-5)

    with torch.no_grad():
        want = model.decoder(emb[pairs[:, 0]], emb[pairs[:, 1]]).numpy()
        every = model.decoder(emb[queries].unsqueeze(1), emb[cand].unsqueeze(0)).numpy()  # [Q, C]
    assert np.allclose(np.load(out / "pair_scores.npy"), want, atol=1e-4)

    ids, scores = np.load(out / "topk.npy"), np.load(out / "topk_scores.npy")
    assert ids.shape == scores.shape == (queries.size, 4)
    for i, q in enumerate(queries):
        s = np.where(cand == q, -np.inf, every[i])  # never its own candidate
        best = np.sort(s)[::-1][:4]
        assert np.allclose(scores[i], best, atol=1e-4), (q, scores[i], best)
        assert q not in ids[i] and set(ids[i]) <= set(cand.tolist())
        assert np.allclose(every[i][np.searchsorted(cand, ids[i])], scores[i], atol=1e-4)
    assert (ids[0] == ids[4]).all()  # the same query twice: the same row

    man = json.loads((out / "manifest.json").read_text())
    assert man["task"] == "link-prediction" and "predictions" not in man["files"]
    assert man["files"]["pair_scores"]["shape"] == [37] and man["files"]["topk"]["shape"] == [5, 4]
    # the evaluation ranks the store's held-out edges as training's evaluation did (model.pt: the best epoch)
    ev = json.loads((out / "evaluation.json").read_text())
    result = report["result"]
    assert ev["test"]["mrr"] == pytest.approx(result["test_mrr"], abs=1e-3)
    assert ev["test"]["auc"] == pytest.approx(result["test_auc"], abs=1e-3)
    for k in (10, 50, 100):
        assert ev["test"][f"hits@{k}"] == pytest.approx(result[f"test_hits@{k}"], abs=1e-3)
    assert ev["test"]["edges"] == len(np.load(Path(cfg.store_dir) / "link" / "test.npy")[0])


def test_evaluate_and_the_python_api_give_the_same_link_metrics(trained, tmp_path):
    import grappa
    cfg, report, _ = trained
    model_path = Path(cfg.run_dir) / "model.pt"
    ev = grappa.evaluate(model_path, out=tmp_path / "ev", workers=1, progress=False)
    assert ev["val"]["mrr"] == pytest.approx(report["result"]["best_val"], abs=1e-3)
    np.save(tmp_path / "pairs.npy", np.array([[1, 2, 3], [4, 5, 6]]))
    res = grappa.predict(model_path, out=tmp_path / "pr", workers=1, progress=False,
                         pairs=tmp_path / "pairs.npy")
    assert res.load("pair_scores").shape == (3,) and res.load("embeddings").shape == (N, cfg.model.hidden)


def test_bad_pair_and_node_files_are_refused_naming_file_row_and_fix(tmp_path):
    np.save(tmp_path / "p.npy", np.array([[0, 1], [2, 10], [3, 4]]))
    with pytest.raises(DatasetError, match=r"p\.npy row 1 \(pair 1\): node id 10 is outside \[0, 10\).*fix or remove"):
        read_pairs(tmp_path / "p.npy", 10)
    np.save(tmp_path / "f.npy", np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(DatasetError, match="float32 values; node ids are integers"):
        read_pairs(tmp_path / "f.npy", 10)
    np.save(tmp_path / "s.npy", np.zeros((3, 3), dtype=np.int64))
    with pytest.raises(DatasetError, match=r"shape \[3, 3\].*\[2, E\]"):
        read_pairs(tmp_path / "s.npy", 10)
    (tmp_path / "p.txt").write_text("src dst\n0 1\n\n# note\n2 x\n")
    with pytest.raises(DatasetError, match=r"p\.txt line 5: '2 x' is not a pair of node ids"):
        read_pairs(tmp_path / "p.txt", 10)
    (tmp_path / "q.txt").write_text("1 2\n")
    with pytest.raises(DatasetError, match=r"q\.txt line 1: 2 values where a node id is expected"):
        read_nodes(tmp_path / "q.txt", 10, "--queries")
    (tmp_path / "q2.txt").write_text("3\n-1\n")
    with pytest.raises(DatasetError, match=r"--queries .*q2\.txt line 2 \(node 1\): node id -1"):
        read_nodes(tmp_path / "q2.txt", 10, "--queries")
    (tmp_path / "ok.tsv").write_text("0\t1\n2\t3\n")
    assert read_pairs(tmp_path / "ok.tsv", 10).tolist() == [[0, 2], [1, 3]]


def test_link_flags_are_refused_where_they_mean_nothing(trained, tmp_path, capsys):
    from grappa.inference.link_outputs import check_request
    np.save(tmp_path / "q.npy", np.array([1]))
    with pytest.raises(ConfigError, match="--pairs score node pairs with a link-prediction model.*node-classification"):
        check_request("m.pt", {}, 10, scores=False, pairs="x", queries=None, candidates=None, top_k=None)
    link = {"task": "link-prediction"}
    with pytest.raises(ConfigError, match="drop --scores"):
        check_request("m.pt", link, 10, scores=True, pairs=None, queries=None, candidates=None, top_k=None)
    with pytest.raises(ConfigError, match="--candidates .* add --queries"):
        check_request("m.pt", link, 10, scores=False, pairs=None, queries=None, candidates="c", top_k=None)
    with pytest.raises(ConfigError, match="--top-k 0"):
        check_request("m.pt", link, 10, scores=False, pairs=None, queries=str(tmp_path / "q.npy"),
                      candidates=None, top_k=0)
    # evaluating needs the link split: a store prepared for node classification has none
    cfg, _, tmp = trained
    node_cfg = csbm_job(tmp / "node", **{"dataset.synthetic.numNodes": N})
    assert cli_main(["evaluate", "--model", str(Path(cfg.run_dir) / "model.pt"), "--store", node_cfg.store_dir,
                     "--out", str(tmp_path / "ev"), "--quiet"]) != 0
    assert "has no link split" in capsys.readouterr().err


def test_a_link_predict_jobs_evaluation_reaches_the_job_status(monkeypatch):
    """A predict job's coordinator (inference/pod.py) reports a link model's MRR, Hits@K and AUC."""
    from grappa.inference import pod
    from grappa.runtime.kube_status import JobStatus

    class Api:
        def patch_namespaced_custom_object_status(self, *args):
            self.body = args[-1]

    api = Api()
    monkeypatch.setattr(JobStatus, "from_env", classmethod(lambda cls: JobStatus("j", "ns", api=api)))
    split = {"mrr": 0.5, "hits@10": 0.6, "hits@50": 0.7, "hits@100": 0.8, "auc": 0.9, "loss": 0.3, "edges": 40}
    pod.report_result({"task": "link-prediction", "evaluation": {"val": {**split, "mrr": 0.4}, "test": split}})
    status = api.body["status"]
    assert status["progress"]["valMrr"] == 0.4 and status["progress"]["testMrr"] == 0.5
    assert status["result"] == {"testAcc": None, "bestVal": 0.4, "bestEpoch": None, "testMrr": 0.5,
                                "testHits10": 0.6, "testHits50": 0.7, "testHits100": 0.8, "testAuc": 0.9}
