"""Self-contained kubeconfig files (certificates embedded, so the file can be copied anywhere)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str,
          cluster_name: str = "grappa-e2e") -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name,
                      "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": user,
                   "user": {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
