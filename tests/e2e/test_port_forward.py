"""`kubectl port-forward` reaches the metrics servers: port-forward connects to 127.0.0.1 inside
the pod, so this fails if a server binds only the pod IP (as the operator and trainer once did)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid

import pytest

import helpers as h
from cluster import Cluster, free_port

pytestmark = pytest.mark.e2e


def forward_and_read(cluster: Cluster, ns: str, target: str, remote_port: int, timeout: float = 60) -> str:
    """Port-forward `target` (pod/NAME or svc/NAME) and GET /metrics on 127.0.0.1."""
    local = free_port()
    proc = subprocess.Popen([cluster.kubectl_bin, "port-forward", "-n", ns, target, f"{local}:{remote_port}",
                             "--address", "127.0.0.1"], env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    last = ""
    try:
        deadline = time.monotonic() + h.scaled(timeout)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"kubectl port-forward {target} exited {proc.returncode}: {out}{err}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local}/metrics", timeout=10) as r:  # noqa: S310
                    return r.read().decode()
            except OSError as e:  # not listening yet, or the pod refused the forwarded connection
                last = repr(e)
            time.sleep(1)
        raise AssertionError(f"no /metrics through port-forward to {ns}/{target}:{remote_port}: {last}")
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        # "connection refused" here is the bind-address bug: the server is not on 127.0.0.1.
        assert "connection refused" not in (err or "").lower(), err


def test_operator_metrics_through_port_forward(cluster: Cluster, release: h.Release) -> None:
    pod = h.wait_operator(cluster, release)
    port = int(release.values.get("metrics", {}).get("port", 8080))
    body = forward_and_read(cluster, release.namespace, f"pod/{pod['metadata']['name']}", port)
    assert "grappa_operator_reconcile_duration_seconds" in body, body[:2000]
    # The Service NOTES.txt points at (same server, through the Service's selector).
    body = forward_and_read(cluster, release.namespace, f"svc/{release.fullname}-metrics", port)
    assert "grappa_operator_" in body


def test_trainer_metrics_through_port_forward(cluster: Cluster, release: h.Release, namespace: str) -> None:
    """A job kept training long enough to forward to its aggregator (rank 0) while it runs."""
    name = f"pf-{uuid.uuid4().hex[:6]}"
    job = h.job_manifest(name, epochs=200, partitions=1)  # one worker: the aggregator starts sooner
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    h.apply_file(cluster, namespace, job)
    try:
        h.wait_job(cluster, namespace, name, lambda j: h.phase(j) == "Running" and h.progress(j).get("epoch", 0) >= 1,
                   "Running with an epoch done", rel=release)
        port = int(job["spec"].get("metricsPort", 9400))
        body = forward_and_read(cluster, namespace, f"pod/{name}-aggregator", port)
        assert f'job="{name}"' in body and "grappa_trainer_epoch" in body, body[:2000]
    finally:
        cluster.kubectl("delete", h.RESOURCE, name, "-n", namespace, "--wait=false", check=False)
