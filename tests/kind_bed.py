"""The offline kind bed builds and starts the cluster while the suite runs (hack/kind/bed.sh run
--early): e2e tests wait here for what they need. tests/conftest.py calls this from its
runtest hook, outside a test's own timeout, so a cold machine's 30-minute build is waited for
without counting against any test."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from waiting import wait_until

CLUSTER = "GRAPPA_E2E_CLUSTER_READY"  # the cluster, with the images loaded
KUEUE = "GRAPPA_E2E_KUEUE_READY"      # Kueue installed in it (built and installed last)
TOOLS = "GRAPPA_TOOLS_READY"          # helm, built after the cluster's binaries
S3 = "GRAPPA_S3_READY"                # SeaweedFS's weed (tests/s3_server.py), the last Go build


def wait_for(env: str, what: str) -> bool:
    """Until the bed's marker file named by $env exists (True), or the bed wrote `.failed` beside
    it (False: its log says why; the fixtures that need it then fail each test, naming the log).
    Without $env (another cluster), no wait."""
    if not os.environ.get(env):
        return True
    ready = Path(os.environ[env])
    failed, logs = ready.with_suffix(".failed"), ready.parent.parent / "logs"
    if not ready.exists() and not failed.exists():
        def building() -> tuple:  # the bed's logs grow while it builds and starts
            return tuple(sorted((p.name, p.stat().st_size) for p in logs.glob("*") if p.is_file()))

        sys.stderr.write(f"\ne2e: waiting for the kind bed's {what} (building: {logs}) ...\n")
        # A Go build of one large binary logs nothing for minutes: half an hour silent is stuck.
        wait_until(lambda: ready.exists() or failed.exists(), f"the kind bed's {what}", stall=1800,
                   progress=building, ceiling=4 * 3600, poll=2)
    return ready.exists()


def require(env: str, what: str) -> None:
    """wait_for, failing the test when the bed could not make what it needs."""
    if not wait_for(env, what):
        logs = Path(os.environ[env]).parent.parent / "logs"
        pytest.fail(f"the kind bed's {what} could not be made: see {logs} (bring-up.log first)", pytrace=False)
