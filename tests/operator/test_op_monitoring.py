"""The trainer PodMonitor trusts no label a pod exposes (any tenant can label a pod like a
trainer): no honorLabels, `job`/`rank` from the operator's pod labels, `namespace` left to the
target, the pod's own claims dropped. Rendered with the real helm."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))
from manifests import find_helm  # noqa: E402

from grappa_operator import settings as s  # noqa: E402

HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm binary: `make controlplane` builds one")


def monitors(tmp_path: Path, *sets: str) -> dict[str, dict]:
    args = [HELM, "template", "grappa", str(REPO / "charts" / "grappa"), "-n", "grappa-system",
            "--show-only", "templates/monitoring.yaml"]
    for setting in ("metrics.serviceMonitor.enabled=true", "metrics.trainerPodMonitor.enabled=true", *sets):
        args += ["--set", setting]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HELM_CACHE_HOME": str(tmp_path), "HELM_CONFIG_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out.stdout) if d}


def _label(key: str) -> str:
    return "__meta_kubernetes_pod_label_" + key.replace(".", "_").replace("/", "_").replace("-", "_")


def test_trainer_pod_monitor_takes_labels_from_the_operator_not_the_pod(tmp_path):
    (ep,) = monitors(tmp_path)["grappa-operator-trainers"]["spec"]["podMetricsEndpoints"]
    assert ep.get("honorLabels") is False
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in ep["relabelings"]}
    assert relabel == {"job": [_label(s.LABEL_JOB)], "rank": [_label(s.LABEL_RANK)]}
    assert "namespace" not in relabel  # the Prometheus Operator's, from the target
    (drop,) = ep["metricRelabelings"]
    assert drop["action"] == "labeldrop"
    for name in ("exported_job", "exported_rank", "exported_namespace", "exported_pod"):
        assert re.fullmatch(drop["regex"], name), name
    assert not re.fullmatch(drop["regex"], "kind")  # the trainer's own dimensions stay


def test_operator_monitors_keep_the_jobs_labels(tmp_path):
    """Only the operator serves its per-job series (namespace/job of each GrappaJob)."""
    (ep,) = monitors(tmp_path)["grappa-operator"]["spec"]["endpoints"]
    assert ep["honorLabels"] is True
