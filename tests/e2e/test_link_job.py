"""Link prediction as a GrappaJob: the same pods, status and printer columns as node
classification, with the test MRR where the accuracy would be."""
from __future__ import annotations

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def test_a_link_prediction_job_succeeds_with_its_mrr_in_the_status(cluster: Cluster, release: h.Release,
                                                                   namespace: str) -> None:
    name = "link"
    job = h.job_manifest(name, epochs=3, rounds_every=2, partitions=2)
    job["spec"]["task"] = "link-prediction"
    job["spec"]["training"]["evalMode"] = "exact"  # link prediction is evaluated exactly
    run = h.run_job(cluster, namespace, job, release)
    status = run.job["status"]
    assert status["phase"] == "Succeeded", h.diagnostics(cluster, namespace, name, release)
    assert 0.0 < status["result"]["testMrr"] <= 1.0, status["result"]
    assert status["progress"]["testMrr"] == pytest.approx(status["result"]["testMrr"]), status["progress"]
    assert status["result"].get("testAcc") is None, status["result"]  # no accuracy: not classification
    wide = cluster.kubectl("get", "gj", name, "-n", namespace, "-o", "wide").stdout
    header, row = wide.strip().splitlines()[:2]
    cell = row[header.index("TEST-MRR"):].split()[0]
    assert float(cell) == pytest.approx(status["progress"]["testMrr"], abs=1e-3), wide
    assert "Traceback" not in h.aggregator_log(cluster, namespace, name)
