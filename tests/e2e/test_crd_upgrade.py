"""The CRD upgrade path of docs/operator.md ("Upgrading the CRD"): helm never updates crds/, so a
user applies the new chart's CRD server-side before `helm upgrade`. Here the "old" CRD is the
current one with a field removed (runPolicy.ttlSecondsAfterFinished): a job created under it must
survive the server-side apply of the current CRD, and the field must then be accepted and
validated. The current CRD is re-applied whatever happens, so later tests see it."""

from __future__ import annotations

import copy
import json
import subprocess  # noqa: F401 - the annotation of _apply_strict
import uuid

import pytest
import yaml

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

CRD_FILE = h.CHART / "crds" / "grappajobs.yaml"
FIELD = "ttlSecondsAfterFinished"


def _run_policy(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["runPolicy"]


def old_crd() -> dict:
    crd = yaml.safe_load(CRD_FILE.read_text())
    old = copy.deepcopy(crd)
    assert FIELD in _run_policy(old)["properties"], "pick another field: this one is gone from the CRD"
    del _run_policy(old)["properties"][FIELD]
    old["metadata"].pop("resourceVersion", None)
    return old


def wait_established(cluster: Cluster, has_field: bool) -> None:
    def check() -> bool:
        crd = cluster.kubectl_json("get", "crd", h.RESOURCE)
        conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        return conds.get("Established") == "True" and (FIELD in _run_policy(crd)["properties"]) == has_field
    cluster.wait_for(check, h.scaled(60), f"CRD {h.RESOURCE} Established (with {FIELD}: {has_field})")


def apply_current_crd(cluster: Cluster) -> None:
    # Exactly the documented command.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE.parent))


def _apply_strict(cluster: Cluster, namespace: str, obj: dict) -> "subprocess.CompletedProcess[str]":
    """`kubectl apply --validate=strict`: the API server refuses fields its schema lacks."""
    return cluster.kubectl("apply", "--validate=strict", "-n", namespace, "-f", "-", input=json.dumps(obj),
                           check=False)


@pytest.mark.exclusive  # every job is served the old schema meanwhile
def test_job_survives_a_server_side_crd_upgrade(cluster: Cluster, release: h.Release, namespace: str) -> None:
    name = f"upg-{uuid.uuid4().hex[:6]}"
    # Kept Pending (its prepare pod uses the aggregator's unschedulable nodeSelector): no training.
    job = h.job_manifest(name, aggregator={"nodeSelector": {"grappa.dev/e2e-unschedulable": "true"}})
    try:
        # A full replacement, as an older chart's install would have left it.
        cluster.kubectl("replace", "-f", "-", input=json.dumps(old_crd()))
        wait_established(cluster, has_field=False)
        cluster.apply(json.dumps(h.storage_claim()), namespace)
        h.apply_file(cluster, namespace, job)
        before = h.wait_job(cluster, namespace, name, lambda j: h.phase(j) is not None, "a phase", rel=release)
        uid = before["metadata"]["uid"]
        # The old schema does not know the field: strict validation refuses it.
        with_field = copy.deepcopy(job)
        with_field["spec"]["runPolicy"][FIELD] = 3600
        refused = _apply_strict(cluster, namespace, with_field)
        assert refused.returncode != 0 and FIELD in (refused.stderr + refused.stdout), refused

        apply_current_crd(cluster)
        wait_established(cluster, has_field=True)

        after = h.get_job(cluster, namespace, name)
        assert after is not None and after["metadata"]["uid"] == uid, "the job did not survive the CRD upgrade"
        assert after["spec"]["partitions"] == job["spec"]["partitions"]
        # The new field is accepted, stored and validated (minimum 0).
        accepted = _apply_strict(cluster, namespace, with_field)
        assert accepted.returncode == 0, accepted.stderr
        got = h.get_job(cluster, namespace, name)
        assert got is not None and got["spec"]["runPolicy"].get(FIELD) == 3600, got and got["spec"]
        bad = cluster.kubectl("patch", h.RESOURCE, name, "-n", namespace, "--type=merge", "-p",
                              json.dumps({"spec": {"runPolicy": {FIELD: -1}}}), check=False)
        assert bad.returncode != 0 and FIELD in bad.stderr, bad.stderr
        # The operator still reconciles it (its status keeps being written).
        h.wait_job(cluster, namespace, name,
                   lambda j: (j.get("status") or {}).get("observedGeneration", 0) >= j["metadata"]["generation"],
                   "observedGeneration catching up after the upgrade", timeout=h.scaled(60), rel=release)
    finally:
        apply_current_crd(cluster)
        wait_established(cluster, has_field=True)
        cluster.kubectl("delete", h.RESOURCE, name, "-n", namespace, "--wait=false", check=False)
