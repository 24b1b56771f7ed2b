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

The server behaves like AWS where a test could tell: no bucket is made by an upload to a missing
one (`-s3.autoCreateBucket=false`), a bucket with objects is not deleted. The endpoint is an IP
address: clients use path-style addressing (`client()` does).

Every listener (master, volume, filer, S3 and their gRPC ports) is on 127.0.0.1 at ports chosen
here; data, configuration and the log (stderr, no glog files) are in one pytest tmp folder,
except the four Unix sockets `weed server` makes for its gRPC services at fixed paths,
/tmp/seaweedfs-<service>-grpc-<port>.sock, which it removes when it stops (and this module after
it, if a SIGKILL left them). The master's usage report to SeaweedFS's telemetry server is off.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

import kind_bed
import processes
from waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "seaweedfs.sh"
REGION = "us-east-1"
HOST = "127.0.0.1"
SERVICES = ("master", "volume", "filer", "s3")
DENIED_ONLY_BUCKET = "s3-server-denied-only"  # the denied user's only rights: on a bucket never made
# Seconds between SIGTERM and SIGKILL. weed's own graceful stop takes over 15 s: it stops the volume
# server first, then the filer waits 15 s to flush its metadata log to a volume and gives up.
# The data is thrown away, so SIGKILL ends it sooner (and this module removes its sockets).
STOP_GRACE = 3.0
START_STALL = 60.0  # seconds without a new log line before the start is given up
START_TRIES = 3  # another process may take a chosen port before weed binds it


def weed_binary() -> Path:
    """hack/seaweedfs.sh's weed, built now if missing. Under `make test` the bed builds it and
    $GRAPPA_S3_READY says when (the runtest hook waited already); a failed build fails the test."""
    kind_bed.require(kind_bed.S3, "SeaweedFS (the S3 tests' server)")
    try:
        proc = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hack/seaweedfs.sh did not finish in {e.timeout:.0f} s", pytrace=False)
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not os.access(path, os.X_OK):
        tail = "\n".join(proc.stderr.splitlines()[-30:])
        pytest.fail(f"hack/seaweedfs.sh could not build SeaweedFS (exit {proc.returncode}; needs Go and "
                    f"the Go module proxy):\n{tail}", pytrace=False)
    return Path(path)


def _free_ports(n: int) -> list[int]:
    """n distinct ports free on 127.0.0.1 now (held together while chosen, so no two are equal)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    denied_access_key: str
    denied_secret_key: str
    root: Path
    log: Path
    ports: dict[str, int]
    process: Optional[subprocess.Popen] = None
    region: str = REGION
    _clients: dict[tuple, Any] = field(default_factory=dict, repr=False)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def client(self, denied: bool = False, read_timeout: float = 60.0):
        """A boto3 S3 client of the admin user (or of the denied one), path-style, no retries."""
        if (denied, read_timeout) not in self._clients:
            import boto3
            from botocore.config import Config

            key, secret = ((self.denied_access_key, self.denied_secret_key) if denied
                           else (self.access_key, self.secret_key))
            self._clients[denied, read_timeout] = boto3.client(
                "s3", endpoint_url=self.endpoint, region_name=self.region, aws_access_key_id=key,
                aws_secret_access_key=secret,
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                              connect_timeout=5, read_timeout=read_timeout))
        return self._clients[denied, read_timeout]

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def empty_and_delete_bucket(self, name: str) -> None:
        s3 = self.client()
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
            objects = [{"Key": o["Key"], "VersionId": o["VersionId"]}
                       for o in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if objects:
                s3.delete_objects(Bucket=name, Delete={"Objects": objects, "Quiet": True})
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", []):
                s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
        s3.delete_bucket(Bucket=name)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def grpc_sockets(self) -> list[Path]:
        """The Unix sockets `weed server` puts at fixed paths in /tmp, one a gRPC service."""
        return [Path(f"/tmp/seaweedfs-{svc}-grpc-{self.ports[svc + '.grpc']}.sock") for svc in SERVICES]


def _identities(server: S3Server) -> dict:
    return {"identities": [
        {"name": "grappa-tests", "credentials": [{"accessKey": server.access_key, "secretKey": server.secret_key}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "grappa-denied", "credentials": [{"accessKey": server.denied_access_key,
                                                   "secretKey": server.denied_secret_key}],
         "actions": [f"{a}:{DENIED_ONLY_BUCKET}" for a in ("Read", "Write", "List")]},
    ]}


# The master's configuration (config_dir): one volume a bucket's collection as it grows (not 7),
# and no hold on the first volume's allocation, which waits for veteran volume servers to report.
MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
allocation_deferral = "0s"
"""


