"""Strategies other than Grappa run with the same pods, status and metrics; rounds stay off."""
from __future__ import annotations

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def strategy_manifest(name: str, strategy: str, **spec: object) -> dict:
    job = h.job_manifest(name, epochs=4)
    s = job["spec"]
    s.pop("grappa")  # repartition settings are Grappa's; the API rejects them for other strategies
    s["strategy"] = strategy
    s["training"] = {k: v for k, v in s["training"].items() if k not in ("batchSize", "fanouts")}
    s["training"]["mode"] = "full-graph"
    s.update(spec)
    return job


@pytest.mark.parametrize("strategy,extra", [
    ("varco", {"varco": {"compressor": "random", "rMax": 8, "totalSteps": 4}}),
    ("retexo", {}),
])
def test_strategy_job_succeeds(cluster: Cluster, release: h.Release, namespace: str,
                               strategy: str, extra: dict) -> None:
    name = f"strat-{strategy}"
    run = h.run_job(cluster, namespace, strategy_manifest(name, strategy, **extra), release)
    status = run.job["status"]
    assert status["phase"] == "Succeeded", h.diagnostics(cluster, namespace, name, release)
    prog = status["progress"]
    assert prog["epoch"] == 4 and prog["round"] == 0, prog
    assert "grappa only" in status["rounds"]["note"], status["rounds"]
    assert len(status["rounds"]["history"]) == 1, status["rounds"]  # round 0 only
    assert 0.0 <= status["result"]["testAcc"] <= 1.0, status["result"]
    log = h.aggregator_log(cluster, namespace, name)
    assert "Traceback" not in log, log

