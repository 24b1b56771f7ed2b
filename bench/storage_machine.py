"""The peer benchmark's storage machine: SeaweedFS's S3 gateway (hack/weed_server.py, the tests'
server) on a rank of its own in a ThrottledNetwork, bound to that namespace's address only, so
every byte the workers fetch from the chunk store crosses its shaped link (and bench/probe.py
counts it, as any machine's).

    with ThrottledNetwork(p + 2, "1gbit") as net, StorageMachine(net, p + 1, root) as storage:
        seconds = storage.upload(cfg_with_s3, rank=0)       # `grappa prepare`'s upload, from rank 0
        with storage.credentials():
            LocalJob(cfg_with_s3, placement=net).run()

The root namespace has no address on the bridge, so whatever talks to the gateway runs in a
namespace: its readiness check in its own (over loopback, no link), the upload in the
aggregator's (`python bench/storage_machine.py upload`, timed inside), the workers in theirs.
Traffic stays inside the test bed's 169.254.77.x namespaces.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "hack"))
import weed_server  # noqa: E402

BUCKET = "grappa-peer"
READY_S = 180.0  # weed's writes land some 8 s after its start; a loaded machine takes longer
# boto3 in the namespaces: credentials from the environment, never the instance metadata address
ENV = {"AWS_EC2_METADATA_DISABLED": "true"}


class StorageMachine:
    def __init__(self, net, rank: int, root: Path, weed: Optional[Path] = None):
        if rank >= net.ranks:
            raise ValueError(f"rank {rank}: the network has {net.ranks} namespaces")
        self.net, self.rank, self.root = net, rank, root
        self.weed = weed
        self.server: Optional[weed_server.S3Server] = None

    @property
    def address(self) -> str:
        return self.net.address(self.rank)

    def __enter__(self) -> "StorageMachine":
        weed = self.weed or weed_server.weed_path()
        self.server = weed_server.start(weed, self.root, host=self.address, prefix=self.net.prefix(self.rank))
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.server is not None and self.server.process is not None:
            weed_server.stop(self.server.process)
            weed_server.remove_sockets(self.server)

    def __exit__(self, *exc) -> None:
        self.close()

    def env(self) -> dict[str, str]:
        assert self.server is not None
        return {**ENV, **self.server.credentials}

    def _helper(self, rank: int, *args: str) -> subprocess.Popen:
        """This script in rank's namespace, with the credentials."""
        return subprocess.Popen([*self.net.prefix(rank), sys.executable, __file__, *args],
                                env={**os.environ, **self.env()}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def _wait_ready(self) -> None:
        """Until the gateway takes writes and the bucket is made; fails at once if weed exits."""
        assert self.server is not None and self.server.process is not None
        helper = self._helper(self.rank, "ready", "--endpoint", self.server.endpoint, "--bucket", BUCKET)
        deadline = time.monotonic() + READY_S + 10
        try:
            while helper.poll() is None:
                if self.server.process.poll() is not None:
                    raise RuntimeError(f"weed server exited ({self.server.process.returncode}) while "
                                       f"starting; its log:\n{self.server.log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"SeaweedFS at {self.server.endpoint} not ready after {READY_S:.0f} s; "
                                       f"its log:\n{self.server.log_tail()}")
                time.sleep(0.3)
            if helper.returncode:
                raise RuntimeError(f"SeaweedFS at {self.server.endpoint} not ready: {helper.stderr.read()[-2000:]}"
                                   f"\nits log:\n{self.server.log_tail()}")
        finally:
            if helper.poll() is None:
                helper.kill()
            helper.wait()

    def s3(self, prefix: str) -> dict:
        """storage.s3 of a store under `prefix` in the machine's bucket."""
        assert self.server is not None
        return {"endpoint": self.server.endpoint, "bucket": BUCKET, "prefix": prefix}

    def upload(self, cfg, rank: int = 0) -> dict:
        """cfg's storeDir (prepared) into its storage.s3 bucket, from `rank`'s namespace, as `grappa
        prepare` uploads it; the upload's seconds (timed there) and bytes."""
        from grappa.config import dump_config
        helper = self._helper(rank, "upload", "--config", dump_config(cfg))
        out, err = helper.communicate()
        if helper.returncode:
            raise RuntimeError(f"the upload to {self.address} failed (exit {helper.returncode}):\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])

    @contextmanager
    def credentials(self) -> Iterator[None]:
        """The credentials in os.environ while a job starts (LocalJob gives every rank its env)."""
        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _ready_here(endpoint: str, bucket: str) -> None:
    """In the storage machine's namespace: wait until weed takes writes, then make the bucket."""
    server = weed_server.S3Server(endpoint=endpoint, access_key=os.environ["AWS_ACCESS_KEY_ID"],
                                  secret_key=os.environ["AWS_SECRET_ACCESS_KEY"], denied_access_key="",
                                  denied_secret_key="", root=Path("."), log=Path("/dev/null"), ports={})
    deadline = time.monotonic() + READY_S
    while not weed_server.ready(server, write=True):
        if time.monotonic() > deadline:
            sys.exit(f"no write landed at {endpoint} in {READY_S:.0f} s")
        time.sleep(0.3)
    server.make_bucket(bucket)


def _upload_here(config: str) -> None:
    """In a machine's namespace: the prepared storeDir into cfg's storage.s3 bucket, as `grappa
    prepare` uploads it (upload_store, after the bucket's check), timed; prints its seconds and
    bytes as JSON."""
    sys.path[:0] = [str(ROOT / "trainer")]
    from grappa.config import config_with
    from grappa.data.s3.bucket import Bucket
    from grappa.data.s3.upload import upload_store
    cfg = config_with(json.loads(config))
    bucket = Bucket(cfg.storage.bucket_store)
    bucket.check()
    t0 = time.perf_counter()
    size = upload_store(cfg.store_path, bucket)
    print(json.dumps({"upload_seconds": time.perf_counter() - t0, "upload_bytes": size}))


def main() -> None:
    ap = argparse.ArgumentParser(description="the storage machine's helpers, run inside a namespace")
    ap.add_argument("role", choices=["ready", "upload"])
    ap.add_argument("--endpoint")
    ap.add_argument("--bucket", default=BUCKET)
    ap.add_argument("--config")
    args = ap.parse_args()
    if args.role == "ready":
        _ready_here(args.endpoint, args.bucket)
    else:
        _upload_here(args.config)


if __name__ == "__main__":
    main()
