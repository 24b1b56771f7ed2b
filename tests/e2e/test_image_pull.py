"""A job whose image cannot be pulled ends Failed within a minute, not after the 600 s pending
deadline, with a reason naming the pod, the image and the setting to change
(grappa_operator/imagepull.py). The image's registry is 127.0.0.1:9 as the node sees it, where
nothing listens: the kubelet's pull fails without a packet leaving the node."""

from __future__ import annotations

import json

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

MISSING = "127.0.0.1:9/grappa/no-such-trainer:0.0.0"


def test_unpullable_image_fails_the_job_within_a_minute(cluster: Cluster, release: h.Release, namespace: str) -> None:
    name = "no-image"
    cluster.apply(json.dumps(h.storage_claim()), namespace)  # so the pod is scheduled and pulls
    h.apply_file(cluster, namespace, h.job_manifest(
        name, aggregator={"image": MISSING, "imagePullPolicy": "IfNotPresent"}))
    job = h.wait_job(cluster, namespace, name, lambda j: h.phase(j) == "Failed", "phase Failed",
                     timeout=h.scaled(60), rel=release, fail_on_failed=False)
    st = job["status"]
    assert st["reason"] == "ImagePullFailed", st
    for text in (f"pod {name}-prepare", MISSING, "set spec.aggregator.image"):
        assert text in st["message"], (text, st["message"])
    assert h.conditions(job)["Failed"]["status"] == "True"
    warn = h.job_warnings(cluster, namespace, name, lambda e: e["reason"] == "ImagePullFailed",
                          "the ImagePullFailed Warning Event")
    assert [e["reason"] for e in warn] == ["ImagePullFailed"], h.events_text(cluster, namespace)
    # cleanPodPolicy Running (the default) deletes the Pending pod
    cluster.wait_for(lambda: not [p for p in h.job_pods(cluster, namespace, name)
                                  if not p["metadata"].get("deletionTimestamp")],
                     h.scaled(30), "the prepare pod deleted")
