"""A real S3-compatible server for the tests: SeaweedFS's S3 gateway (`weed server -s3`, built once
per version by hack/seaweedfs.sh), one per pytest process, on 127.0.0.1 only.

    from s3_server import s3_bucket, s3_server  # noqa: F401

`s3_server` (session) is the running server: `endpoint`, the credentials of an admin user
(`access_key`, `secret_key`) and of a user with rights on no bucket of the tests
(`denied_access_key`, `denied_secret_key`), `region`, `make_bucket(name)`, `client()`,
`log_tail()`. `s3_bucket` is a fresh, empty bucket a test (emptied and deleted after it).
One server a pytest process (a lane), however many modules import the fixture: it takes some
10 s to start (0.3 CPU-s; most of it `weed server`'s own hold before writes land), 160 MB of
memory. It is started in a session of its own and registered with tests/processes.py as the
session's (`keep`), so the leftover-process check of the test that happens to start it leaves it
alone; its teardown ends its whole process group.

The server itself (its command line, listeners on 127.0.0.1 only, its users, its Unix sockets in
/tmp, its stop) is hack/weed_server.py's, which the peer benchmark's storage machine starts too
(bench/storage_machine.py); this module adds the pytest side: the build's wait under `make test`,
another try when a chosen port was taken, the fixtures.
"""
from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import pytest

import kind_bed
import processes
from waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "hack"))  # after the tests' own modules
import weed_server  # noqa: E402 - the command line, identities and stop the benchmark shares
from weed_server import S3Server  # noqa: E402,F401 - the fixture's type, for the tests

START_STALL = 60.0  # seconds without a new log line before the start is given up
START_TRIES = 3  # another process may take a chosen port before weed binds it


def weed_binary() -> Path:
    """hack/seaweedfs.sh's weed, built now if missing. Under `make test` the bed builds it and
    $GRAPPA_S3_READY says when (the runtest hook waited already); a failed build fails the test."""
    kind_bed.require(kind_bed.S3, "SeaweedFS (the S3 tests' server)")
    try:
        return weed_server.weed_path()
    except weed_server.WeedUnavailable as e:
        pytest.fail(str(e), pytrace=False)


def _wait_ready(server: S3Server, write: bool) -> None:
    assert server.process is not None

    def done() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(f"weed server exited ({server.process.returncode}) while starting")
        return weed_server.ready(server, write)

    def size() -> int:
        try:
            return server.log.stat().st_size
        except OSError:
            return 0

    wait_until(done, f"SeaweedFS's S3 gateway at {server.endpoint}", stall=START_STALL, progress=size,
               ceiling=300, poll=0.3)


@contextmanager
def running(root: Path, weed: Optional[Path] = None, write_ready: bool = True) -> Iterator[S3Server]:
    """A SeaweedFS server in `root`, ready (to write, or with `write_ready=False` only to answer);
    stopped (its whole process group) on leaving, whatever happened meanwhile."""
    weed = weed or weed_binary()
    for attempt in range(1, START_TRIES + 1):
        server = weed_server.start(weed, root / f"try{attempt}" if attempt > 1 else root)
        assert server.process is not None
        processes.keep(server.pid)  # the session's, not the leftover of the test that started it
        try:
            try:
                _wait_ready(server, write_ready)
            except (AssertionError, RuntimeError) as e:
                clash = "address already in use" in server.log_tail(200)
                if clash and attempt < START_TRIES:
                    continue  # (the finally below stops this one first)
                pytest.fail(f"SeaweedFS did not start: {e}\nits log ({server.log}):\n{server.log_tail()}",
                            pytrace=False)
            yield server
            return
        finally:
            weed_server.stop(server.process)
            processes.release(server.pid)
            weed_server.remove_sockets(server)


_SESSION: Optional[S3Server] = None  # the process's server: one, however many modules import the fixture


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The pytest process's SeaweedFS S3 server, started once (each test module that imports this
    fixture has a session fixture of its own: the first one started it and ends it)."""
    global _SESSION
    if _SESSION is not None:
        yield _SESSION
        return
    with running(tmp_path_factory.mktemp("s3-server")) as server:
        _SESSION = server
        try:
            yield server
        finally:
            _SESSION = None


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A fresh, empty bucket for one test; emptied and deleted after it."""
    name = s3_server.make_bucket(f"test-{uuid.uuid4().hex[:20]}")
    yield name
    s3_server.empty_and_delete_bucket(name)
