"""`python -m grappa_operator`: run the kopf operator with a liveness endpoint and metrics."""
from __future__ import annotations

import argparse
import logging
import sys
import threading

from . import settings as s


def parse_args(argv: list[str] | None = None) -> s.OperatorSettings:
    env = s.OperatorSettings.from_env()
    p = argparse.ArgumentParser(prog="python -m grappa_operator", description=__doc__)
    p.add_argument("-n", "--namespace", action="append", default=None,
                   help="namespace to watch (repeat; default $GRAPPA_WATCH_NAMESPACES, comma-separated; "
                        "empty = all namespaces)")
    p.add_argument("--metrics-port", type=int, default=env.metrics_port,
                   help="Prometheus port, 0 = off (default $GRAPPA_METRICS_PORT or 8080)")
    p.add_argument("--health-port", type=int, default=env.health_port,
                   help="liveness port serving /healthz (default $GRAPPA_HEALTH_PORT or 8081)")
    p.add_argument("--bind-address", default=env.bind_address,
                   help="address of both servers (default $GRAPPA_BIND_ADDRESS, else 0.0.0.0)")
    p.add_argument("--resync-seconds", type=float, default=env.resync_seconds,
                   help="period of the deadline/TTL resync (default 5)")
    p.add_argument("--leader-lease", default=env.leader_lease, metavar="NAMESPACE/NAME",
                   help="elect a leader on this Lease: only the holder reconciles (default "
                        "$GRAPPA_LEADER_LEASE; empty = no election, run at once)")
    a = p.parse_args(argv)
    namespaces = [n for arg in (a.namespace or []) for n in arg.split(",") if n.strip()] or env.namespaces
    if a.leader_lease and a.leader_lease.count("/") != 1:
        p.error(f"--leader-lease {a.leader_lease!r}: expected NAMESPACE/NAME")
    return s.OperatorSettings(namespaces=namespaces, metrics_port=a.metrics_port, health_port=a.health_port,
                              bind_address=a.bind_address, resync_seconds=a.resync_seconds,
                              leader_lease=a.leader_lease, identity=env.identity)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import kopf  # late: `--help` works without the operator extra

    from . import handlers, metrics

    handlers.configure(cfg)
    metrics.serve(cfg.bind_address, cfg.metrics_port)
    host = f"[{cfg.bind_address}]" if ":" in cfg.bind_address else cfg.bind_address
    log = logging.getLogger("grappa_operator")
    stop = threading.Event()
    lost = threading.Event()
    if cfg.leader_lease:
        lost = wait_for_leadership(cfg, stop)
    metrics.LEADER.set(1)
    log.info("watching %s; metrics on %s:%s, liveness on %s:%s/healthz",
             ",".join(cfg.namespaces) or "all namespaces", cfg.bind_address, cfg.metrics_port, host, cfg.health_port)
    kopf.run(
        clusterwide=not cfg.namespaces,
        namespaces=cfg.namespaces,
        standalone=True,  # one active replica: leader election, not kopf peering (leader.py)
        liveness_endpoint=f"http://{host}:{cfg.health_port}/healthz",
        stop_flag=stop,
    )
    return 1 if lost.is_set() else 0


def wait_for_leadership(cfg: s.OperatorSettings, stop: threading.Event) -> threading.Event:
    """Follow until this replica holds the Lease; the returned event is set if it is lost later
    (kopf is then stopped through `stop`, and the process exits 1 to restart as a follower)."""
    from . import leader, metrics
    from .kubeapi import load_credentials

    load_credentials()
    namespace, name = cfg.leader_lease.split("/")
    lost = threading.Event()

    def on_lost() -> None:
        lost.set()
        stop.set()
    metrics.LEADER.set(0)
    health = leader.standby_health(cfg.bind_address, cfg.health_port)
    logging.getLogger("grappa_operator").info("%s: following; waiting for the lease %s", cfg.identity,
                                              cfg.leader_lease)
    leading = leader.elect(namespace, name, cfg.identity, on_lost)
    leading.wait()
    health.shutdown()
    health.server_close()
    logging.getLogger("grappa_operator").info("%s: leading (lease %s)", cfg.identity, cfg.leader_lease)
    return lost


if __name__ == "__main__":
    sys.exit(main())
