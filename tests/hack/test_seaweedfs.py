"""The tests' S3 server (tests/s3_server.py: SeaweedFS built by hack/seaweedfs.sh): it answers S3
as the store needs, refuses a user without rights, listens on 127.0.0.1 only and leaves nothing
behind. A few seconds once weed is built (under `make test` the bed builds it: $GRAPPA_S3_READY)."""
from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

import processes
import s3_server as s3
from s3_server import s3_bucket, s3_server  # noqa: F401 - fixtures
from waiting import wait_until


def test_put_get_range_and_list_as_the_admin(s3_server: s3.S3Server, s3_bucket: str) -> None:  # noqa: F811
    client = s3_server.client()
    body = bytes(range(256)) * 1000
    client.put_object(Bucket=s3_bucket, Key="run/a.bin", Body=body)
    client.put_object(Bucket=s3_bucket, Key="run/b.bin", Body=b"b")
    client.put_object(Bucket=s3_bucket, Key="other/c.bin", Body=b"c")
    assert client.get_object(Bucket=s3_bucket, Key="run/a.bin")["Body"].read() == body
    part = client.get_object(Bucket=s3_bucket, Key="run/a.bin", Range="bytes=1000-1999")
    assert part["Body"].read() == body[1000:2000]
    assert part["ContentRange"] == f"bytes 1000-1999/{len(body)}"
    listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="run/")
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [("run/a.bin", len(body)), ("run/b.bin", 1)]
    with pytest.raises(ClientError) as missing:
        client.get_object(Bucket=s3_bucket, Key="run/none")
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as no_bucket:  # no bucket made by an upload (as on AWS)
        client.put_object(Bucket="s3-server-never-made", Key="x", Body=b"x")
    assert no_bucket.value.response["Error"]["Code"] == "NoSuchBucket"


def test_the_denied_user_is_refused(s3_server: s3.S3Server, s3_bucket: str) -> None:  # noqa: F811
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"secret")
    denied = s3_server.client(denied=True)
    for call in (lambda: denied.get_object(Bucket=s3_bucket, Key="k"),
                 lambda: denied.put_object(Bucket=s3_bucket, Key="k2", Body=b"x"),
                 lambda: denied.list_objects_v2(Bucket=s3_bucket),
                 lambda: denied.delete_object(Bucket=s3_bucket, Key="k")):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, refused.value.response
    assert s3_server.client().get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"secret"


def _group(pgid: int) -> set[int]:
    """The live processes of a process group."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.add(int(text.split(" ", 1)[0]))
    return out


def _address(hex_addr: str, v6: bool) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if v6:  # four host-order 32-bit words
        raw = b"".join(struct.pack("@I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)
    return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)


def _inet_sockets(pids: set[int]) -> list[tuple[str, tuple[str, int], tuple[str, int], str]]:
    """(protocol, local, remote, tcp state) of every internet socket the processes hold."""
    inodes: dict[int, set[str]] = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.setdefault(pid, set()).add(target[8:-1])
    found = []
    for pid, mine in inodes.items():
        for proto in ("tcp", "tcp6", "udp", "udp6"):
            for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
                f = line.split()
                if f[9] in mine:
                    v6 = proto.endswith("6")
                    found.append((proto, _address(f[1], v6), _address(f[2], v6), f[3]))
    return found


def test_every_listener_and_connection_is_on_loopback(s3_server: s3.S3Server) -> None:  # noqa: F811
    s3_server.client().list_buckets()
    sockets = _inet_sockets(_group(s3_server.pid))
    listening = {local for proto, local, _, state in sockets if proto.startswith("tcp") and state == "0A"}
    assert listening == {("127.0.0.1", port) for port in s3_server.ports.values()}, sockets
    for proto, local, remote, state in sockets:
        assert local[0] == "127.0.0.1" and remote[0] in ("127.0.0.1", "0.0.0.0"), (proto, local, remote, state)


def test_a_stopped_server_leaves_no_process_and_no_socket(tmp_path: Path) -> None:
    tmp_top = set(os.listdir("/tmp"))
    with s3.running(tmp_path / "s3", write_ready=False) as server:  # (not the 8 s until writes land)
        members = _group(server.pid)
        assert server.pid in members and members <= processes.descendants(os.getpid())
        sockets = server.grpc_sockets()
        # weed makes its gRPC sockets as its services come up, some after the S3 port answers: wait
        # for them (so the check below sees them go)
        wait_until(lambda: all(p.is_socket() for p in sockets), f"weed's gRPC sockets {sockets}", stall=30)
    assert _group(server.pid) == set()
    assert server.process is not None and server.process.returncode is not None
    assert not [p for p in sockets if p.exists()]
    assert not [n for n in set(os.listdir("/tmp")) - tmp_top if n.startswith("weed")]  # no glog files


def test_a_server_whose_starter_is_killed_ends_too(tmp_path: Path) -> None:
    """A starter killed before its stop (a timed-out pytest) leaves no server running."""
    weed = s3.weed_binary()
    hack = Path(__file__).resolve().parents[2] / "hack"
    tmp_top = set(os.listdir("/tmp"))
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import weed_server as w; "
            "s = w.start(w.Path(sys.argv[2]), w.Path(sys.argv[3])); print(s.pid, flush=True); time.sleep(600)")
    starter = subprocess.Popen([sys.executable, "-c", code, str(hack), str(weed), str(tmp_path / "s3")],
                               stdout=subprocess.PIPE, text=True)
    try:
        pid = int(starter.stdout.readline())
        assert _group(pid) == {pid}  # weed runs, in a session of its own
    finally:
        starter.kill()
        starter.wait()
    try:
        wait_until(lambda: not _group(pid), f"weed {pid} ending with its starter", stall=30)
    finally:  # the test ends it when the starter's death did not
        if _group(pid):
            os.killpg(pid, signal.SIGKILL)
    for name in set(os.listdir("/tmp")) - tmp_top:  # its gRPC sockets: a killed weed leaves them
        if name.startswith("seaweedfs-") and name.endswith(".sock"):
            Path("/tmp", name).unlink(missing_ok=True)
