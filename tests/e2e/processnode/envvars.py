"""Container environment the way the kubelet builds it: $(VAR) expansion, downward API,
ConfigMap/Secret references, and the `kubernetes` service variables."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from .kube import Kube, Obj

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class EnvError(RuntimeError):
    """A non-optional reference cannot be resolved (the kubelet reports CreateContainerConfigError)."""


def expand(s: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, undefined ones kept verbatim,
    and `$$` escapes a dollar (so `$$(X)` yields the literal `$(X)`)."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return _REF.sub(sub, s)


def field_ref(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    simple: dict[str, Callable[[], Any]] = {
        "metadata.name": lambda: meta["name"],
        "metadata.namespace": lambda: meta["namespace"],
        "metadata.uid": lambda: meta["uid"],
        "metadata.labels": lambda: "\n".join(f'{k}="{v}"' for k, v in sorted(meta.get("labels", {}).items())),
        "metadata.annotations": lambda: "\n".join(
            f'{k}="{v}"' for k, v in sorted(meta.get("annotations", {}).items())),
        "spec.nodeName": lambda: spec.get("nodeName", ""),
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", ""),
        "status.hostIP": lambda: status.get("hostIP", ""),
        "status.hostIPs": lambda: ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIP": lambda: status.get("podIP", ""),
        "status.podIPs": lambda: ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path not in simple:
        raise EnvError(f"unsupported fieldRef {path!r}")
    return str(simple[path]())


_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20,
           "Gi": 2**30, "Ti": 2**40}


def _quantity(q: str) -> float:
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(q))
    if not m or m.group(2) not in _SUFFIX:
        raise EnvError(f"cannot parse quantity {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def resource_ref(container: Obj, ref: Obj, node_alloc: Mapping[str, str]) -> str:
    """resourceFieldRef: the container's limit (node allocatable when unset), rounded up in
    units of `divisor`, as the kubelet does."""
    res = ref["resource"]
    kind, _, name = res.partition(".")
    value = container.get("resources", {}).get(kind, {}).get(name)
    if value is None:
        value = node_alloc.get(name, "0") if kind == "limits" else "0"
    divisor = _quantity(ref.get("divisor", "1"))
    return str(math.ceil(_quantity(value) / divisor))


class ObjectCache:
    """ConfigMaps and Secrets read once per container start."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self._cache: dict[tuple[str, str], Obj | None] = {}

    def get(self, kind: str, name: str) -> Obj | None:
        key = (kind, name)
        if key not in self._cache:
            self._cache[key] = self.kube.get(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
        return self._cache[key]

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        obj = self.get(kind, name)
        if obj is None:
            return None
        if kind == "secrets":
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in obj.get("data", {}).items()}
        return dict(obj.get("data", {}))


def build_env(pod: Obj, container: Obj, base: Mapping[str, str], objects: ObjectCache,
              node_alloc: Mapping[str, str]) -> dict[str, str]:
    """`base` (image-like defaults and the service variables) overlaid by envFrom, then env."""
    env: dict[str, str] = dict(base)
    for src in container.get("envFrom", []):
        prefix = src.get("prefix", "")
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            if key in src:
                ref = src[key]
                data = objects.data(kind, ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise EnvError(f"{kind[:-1]} {ref['name']!r} not found")
                for k, v in data.items():
                    env[prefix + k] = v
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            target = container
            cname = vf["resourceFieldRef"].get("containerName")
            if cname:
                target = next(c for c in pod["spec"].get("containers", []) + pod["spec"].get(
                    "initContainers", []) if c["name"] == cname)
            env[name] = resource_ref(target, vf["resourceFieldRef"], node_alloc)
        else:
            kind, ref = (("configmaps", vf["configMapKeyRef"]) if "configMapKeyRef" in vf
                         else ("secrets", vf["secretKeyRef"]))
            data = objects.data(kind, ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise EnvError(f"{kind[:-1]} {ref['name']!r} key {ref['key']!r} not found")
            env[name] = data[ref["key"]]
    return env


def describe(env: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(env.items())), indent=1)
