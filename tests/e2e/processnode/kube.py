"""A deliberately small Kubernetes REST client working on plain dicts.

Why not the `kubernetes` package's typed API: the node patches sub-resources with strategic
merge patches, streams watches, and passes objects around as they appear on the wire; plain JSON
keeps that direct and makes the wire format (which is what a kubelet really speaks) visible.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
import yaml

Obj = dict[str, Any]


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Kube:
    def __init__(self, kubeconfig: Path, cred_dir: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        ctx_name = cfg["current-context"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        self.server = cluster["server"].rstrip("/")
        cred_dir.mkdir(parents=True, exist_ok=True)

        def materialize(data_key: str, file_key: str, name: str, src: dict) -> str:
            if file_key in src:
                return str(src[file_key])
            p = cred_dir / name
            p.write_bytes(base64.b64decode(src[data_key]))
            p.chmod(0o600)
            return str(p)

        self.ca_file = materialize("certificate-authority-data", "certificate-authority", "ca.crt", cluster)
        self.http = urllib3.PoolManager(
            num_pools=4, maxsize=32, cert_reqs="CERT_REQUIRED", ca_certs=self.ca_file,
            cert_file=materialize("client-certificate-data", "client-certificate", "client.crt", user),
            key_file=materialize("client-key-data", "client-key", "client.key", user),
            timeout=urllib3.Timeout(connect=5, read=30), retries=False)

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                content_type: str = "application/json") -> Obj:
        url = self.server + path
        if params:
            url += "?" + urlencode({k: v for k, v in params.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        resp = self.http.request(method, url, body=data, headers={"Content-Type": content_type,
                                                                  "Accept": "application/json"})
        text = resp.data.decode(errors="replace")
        if resp.status >= 300:
            raise ApiError(resp.status, text, f"{method} {path}")
        return json.loads(text) if text else {}

    def get(self, path: str, **params: Any) -> Obj | None:
        """GET that maps 404 to None (most callers poll for objects to appear)."""
        try:
            return self.request("GET", path, params=params or None)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def patch(self, path: str, body: Obj, strategic: bool = True) -> Obj:
        ct = "application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
        return self.request("PATCH", path, body, content_type=ct)

    def watch(self, path: str, params: dict[str, Any]) -> Iterator[Obj]:
        """Stream watch events until the server closes the watch (timeoutSeconds) or errors."""
        q = dict(params, watch="true", allowWatchBookmarks="true")
        resp = self.http.request("GET", self.server + path + "?" + urlencode(q), preload_content=False,
                                 timeout=urllib3.Timeout(connect=5, read=int(q.get("timeoutSeconds", 300)) + 30))
        try:
            if resp.status >= 300:
                raise ApiError(resp.status, resp.read().decode(errors="replace"), f"WATCH {path}")
            buf = b""
            for chunk in resp.stream(8192, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()


def pod_path(ns: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}" + (f"/{sub}" if sub else "")
