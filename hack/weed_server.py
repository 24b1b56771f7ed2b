"""SeaweedFS's S3 gateway (`weed server -s3`, built by hack/seaweedfs.sh) as Grappa's beds start it:
the tests on 127.0.0.1 (tests/s3_server.py) and the peer benchmark's storage machine in a network
namespace (bench/storage_machine.py). One command line, one identities file, one stop for both.

    server = start(weed_path(), root, host="127.0.0.1")      # or host=<namespace address>,
    while not ready(server, write=True): ...                   #    prefix=["ip", "netns", "exec", ns]
    stop(server.process); remove_sockets(server)

Every listener (master, volume, filer, S3 and their gRPC ports) is on `host` only, at ports chosen
here; data, configuration and the log (stderr, no glog files) are in `root`, except the four Unix
sockets `weed server` makes for its gRPC services at fixed paths,
/tmp/seaweedfs-<service>-grpc-<port>.sock, which it removes when it stops (and `remove_sockets`
after it, if a SIGKILL left them). The ports are chosen free on the host's loopback also for a
server in a namespace: its sockets' paths in the shared /tmp then clash with no other server's.
The master's usage report to SeaweedFS's telemetry server is off.

The server behaves like AWS where a test could tell: no bucket is made by an upload to a missing
one (`-s3.autoCreateBucket=false`), a bucket with objects is not deleted. The endpoint is an IP
address: clients use path-style addressing (`client()` does). Two users: an admin, and one with
rights on no bucket anyone makes (DENIED_ONLY_BUCKET), for the tests of refused credentials.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

BUILD = Path(__file__).resolve().parent / "seaweedfs.sh"
REGION = "us-east-1"
LOOPBACK = "127.0.0.1"
SERVICES = ("master", "volume", "filer", "s3")
DENIED_ONLY_BUCKET = "s3-server-denied-only"  # the denied user's only rights: on a bucket never made
# Seconds between SIGTERM and SIGKILL. weed's own graceful stop takes over 15 s: it stops the volume
# server first, then the filer waits 15 s to flush its metadata log to a volume and gives up.
# The data is thrown away, so SIGKILL ends it sooner (and remove_sockets tidies after it).
STOP_GRACE = 3.0
# The master's configuration (config_dir): one volume a bucket's collection as it grows (not 7),
# and no hold on the first volume's allocation, which waits for veteran volume servers to report.
MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
allocation_deferral = "0s"
"""


class WeedUnavailable(RuntimeError):
    """hack/seaweedfs.sh could not give a weed binary (no Go, no module proxy, ...)."""


def weed_path(timeout: float = 3600) -> Path:
    """hack/seaweedfs.sh's weed, built now if missing (needs Go and the Go module proxy)."""
    try:
        proc = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise WeedUnavailable(f"hack/seaweedfs.sh did not finish in {e.timeout:.0f} s") from None
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not os.access(path, os.X_OK):
        tail = "\n".join(proc.stderr.splitlines()[-30:])
        raise WeedUnavailable(f"hack/seaweedfs.sh could not build SeaweedFS (exit {proc.returncode}; "
                              f"needs Go and the Go module proxy):\n{tail}")
    return Path(path)


def free_ports(n: int) -> list[int]:
    """n distinct ports free on the host's loopback now (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
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
    host: str = LOOPBACK
    process: Optional[subprocess.Popen] = None
    region: str = REGION
    _clients: dict[tuple, Any] = field(default_factory=dict, repr=False)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def credentials(self) -> dict[str, str]:
        """The admin's credentials as boto3 reads them from the environment."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

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


def identities(server: S3Server) -> dict:
    return {"identities": [
        {"name": "grappa-tests", "credentials": [{"accessKey": server.access_key, "secretKey": server.secret_key}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "grappa-denied", "credentials": [{"accessKey": server.denied_access_key,
                                                   "secretKey": server.denied_secret_key}],
         "actions": [f"{a}:{DENIED_ONLY_BUCKET}" for a in ("Read", "Write", "List")]},
    ]}


def command(weed: Path, server: S3Server) -> list[str]:
    p, root, host = server.ports, server.root, server.host
    return [
        str(weed), "-logtostderr", f"-config_dir={root / 'config'}", "server",
        f"-ip={host}", f"-ip.bind={host}", f"-dir={root / 'data'}",
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


def start(weed: Path, root: Path, host: str = LOOPBACK, prefix: Sequence[str] = ()) -> S3Server:
    """weed server in `root`, listening on `host` only, started (not yet ready) in a session of its
    own, so `stop` ends all of it; `prefix` runs it elsewhere (e.g. `ip netns exec <ns>`)."""
    names = [n for svc in SERVICES for n in (svc, svc + ".grpc")]
    ports = dict(zip(names, free_ports(len(names))))
    server = S3Server(endpoint=f"http://{host}:{ports['s3']}", access_key="GRAPPA" + secrets.token_hex(7).upper(),
                      secret_key=secrets.token_urlsafe(30), denied_access_key="DENIED" + secrets.token_hex(7).upper(),
                      denied_secret_key=secrets.token_urlsafe(30), root=root, log=root / "weed.log", ports=ports,
                      host=host)
    for d in ("config", "data", "home", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "config" / "s3.json").write_text(json.dumps(identities(server), indent=1))
    (root / "config" / "master.toml").write_text(MASTER_TOML)
    if len(str(root / "filer.sock")) > 100:  # a Unix socket's path has at most 107 bytes
        raise RuntimeError(f"the S3 server's folder {root} is too deep for its Unix sockets (use a shorter one)")
    # HOME and TMPDIR inside root, so no configuration of the machine's ($HOME/.seaweedfs) is read
    # and nothing is left elsewhere
    env = {**os.environ, "HOME": str(root / "home"), "TMPDIR": str(root / "tmp")}
    with server.log.open("ab") as log:
        server.process = subprocess.Popen([*prefix, *command(weed, server)], cwd=root, env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, preexec_fn=_dies_with(os.getpid()))
    return server


def _dies_with(parent: int):
    """A hook for the child: SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG; kept
    through `ip netns exec`'s exec), so a starter killed before its `stop` (a timed-out pytest, a
    killed benchmark) leaves no server behind in its own session. SIGKILL, as `stop` ends it
    anyway: weed's own stop on SIGTERM takes over 15 s. Start it from a thread that lives as long."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None).prctl  # looked up before the fork: the child only calls it
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the starter was gone before prctl
            os.kill(os.getpid(), signal.SIGKILL)
    return hook


def ready(server: S3Server, write: bool) -> bool:
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


def stop(process: subprocess.Popen) -> None:
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


def remove_sockets(server: S3Server) -> None:
    for path in server.grpc_sockets():
        try:
            if path.is_socket():
                path.unlink()
        except OSError:
            pass