def _command(weed: Path, server: S3Server) -> list[str]:
    p, root = server.ports, server.root
    return [
        str(weed), "-logtostderr", f"-config_dir={root / 'config'}", "server",
        f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={root / 'data'}",
        f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-master.volumePreallocate=false",
        f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
        "-volume.max=0", "-volume.preStopSeconds=0",
        "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
        f"-filer.localSocket={root / 'filer.sock'}",
        "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}", f"-s3.localSocket={root / 's3.sock'}",
        f"-s3.config={root / 'config' / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-s3.autoCreateBucket=false", "-s3.allowDeleteBucketNotEmpty=false",
    ]


def _ready(server: S3Server, write: bool) -> bool:
    """The gateway answers an admin's request and (`write`) a write lands: a probe bucket with one
    object, removed again. Writes wait some 8 s after the start: `weed server`'s filer holds its
    registration with the master (a fresh cluster's membership confirm), and an S3 write needs the
    lock ring that registration brings."""
    from botocore.exceptions import BotoCoreError, ClientError

    probe = "s3-server-ready-probe"
    try:
        s3 = server.client(read_timeout=10.0)
        s3.list_buckets()
        if not write:
            return True
        try:
            s3.create_bucket(Bucket=probe)
        except ClientError as e:  # made by an earlier round whose write failed
            if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        s3.put_object(Bucket=probe, Key="probe", Body=b"ok")
        assert s3.get_object(Bucket=probe, Key="probe")["Body"].read() == b"ok"
        server.empty_and_delete_bucket(probe)
        return True
    except (BotoCoreError, ClientError):
        return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's whole process group, SIGKILL after STOP_GRACE seconds."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # anything else left in its group (weed starts none of its own)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _start(weed: Path, root: Path) -> S3Server:
    names = [n for svc in SERVICES for n in (svc, svc + ".grpc")]
    ports = dict(zip(names, _free_ports(len(names))))
    server = S3Server(endpoint=f"http://{HOST}:{ports['s3']}", access_key="GRAPPA" + secrets.token_hex(7).upper(),
                      secret_key=secrets.token_urlsafe(30), denied_access_key="DENIED" + secrets.token_hex(7).upper(),
                      denied_secret_key=secrets.token_urlsafe(30), root=root, log=root / "weed.log", ports=ports)
    for d in ("config", "data", "home", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "config" / "s3.json").write_text(json.dumps(_identities(server), indent=1))
    (root / "config" / "master.toml").write_text(MASTER_TOML)
    if len(str(root / "filer.sock")) > 100:  # a Unix socket's path has at most 107 bytes
        raise RuntimeError(f"the S3 server's folder {root} is too deep for its Unix sockets (use a shorter --basetemp)")
    # its own session (process group) so teardown ends all of it; HOME and TMPDIR inside root, so
    # no configuration of the machine's ($HOME/.seaweedfs) is read and nothing is left elsewhere
    env = {**os.environ, "HOME": str(root / "home"), "TMPDIR": str(root / "tmp")}
    with server.log.open("ab") as log:
        server.process = subprocess.Popen(_command(weed, server), cwd=root, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return server


def _wait_ready(server: S3Server, write: bool) -> None:
    assert server.process is not None

    def done() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(f"weed server exited ({server.process.returncode}) while starting")
        return _ready(server, write)

    def size() -> int:
        try:
            return server.log.stat().st_size
        except OSError:
            return 0

    wait_until(done, f"SeaweedFS's S3 gateway at {server.endpoint}", stall=START_STALL, progress=size,
               ceiling=300, poll=0.3)


def _remove_sockets(server: S3Server) -> None:
    for path in server.grpc_sockets():
        try:
            if path.is_socket():
                path.unlink()
        except OSError:
            pass


@contextmanager
def running(root: Path, weed: Optional[Path] = None, write_ready: bool = True) -> Iterator[S3Server]:
    """A SeaweedFS server in `root`, ready (to write, or with `write_ready=False` only to answer);
    stopped (its whole process group) on leaving, whatever happened meanwhile."""
    weed = weed or weed_binary()
    for attempt in range(1, START_TRIES + 1):
        server = _start(weed, root / f"try{attempt}" if attempt > 1 else root)
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
            _stop(server.process)
            processes.release(server.pid)
            _remove_sockets(server)


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
