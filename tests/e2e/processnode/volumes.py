"""Pod volumes as local folders.

emptyDir -> a folder per pod; hostPath -> the host path itself; persistentVolumeClaim -> one folder
per claim shared by every pod that mounts it (the node's tiny provisioner binds the claim);
configMap/secret/downwardAPI/projected -> files written from the API objects before the first
container starts (and not refreshed afterwards; see docs/testing.md). Service-account tokens in
projected volumes come from the TokenRequest API, bound to the pod, exactly like the kubelet.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .envvars import field_ref
from .kube import Kube, Obj

log = logging.getLogger("processnode.volumes")


class VolumeNotReady(RuntimeError):
    """A referenced object is missing; the kubelet keeps retrying (pod stays ContainerCreating)."""


@dataclass(frozen=True)
class Volume:
    path: Path
    read_only: bool  # API-projected contents are always read-only in a real pod


def claim_dir(node_dir: Path, ns: str, claim: str) -> Path:
    return node_dir / "pvc" / ns / claim


def _write(dest: Path, rel: str, data: bytes, mode: int | None) -> None:
    p = dest / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    p.chmod(mode if mode is not None else 0o644)


def _items(data: dict[str, bytes], items: list[Obj] | None, dest: Path, mode: int | None,
           what: str, optional: bool) -> None:
    if items:
        for it in items:
            if it["key"] not in data:
                if optional:
                    continue
                raise VolumeNotReady(f"{what} has no key {it['key']!r}")
            _write(dest, it["path"], data[it["key"]], it.get("mode", mode))
    else:
        for k, v in data.items():
            _write(dest, k, v, mode)


class VolumeBuilder:
    def __init__(self, kube: Kube, node_dir: Path, pod: Obj, pod_dir: Path) -> None:
        self.kube, self.node_dir, self.pod, self.pod_dir = kube, node_dir, pod, pod_dir
        self.ns = pod["metadata"]["namespace"]

    def _object_data(self, kind: str, name: str, optional: bool) -> dict[str, bytes] | None:
        obj = self.kube.get(f"/api/v1/namespaces/{quote(self.ns)}/{kind}/{quote(name)}")
        if obj is None:
            if optional:
                return None
            raise VolumeNotReady(f"{kind[:-1]} {self.ns}/{name} not found")
        if kind == "secrets":
            return {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
        out = {k: v.encode() for k, v in obj.get("data", {}).items()}
        out.update({k: base64.b64decode(v) for k, v in obj.get("binaryData", {}).items()})
        return out

    def _token(self, src: Obj) -> bytes:
        meta = self.pod["metadata"]
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [src["audience"]] if src.get("audience") else None,
                     "expirationSeconds": int(src.get("expirationSeconds", 3607)),
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                        "uid": meta["uid"]}}}
        resp = self.kube.request(
            "POST", f"/api/v1/namespaces/{quote(self.ns)}/serviceaccounts/{quote(sa)}/token", body)
        return resp["status"]["token"].encode()

    def _projected(self, spec: Obj, dest: Path) -> None:
        mode = spec.get("defaultMode")
        for src in spec.get("sources", []):
            if "serviceAccountToken" in src:
                t = src["serviceAccountToken"]
                _write(dest, t["path"], self._token(t), mode if mode is not None else 0o600)
            elif "configMap" in src or "secret" in src:
                kind, ref = ("configmaps", src["configMap"]) if "configMap" in src else ("secrets", src["secret"])
                data = self._object_data(kind, ref["name"], bool(ref.get("optional")))
                if data is not None:
                    _items(data, ref.get("items"), dest, mode, f"{kind[:-1]} {ref['name']}",
                           bool(ref.get("optional")))
            elif "downwardAPI" in src:
                self._downward(src["downwardAPI"], dest, mode)
            else:
                log.warning("pod %s: unsupported projected source %s ignored", self.pod["metadata"]["name"],
                            sorted(src))

    def _downward(self, spec: Obj, dest: Path, mode: int | None) -> None:
        for it in spec.get("items", []):
            if "fieldRef" in it:
                value = field_ref(self.pod, it["fieldRef"]["fieldPath"])
                _write(dest, it["path"], value.encode(), it.get("mode", mode))

    def build(self) -> dict[str, Volume]:
        out: dict[str, Volume] = {}
        for v in self.pod["spec"].get("volumes", []):
            name = v["name"]
            local = self.pod_dir / "volumes" / name
            if "hostPath" in v:
                path = Path(v["hostPath"]["path"])
                if v["hostPath"].get("type") == "DirectoryOrCreate":
                    path.mkdir(parents=True, exist_ok=True)
                out[name] = Volume(path, False)
                continue
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]
                path = claim_dir(self.node_dir, self.ns, claim["claimName"])
                path.mkdir(parents=True, exist_ok=True)
                out[name] = Volume(path, bool(claim.get("readOnly")))
                continue
            local.mkdir(parents=True, exist_ok=True)
            ro = True
            if "configMap" in v or "secret" in v:
                if "configMap" in v:
                    ref, kind, rname = v["configMap"], "configmaps", v["configMap"]["name"]
                else:
                    ref, kind, rname = v["secret"], "secrets", v["secret"]["secretName"]
                data = self._object_data(kind, rname, bool(ref.get("optional")))
                if data is not None:
                    _items(data, ref.get("items"), local, ref.get("defaultMode"), f"{kind[:-1]} {rname}",
                           bool(ref.get("optional")))
            elif "projected" in v:
                self._projected(v["projected"], local)
            elif "downwardAPI" in v:
                self._downward(v["downwardAPI"], local, v["downwardAPI"].get("defaultMode"))
            else:
                # emptyDir, and anything we do not model (ephemeral, csi, ...) as a scratch folder.
                ro = False
                if "emptyDir" not in v:
                    log.warning("pod %s: volume %s of unsupported type, using an empty folder",
                                self.pod["metadata"]["name"], name)
            out[name] = Volume(local, ro)
        return out


def mounts_for(container: Obj, volumes: dict[str, Volume], env: dict[str, str]) -> list[dict[str, Any]]:
    """Sandbox mount specs for one container's volumeMounts (subPath/subPathExpr included)."""
    from .envvars import expand

    out = []
    for vm in container.get("volumeMounts", []):
        vol = volumes.get(vm["name"])
        if vol is None:
            continue
        src = vol.path
        sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
        if sub:
            src = src / sub
            if not src.exists():
                src.mkdir(parents=True, exist_ok=True)
        out.append({"source": str(src), "target": vm["mountPath"],
                    "readOnly": bool(vm.get("readOnly")) or vol.read_only})
    return out


def ensure_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.touch()
    os.chmod(path, 0o666)
    return path
