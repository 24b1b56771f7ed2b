"""python -m processnode --kubeconfig ... --name ... --workdir ... (see docs/testing.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .context import NodeContext
from .dns import Resolver
from .kube import Kube
from .node import Node


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="processnode", description="A kubelet stand-in that runs pods "
                                "as local process groups on 127.0.0.0/8 addresses.")
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--name", default="process-node-0")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--apiserver-port", type=int, required=True)
    p.add_argument("--python", default=sys.executable, help="interpreter that replaces python/python3")
    p.add_argument("--repo", type=Path, required=True, help="repo whose trainer/ and operator/ go on PYTHONPATH")
    p.add_argument("--hide", type=Path, action="append", default=[],
                   help="host folder pods must not see (repeatable), e.g. the test bed's PKI")
    p.add_argument("--cpu", default="32")
    p.add_argument("--memory", default="64Gi")
    p.add_argument("--pods", default="110")
    p.add_argument("--pod-ip-start", default="127.10.0.2")
    p.add_argument("--dns-wait", type=float, default=float(os.environ.get("GRAPPA_PROCESSNODE_DNS_WAIT", "120")))
    p.add_argument("--backoff", type=float, default=float(os.environ.get("GRAPPA_PROCESSNODE_BACKOFF", "10")))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.workdir.mkdir(parents=True, exist_ok=True)
    kube = Kube(args.kubeconfig, args.workdir / "credentials")
    # Images have no meaning here; a pod whose container omits `command` needs to be told what
    # the image's ENTRYPOINT would have been: {"image-prefix": ["python", "-m", "pkg"], ...}.
    entrypoints = json.loads(os.environ.get("GRAPPA_PROCESSNODE_ENTRYPOINTS", "{}"))
    image_env = json.loads(os.environ.get("GRAPPA_PROCESSNODE_IMAGE_ENV", "{}"))
    ctx = NodeContext(
        kube=kube, name=args.name, workdir=args.workdir, python=args.python, repo=args.repo,
        apiserver_port=args.apiserver_port,
        resolver=Resolver(kube, args.apiserver_port, args.dns_wait),
        allocatable={"cpu": args.cpu, "memory": args.memory, "pods": args.pods},
        backoff_base=args.backoff, entrypoints=entrypoints, image_env=image_env,
        pod_cidr_start=args.pod_ip_start, hide=args.hide)
    node = Node(ctx)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    node.run()
    stop.wait()
    logging.getLogger("processnode").info("stopping: terminating all pod processes")
    node.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
