"""A throw-away control plane (etcd, apiserver, controller manager, scheduler) plus the process
node, all as local processes bound to 127.0.0.1, living entirely inside one temp folder."""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kubeconfig, pki
from .binaries import REPO
from .health import ComponentNotReady, tls_context, wait_healthy
from .procs import Component, free_port, group_is_ours, stop_group, tail

NODE_NAME = "process-node-0"
# Allocated ClusterIPs come from here; nothing ever dials them (the process node rewrites
# Service names to pod IPs), and the range is only book-keeping for the API server.
SERVICE_CIDR = "10.96.0.0/16"
# Upstream controller names (checked against `kube-controller-manager --help` of v1.36).
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    # StorageObjectInUseProtection admission puts finalizers on PVCs/PVs; without these two a
    # namespace holding a claim could never finish deleting.
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    # Keeps the aggregated admin/edit/view ClusterRoles complete, as charts expect.
    "clusterrole-aggregation-controller",
)
STARTUP_TIMEOUT = float(os.environ.get("GRAPPA_E2E_STARTUP_TIMEOUT", "120"))


@dataclass
class LocalCluster:
    bin_dir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="grappa-e2e-")))
    components: list[Component] = field(default_factory=list)
    api_port: int = 0

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def node_dir(self) -> Path:
        return self.root / "processnode"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _launch(self, name: str, argv: list[str], **kw: object) -> Component:
        comp = Component(name, argv, self.root / "logs" / f"{name}.log", **kw)  # type: ignore[arg-type]
        self.components.append(comp)
        comp.start()
        return comp

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        t0 = time.monotonic()
        p = pki.generate(self.root / "pki")
        # Components never read our environment for config, but a stray KUBECONFIG or proxy
        # variable could still redirect a client; give them a minimal, explicit one.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root)}

        etcd_port, etcd_peer = free_port(), free_port()
        etcd = self._launch("etcd", [
            self._bin("etcd"), "--name=default", f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
            "--log-level=warn", "--quota-backend-bytes=2147483648",
            # Tests create and delete objects quickly; fsync per write is pure cost here.
            "--unsafe-no-fsync",
        ], env=env)
        wait_healthy(etcd, f"http://127.0.0.1:{etcd_port}/health", STARTUP_TIMEOUT)

        self.api_port = free_port()
        apiserver = self._launch("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}", f"--cert-dir={self.root / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}", f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_public}",
            f"--service-account-signing-key-file={p.sa_private}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The built-in reconciler would publish the advertise address (loopback) as the
            # endpoint of the `kubernetes` Service, which Endpoints validation forbids.
            "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true", "--profiling=false", "--v=1",
        ], env=env)
        api_ctx = tls_context(p.ca.cert, p.admin.cert, p.admin.key)
        wait_healthy(apiserver, f"{self.server}/readyz", STARTUP_TIMEOUT, api_ctx)
        kubeconfig.write(self.kubeconfig, self.server, p.ca.cert, p.admin.cert, p.admin.key,
                         "grappa-e2e-admin")

        kcm_cfg = kubeconfig.write(self.root / "controller-manager.kubeconfig", self.server, p.ca.cert,
                                   p.controller_manager.cert, p.controller_manager.key,
                                   "system:kube-controller-manager")
        kcm_port = free_port()
        kcm = self._launch("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={kcm_cfg}", f"--authentication-kubeconfig={kcm_cfg}",
            f"--authorization-kubeconfig={kcm_cfg}",
            "--bind-address=127.0.0.1", f"--secure-port={kcm_port}",
            f"--cert-dir={self.root / 'kcm-certs'}",
            "--leader-elect=false", f"--controllers={','.join(CONTROLLERS)}",
            "--use-service-account-credentials",
            f"--root-ca-file={p.ca.cert}", f"--service-account-private-key-file={p.sa_private}",
            "--v=1",
        ], env=env)

        sched_cfg = kubeconfig.write(self.root / "scheduler.kubeconfig", self.server, p.ca.cert,
                                     p.scheduler.cert, p.scheduler.key, "system:kube-scheduler")
        sched_port = free_port()
        sched = self._launch("kube-scheduler", [
            self._bin("kube-scheduler"),
            f"--kubeconfig={sched_cfg}", f"--authentication-kubeconfig={sched_cfg}",
            f"--authorization-kubeconfig={sched_cfg}",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
            f"--cert-dir={self.root / 'scheduler-certs'}", "--leader-elect=false", "--v=1",
        ], env=env)
        insecure = tls_context(None)
        wait_healthy(kcm, f"https://127.0.0.1:{kcm_port}/healthz", STARTUP_TIMEOUT, insecure)
        wait_healthy(sched, f"https://127.0.0.1:{sched_port}/healthz", STARTUP_TIMEOUT, insecure)

        node_env = dict(env)
        node_env["PYTHONPATH"] = str(REPO / "tests" / "e2e")
        # Knobs of the node (entrypoints, image env, back-off, DNS wait) pass through.
        node_env.update({k: v for k, v in os.environ.items() if k.startswith("GRAPPA_PROCESSNODE_")})
        node = self._launch("processnode", [
            sys.executable, "-m", "processnode",
            f"--kubeconfig={self.kubeconfig}", f"--name={NODE_NAME}",
            f"--workdir={self.node_dir}", f"--apiserver-port={self.api_port}",
            f"--python={sys.executable}", f"--repo={REPO}", f"--hide={self.root}",
            f"--pod-ip-start={self._pick_pod_range()}",
        ], env=node_env)
        self._wait_node_ready(node)
        self.startup_seconds = time.monotonic() - t0

    def _pick_pod_range(self) -> str:
        """First pod IP of a 127.X.0.0/16 block no socket on this machine uses yet.

        Several test sessions (or engineers) may run beds side by side on one host, and they
        share its loopback: a fixed block would make their pods collide on ports.
        """
        used: set[int] = set()
        for table in ("/proc/net/tcp", "/proc/net/udp"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                local = line.split()[1].split(":")[0]  # little-endian hex IPv4
                octets = bytes.fromhex(local)[::-1]
                if octets[0] == 127:
                    used.add(octets[1])
        rng = random.Random()
        for _ in range(200):
            x = rng.randint(16, 254)
            if x not in used:
                return f"127.{x}.0.2"
        raise RuntimeError("no free 127.X.0.0/16 block for pod IPs")

    def _wait_node_ready(self, node: Component) -> None:
        # The node writes this marker after registering, un-tainting and reporting Ready.
        marker = self.node_dir / "ready"
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not marker.exists():
            if node.exited() is not None or time.monotonic() > deadline:
                raise ComponentNotReady(f"process node did not become ready; last lines of "
                                        f"{node.log}:\n{tail(node.log)}")
            time.sleep(0.2)

    def stop(self) -> list[str]:
        """Stop everything in reverse start order; return a description of any leftovers."""
        for comp in reversed(self.components):
            # The process node needs time to stop its pods' process groups itself.
            comp.stop(grace=30.0 if comp.name == "processnode" else 10.0)
        leftovers = [f"{c.name} (pgid {c.pgid})" for c in self.components if c.alive()]
        leftovers += self._reap_pod_groups()
        return leftovers

    def _reap_pod_groups(self) -> list[str]:
        """Pod process groups the node recorded; kill any the node failed to stop (a crash)."""
        ledger = self.node_dir / "pgids"
        found: list[str] = []
        if not ledger.exists():
            return found
        for line in ledger.read_text().splitlines():
            if not line.strip():
                continue
            pgid_s, start_s, what = line.split(" ", 2)
            pgid = int(pgid_s)
            if group_is_ours(pgid, int(start_s)):
                found.append(f"pod process group {pgid} ({what})")
                stop_group(pgid, 1.0)
        return found

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
