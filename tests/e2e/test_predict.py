"""A predict job applies a training job's model.pt to every node of its graph (spec.predict)."""
from __future__ import annotations

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def small(name: str) -> dict:
    """The shrunk example at P = 2 in full-graph mode: exact evaluation, a few epochs."""
    job = h.job_manifest(name, epochs=3, partitions=2)
    job["spec"]["training"] = {k: v for k, v in job["spec"]["training"].items() if k not in ("batchSize", "fanouts")}
    job["spec"]["training"]["mode"] = "full-graph"
    return job


def test_predict_job_with_the_trained_model(cluster: Cluster, release: h.Release, namespace: str) -> None:
    train = h.run_job(cluster, namespace, small("train-small"), release)
    tst = train.job["status"]
    assert tst["phase"] == "Succeeded", h.diagnostics(cluster, namespace, "train-small", release)
    job = small("predict-small")
    job["spec"]["predict"] = {"model": tst["artifacts"]["model"], "embeddings": 1}
    run = h.run_job(cluster, namespace, job, release)
    st = run.job["status"]
    assert st["phase"] == "Succeeded", h.diagnostics(cluster, namespace, "predict-small", release)
    art = st["artifacts"]
    assert art["predictions"] == st["runDir"] + "/predictions/predictions.npy", art
    assert art["embeddings"].endswith("/predictions/embeddings.npy") and "model" not in art, art
    # exact inference over the same graph: the training report's exact test accuracy
    assert st["result"]["testAcc"] == pytest.approx(tst["result"]["testAcc"], abs=1e-9), (st["result"], tst["result"])
    assert "Traceback" not in h.aggregator_log(cluster, namespace, "predict-small")
    wide = cluster.kubectl("get", "gj", "-n", namespace, "-o", "wide").stdout
    header, *rows = wide.strip().splitlines()
    assert "PREDICTS" in header.split(), wide
    row = {r.split()[0]: r.split() for r in rows}
    assert tst["artifacts"]["model"] in row["predict-small"] and tst["artifacts"]["model"] not in row["train-small"], wide
