"""Leader election for replicated operators: only the replica holding a coordination.k8s.io Lease
runs kopf; the others wait, answering the health probe, and take over when the lease expires.

Uses the kubernetes client's own election (kubernetes.leaderelection, a Lease lock). Why not kopf
peering: it pauses kopf's handlers but not the operator's own resync loop and metrics, two peers
of the same priority both pause, and it needs kopf's peering CRDs in the cluster.
A leader that loses its lease (e.g. partitioned from the API server) stops kopf and exits 1, so
its pod restarts as a follower; a killed leader is replaced after the lease duration.
"""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("grappa_operator")

LEASE_DURATION = 15  # seconds a follower waits for a silent leader before taking over
RENEW_DEADLINE = 10  # a leader that could not renew for this long gives up
RETRY_PERIOD = 2


def elect(namespace: str, name: str, identity: str, on_lost: Callable[[], None]) -> threading.Event:
    """Start campaigning in a background thread; the returned event is set once this replica leads."""
    leading = threading.Event()

    def lost() -> None:
        log.error("lost the leader lease %s/%s: stopping", namespace, name)
        on_lost()

    config = electionconfig.Config(LeaseLock(name, namespace, identity), LEASE_DURATION, RENEW_DEADLINE,
                                   RETRY_PERIOD, leading.set, lost)
    threading.Thread(target=leaderelection.LeaderElection(config).run, name="leader-election",
                     daemon=True).start()
    return leading


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"standby: waiting for the leader lease\n"
        self.send_response(200 if self.path.startswith("/healthz") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def standby_health(address: str, port: int) -> ThreadingHTTPServer:
    """/healthz for a follower (kopf's own endpoint starts only with kopf); shut it down before
    kopf binds the same port."""
    server = ThreadingHTTPServer((address, port), _Healthy)
    threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
    return server
