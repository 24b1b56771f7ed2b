"""The cluster the e2e suite runs against: the one $KUBECONFIG names (GRAPPA_E2E_USE_KUBECONFIG=1),
which `make test` makes with the offline kind bed (hack/kind/). See docs/testing.md."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Cluster", "find_tool", "free_port", "tool_env"]


@dataclass
class Cluster:
    """What tests get: a kubeconfig, tool paths and a few helpers."""

    kubeconfig: Path
    kubectl_bin: str
    helm_bin: str
    expected_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    _api: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_environment(cls) -> "Cluster":
        """The cluster $KUBECONFIG names, with the control plane's tools where the bed built them
        ($GRAPPA_CONTROLPLANE_BIN); on the bed the node runs that same pinned release."""
        from .binaries import stamped_versions  # noqa: PLC0415 (a sibling module importing this one)

        kubeconfig = Path(os.environ["KUBECONFIG"])
        bin_env = os.environ.get("GRAPPA_CONTROLPLANE_BIN")
        bin_dir = Path(bin_env) if bin_env else None
        on_bed = bin_dir is not None and bool(os.environ.get("GRAPPA_E2E_KIND_CLUSTER"))
        expected = stamped_versions(bin_dir).get("kubernetes") if on_bed and bin_dir else None
        return cls(kubeconfig, find_tool("kubectl", bin_dir), find_tool("helm", bin_dir),
                   expected_version=expected, env=tool_env(kubeconfig, bin_dir))

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.kubectl_bin, *args], env=self.env, input=input, text=True,
                              capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.helm_bin, *args], env=self.env, text=True, capture_output=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def api_get(self, path: str) -> Any:
        """GET an API path (`/api/v1/namespaces/NS/pods/NAME`) as JSON; None when it does not exist.

        Through one connection pool kept per process: the waits poll twice a second, and each
        kubectl run costs ~70 ms of CPU (a warm run's 3,788 of them took 267 CPU-s, more than the
        cluster's API server); a request here costs a few ms. Any other answer raises, naming the path."""
        host, pool, headers = self._api_pool()
        resp = pool.request("GET", host + path, headers=headers, timeout=30.0, retries=False)
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise AssertionError(f"GET {path}: HTTP {resp.status}\n{resp.data[:2000].decode(errors='replace')}")
        return json.loads(resp.data)

    def api_get_or_none(self, path: str) -> Any:
        """api_get, with None also when the API did not answer (as `kubectl get` failing): for
        waits, which poll again."""
        import urllib3  # noqa: PLC0415

        try:
            return self.api_get(path)
        except (AssertionError, urllib3.exceptions.HTTPError, OSError):
            return None

    def api_items(self, path: str, labels: str | None = None, fields: str | None = None) -> list[dict[str, Any]]:
        """The items of a list path (`/api/v1/namespaces/NS/pods`), as `kubectl get -l LABELS
        --field-selector FIELDS -o json` gives them; raises as api_get does."""
        from urllib.parse import urlencode  # noqa: PLC0415

        query = urlencode({k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v})
        found = self.api_get(f"{path}?{query}" if query else path)
        if found is None:
            raise AssertionError(f"GET {path}: not found")
        return found.get("items", [])

    def _api_pool(self) -> tuple[str, Any, dict[str, str]]:
        if self._api is None:
            import urllib3  # noqa: PLC0415 (e2e-only dependencies)
            from kubernetes import client, config  # noqa: PLC0415

            conf = client.Configuration()
            # the kubeconfig's credentials as kubectl reads them (client certificate or token)
            config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=conf)
            headers = {"Accept": "application/json"}
            if conf.api_key.get("authorization"):
                prefix = conf.api_key_prefix.get("authorization")
                headers["Authorization"] = f"{prefix} {conf.api_key['authorization']}" if prefix \
                    else conf.api_key["authorization"]
            pool = urllib3.PoolManager(maxsize=4, cert_file=conf.cert_file, key_file=conf.key_file,
                                       ca_certs=conf.ssl_ca_cert,
                                       cert_reqs="CERT_REQUIRED" if conf.verify_ssl else "CERT_NONE")
            self._api = (conf.host.rstrip("/"), pool, headers)
        return self._api

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: str, namespace: str | None = None) -> None:
        extra = ["-n", namespace] if namespace else []
        self.kubectl("apply", *extra, "-f", "-", input=manifest)

    def create_namespace(self, name: str, timeout: float = 60) -> str:
        """A namespace whose `default` ServiceAccount exists (pods are rejected before that)."""
        self.kubectl("create", "namespace", name)
        self.wait_for(lambda: self.api_get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
                      timeout, f"default ServiceAccount in {name}")
        return name

    def wait_for(self, predicate: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api_get_or_none(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def wait_pod_phase(self, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 90) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            p = self.pod(namespace, name)
            return p if p and p.get("status", {}).get("phase") in phases else None
        try:
            return self.wait_for(check, timeout, f"pod {namespace}/{name} in {phases}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.describe_pod(namespace, name)}") from None

    def describe_pod(self, namespace: str, name: str) -> str:
        """Pod status plus the containers' logs."""
        p = self.pod(namespace, name)
        out = json.dumps((p or {}).get("status", {}), indent=1)
        return out + "\n" + self.kubectl("logs", name, "-n", namespace, "--all-containers",
                                         check=False).stdout[-4000:]

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        return self.kubectl("logs", pod, "-n", namespace, "-c", container, check=False).stdout


def tool_env(kubeconfig: Path, bin_dir: Path | None) -> dict[str, str]:
    """Environment for kubectl/helm: the cluster's kubeconfig, the control plane's tools first."""
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kubeconfig)
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_tool(name: str, bin_dir: Path | None) -> str:
    if bin_dir is not None and (bin_dir / name).exists():
        return str(bin_dir / name)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found (set GRAPPA_CONTROLPLANE_BIN or put it on PATH)")
    return found
