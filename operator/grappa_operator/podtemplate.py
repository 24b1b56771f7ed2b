"""A user's pod template (spec.<role>.template) merged under the fields the operator owns.

The template is PodTemplate-shaped (`metadata.labels/annotations`, `spec`: core/v1 PodSpec
fields). The operator's pod is laid over it:
- fields only the user sets are taken as written (affinity, topologySpreadConstraints,
  imagePullSecrets, runtimeClassName, initContainers, sidecar containers, dnsConfig, ...);
- lists the operator also fills are joined: volumes, tolerations, nodeSelector keys, and in the
  `grappa` container volumeMounts and envFrom;
- defaults the user may change win: terminationGracePeriodSeconds, enableServiceLinks and the pod
  securityContext's user, group, fsGroup and seccompProfile;
- what the operator owns is refused, naming the field and where to set it instead.
"""
from __future__ import annotations

import copy
from typing import Any

from . import settings as s
from .errors import SpecError

# PodSpec fields the template may not set: field -> why / where instead ("{role}" is filled in).
OWNED_SPEC = {
    "restartPolicy": "the operator restarts the whole group itself (it is always Never)",
    "serviceAccountName": "set spec.{role}.serviceAccountName",
    "serviceAccount": "set spec.{role}.serviceAccountName",
    "automountServiceAccountToken": "only the aggregator gets a token (it patches the job's status)",
    "schedulerName": "set spec.schedulingPolicy.schedulerName",
    "priorityClassName": "set spec.{role}.priorityClassName",
    "priority": "set spec.{role}.priorityClassName",
    "hostNetwork": "every rank needs its own pod IP and ports",
    "nodeName": "use nodeSelector or affinity",
}
# Keys of the `grappa` container a template may set; everything else has a spec field.
CONTAINER_KEYS = {"name", "volumeMounts", "envFrom"}
CONTAINER_HINTS = {"image": "spec.{role}.image", "imagePullPolicy": "spec.{role}.imagePullPolicy",
                   "resources": "spec.{role}.resources", "env": "spec.{role}.env"}
# Pod securityContext keys that are operator defaults a user may replace (e.g. to match a volume's
# owner); anything else there is added, except runAsNonRoot, which stays true.
USER_SECURITY = {"runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}
USER_DEFAULTS = {"terminationGracePeriodSeconds", "enableServiceLinks"}


def apply(pod: dict[str, Any], template: dict[str, Any], where: str, role: str) -> dict[str, Any]:
    """The operator's `pod` laid over `template` (where = 'spec.worker.template'); SpecError on a
    field the operator owns."""
    if not template:
        return pod
    out = copy.deepcopy(pod)
    meta = template.get("metadata") or {}
    for kind in ("labels", "annotations"):
        extra = meta.get(kind) or {}
        mine = out["metadata"].setdefault(kind, {}) if extra else {}
        for key, value in extra.items():
            if key in mine or key.startswith(f"{s.GROUP}/"):
                raise SpecError("InvalidSpec", f"{where}.metadata.{kind}[{key}]: set by the operator "
                                "(it finds and names the job's pods by it): use another key")
            mine[key] = value
    out["spec"] = _spec(out["spec"], template.get("spec") or {}, f"{where}.spec", role)
    return out


def _spec(ours: dict[str, Any], theirs: dict[str, Any], where: str, role: str) -> dict[str, Any]:
    for key, why in OWNED_SPEC.items():
        if key in theirs:
            raise SpecError("InvalidSpec", f"{where}.{key}: owned by the operator: {why.format(role=role)}")
    merged = {k: copy.deepcopy(v) for k, v in theirs.items() if k not in ours or k in USER_DEFAULTS}
    for key, value in ours.items():
        if key in USER_DEFAULTS and key in theirs:
            continue
        if key in ("securityContext", "nodeSelector"):
            join = _security if key == "securityContext" else _selector
            merged[key] = join(value, _typed(theirs, key, dict, where), f"{where}.{key}")
        elif key in ("volumes", "tolerations"):
            merged[key] = _joined(value, _typed(theirs, key, list, where), f"{where}.{key}", key == "volumes")
        elif key == "containers":
            merged[key] = _containers(value, _typed(theirs, key, list, where), f"{where}.{key}", role)
        else:
            merged[key] = value
    return merged


def _typed(theirs: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = theirs.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise SpecError("InvalidSpec", f"{where}.{key}: must be a {'mapping' if kind is dict else 'list'}")
    return value


def _security(ours: dict[str, Any], theirs: dict[str, Any], where: str) -> dict[str, Any]:
    if theirs.get("runAsNonRoot") is False or theirs.get("runAsUser") == 0:
        raise SpecError("InvalidSpec", f"{where}: the trainer pods never run as root "
                        "(runAsNonRoot stays true)")
    return {**ours, **{k: v for k, v in theirs.items() if k not in ours or k in USER_SECURITY}}


def _selector(ours: dict[str, str], theirs: dict[str, str], where: str) -> dict[str, str]:
    for key, value in theirs.items():
        if key in ours and ours[key] != value:
            raise SpecError("InvalidSpec", f"{where}[{key}]: {value!r} conflicts with {ours[key]!r} "
                            "from spec.<role>.nodeSelector or the Kueue flavor: set it in one place")
    return {**theirs, **ours}


def _joined(ours: list[Any], theirs: list[Any], where: str, named: bool) -> list[Any]:
    if named:
        taken = {v.get("name") for v in ours}
        for i, v in enumerate(theirs):
            if isinstance(v, dict) and v.get("name") in taken:
                raise SpecError("InvalidSpec", f"{where}[{i}].name: {v.get('name')!r} is the operator's "
                                "volume: use another name")
    return list(ours) + [copy.deepcopy(v) for v in theirs if v not in ours]


def _containers(ours: list[dict[str, Any]], theirs: list[Any], where: str, role: str) -> list[dict[str, Any]]:
    out = [copy.deepcopy(c) for c in ours]
    main = out[0]
    for i, c in enumerate(theirs):
        if not isinstance(c, dict) or not c.get("name"):
            raise SpecError("InvalidSpec", f"{where}[{i}].name: every container needs a name")
        if c["name"] != s.CONTAINER_NAME:
            out.append(copy.deepcopy(c))  # a sidecar, as written
            continue
        for key in c:
            if key not in CONTAINER_KEYS:
                hint = CONTAINER_HINTS.get(key, "").format(role=role)
                raise SpecError("InvalidSpec", f"{where}[{i}].{key}: owned by the operator in the "
                                f"{s.CONTAINER_NAME!r} container" + (f": set {hint}" if hint else ""))
        paths = {m.get("mountPath") for m in main.get("volumeMounts") or []}
        for key in ("volumeMounts", "envFrom"):
            _typed(c, key, list, f"{where}[{i}]")
        for j, m in enumerate(c.get("volumeMounts") or []):
            if isinstance(m, dict) and m.get("mountPath") in paths:
                raise SpecError("InvalidSpec", f"{where}[{i}].volumeMounts[{j}].mountPath: "
                                f"{m.get('mountPath')} is mounted by the operator: use another path")
        main["volumeMounts"] = list(main.get("volumeMounts") or []) + list(c.get("volumeMounts") or [])
        if c.get("envFrom"):
            main["envFrom"] = list(main.get("envFrom") or []) + list(c["envFrom"])
    return out
