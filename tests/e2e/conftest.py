"""Session fixtures of the end-to-end suite (see docs/testing.md).

`cluster` is either a throw-away local control plane plus the process node, or, with
GRAPPA_E2E_USE_KUBECONFIG=1, whatever cluster $KUBECONFIG points at.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import Cluster, LocalCluster, find_tool, tool_env  # noqa: E402
from cluster.binaries import locate, stamped_versions  # noqa: E402


_EXPORTED = ("KUBECONFIG", "PATH", "KUBECACHEDIR", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")


def _use_existing() -> bool:
    return os.environ.get("GRAPPA_E2E_USE_KUBECONFIG") == "1" and bool(os.environ.get("KUBECONFIG"))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if _use_existing():
        kubeconfig = Path(os.environ["KUBECONFIG"])
        bin_env = os.environ.get("GRAPPA_CONTROLPLANE_BIN")
        bin_dir = Path(bin_env) if bin_env else None
        yield Cluster(kubeconfig, find_tool("kubectl", bin_dir), find_tool("helm", bin_dir),
                      env=tool_env(kubeconfig, bin_dir))
        return

    bin_dir = locate()
    local = LocalCluster(bin_dir)
    t0 = time.monotonic()
    try:
        local.start()  # stops whatever it started if it fails
    except BaseException:
        if os.environ.get("GRAPPA_E2E_KEEP_DIR") != "1":
            local.remove()
        raise
    sys.stderr.write(f"\ne2e: local cluster up in {time.monotonic() - t0:.1f}s at {local.server}, "
                     f"files in {local.root}\n")
    env = tool_env(local.kubeconfig, bin_dir, local.root / "tools")
    # Tests, the kubernetes client, and any kubectl/helm a test starts itself (without
    # cluster.env) find the cluster, and keep their caches in the temp folder, this way.
    saved_env = {k: os.environ.get(k) for k in _EXPORTED}
    os.environ.update({k: env[k] for k in _EXPORTED})
    c = Cluster(local.kubeconfig, str(bin_dir / "kubectl"), str(bin_dir / "helm"), local=local,
                expected_version=stamped_versions(bin_dir).get("kubernetes"), env=env)
    try:
        yield c
    finally:
        leftovers = local.stop()
        keep = os.environ.get("GRAPPA_E2E_KEEP_DIR") == "1"
        if not keep:
            local.remove()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # The session finaliser's promise: nothing survives the test bed.
        assert not leftovers, f"processes survived teardown (now killed): {leftovers}"
        assert keep or not local.root.exists(), f"{local.root} was not removed"


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


# The operator release and the happy-path job are shared by several test modules.
import helpers as h  # noqa: E402


@pytest.fixture(scope="session")
def release(cluster: Cluster, request: pytest.FixtureRequest) -> h.Release:
    return h.operator_release(cluster, request)


@pytest.fixture(scope="session")
def happy(cluster: Cluster, release: h.Release, request: pytest.FixtureRequest) -> h.JobRun:
    return h.happy_job(cluster, release, request)
