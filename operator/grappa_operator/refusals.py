"""What the API server's refusal of a child create means: fail the job, wait, or retry.

Pure functions of (the object, HTTP status, the Status body), so every rule is unit-tested without
a cluster. A permanent refusal fails the job at once (retrying the same object can only get the
same answer); a quota refusal that can fit later waits, bounded by preRunningDeadlineSeconds
(docs/operator.md, "Refused children"); anything else (429, 5xx, timeouts) is retried as it is.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from . import quantities
from . import settings as s
from .kueue import EXTERNAL_FRAMEWORK, QUEUE_LABEL


@dataclass(frozen=True)
class Refusal:
    reason: str  # CamelCase condition reason
    message: str  # names the object, the field when the API says it, and the fix
    permanent: bool


def classify(obj: dict[str, Any], status: int, body: Any) -> Optional[Refusal]:
    """The meaning of a refused create; None for a transient error to retry unchanged."""
    message, causes = _status_text(body)
    what = f"{obj.get('kind', 'object')} {(obj.get('metadata') or {}).get('name', '?')}"
    settings_field = _settings_field(obj)
    if obj.get("kind") == "PodGroup" and status == 404:
        return Refusal("GangSchedulerMissing", f"spec.schedulingPolicy.provider: the PodGroup API "
                       f"{obj.get('apiVersion')} is not installed in this cluster: install that "
                       "scheduler or set spec.schedulingPolicy.gang: false", True)
    if obj.get("kind") == "Workload" and status == 404:
        return Refusal("KueueMissing", f"metadata.labels[{QUEUE_LABEL}]: the Kueue Workload API "
                       f"{obj.get('apiVersion')} is not installed in this cluster: install Kueue "
                       f"(listing {EXTERNAL_FRAMEWORK} under integrations.externalFrameworks) or "
                       "remove the label", True)
    if status in (400, 422):
        fields = "; ".join(f"{c['field']}: {c['message']}" if c["field"] else c["message"]
                           for c in causes) or message
        return Refusal("InvalidChild", f"{what} was refused by the API server ({status}): {fields}"
                       f"{_field_fix(obj, causes, settings_field)}", True)
    if status != 403:
        return None
    if "exceeded quota" in message:
        over = quota_never_fits(message)
        if over:
            return Refusal("QuotaExceeded", f"{what} asks for more than the namespace's quota allows "
                           f"at all ({over}): lower spec.{settings_field}.resources or raise the "
                           f"ResourceQuota: {message}", True)
        return Refusal("QuotaExceeded", f"{what} does not fit in the namespace's quota now: "
                       f"{message}", False)
    return Refusal("CreateRefused", f"{what} was refused (403): {message}"
                   f"{_forbidden_fix(obj, message, settings_field)}", True)


# ---- the API's Status body ----------------------------------------------------------------

def _status_text(body: Any) -> tuple[str, list[dict[str, str]]]:
    """(message, [{field, message}]) of a metav1.Status body; tolerant of anything else."""
    try:
        status = json.loads(body) if isinstance(body, (str, bytes)) else body
    except ValueError:
        return str(body)[:500], []
    if not isinstance(status, dict):
        return ("" if body is None else str(body)[:500]), []
    details = status.get("details")
    raw = details.get("causes") if isinstance(details, dict) else None
    causes = []
    for c in raw if isinstance(raw, list) else []:
        if isinstance(c, dict):
            causes.append({"field": str(c.get("field") or ""), "message": str(c.get("message") or "")})
    return str(status.get("message") or status.get("reason") or ""), causes


# ---- fixes ----------------------------------------------------------------------------------

# Pod fields the spec sets through spec.<aggregator|worker>.<field>.
_POD_FIELD_TO_SETTING = {
    "tolerations": "tolerations", "nodeSelector": "nodeSelector", "priorityClassName": "priorityClassName",
    "serviceAccountName": "serviceAccountName", "resources": "resources", "env": "env",
    "image": "image", "imagePullPolicy": "imagePullPolicy",
}


def _settings_field(obj: dict[str, Any]) -> str:
    """Which spec section holds this pod's settings (the prepare pod uses the aggregator's)."""
    role = ((obj.get("metadata") or {}).get("labels") or {}).get(s.LABEL_ROLE)
    return "worker" if role == s.ROLE_WORKER else "aggregator"


def _field_fix(obj: dict[str, Any], causes: list[dict[str, str]], section: str) -> str:
    if obj.get("kind") != "Pod":
        return ""
    for c in causes:
        for part in re.split(r"[.\[\]]", c["field"]):
            if part in _POD_FIELD_TO_SETTING:
                return f"; fix spec.{section}.{_POD_FIELD_TO_SETTING[part]}"
    return ""


def _forbidden_fix(obj: dict[str, Any], message: str, section: str) -> str:
    low = message.lower()
    if "podsecurity" in low:
        if "hostpath" in low:
            return ("; hostPath volumes need the namespace's 'privileged' PodSecurity level: "
                    "use spec.storage.claimName")
        return ("; the trainer pods meet the 'restricted' level, so a setting in "
                f"spec.{section} (or the namespace's pod-security labels) is the cause")
    if "serviceaccount" in low and "not found" in low:
        return f"; create that ServiceAccount or fix spec.{section}.serviceAccountName"
    if "priorityclass" in low:
        where = ("spec.schedulingPolicy.priorityClassName" if obj.get("kind") == "PodGroup"
                 else f"spec.{section}.priorityClassName")
        return f"; create that PriorityClass or fix {where}"
    if "cannot create resource" in low:
        if obj.get("kind") == "PodGroup":
            return ("; the operator may not create PodGroups: install the chart with "
                    "gangScheduling.volcano (or gangScheduling.schedulerPlugins) set to true")
        if obj.get("kind") == "Workload":
            return ("; the operator may not create Kueue Workloads: upgrade the chart (its "
                    "ClusterRole grants kueue.x-k8s.io workloads) or remove the queue label")
        return "; the operator's Role or ClusterRole lacks this permission (docs/operator.md, Least privilege)"
    return ""


# ---- quota --------------------------------------------------------------------------------

def quantity(text: str) -> Optional[float]:
    """A Kubernetes quantity ('500m', '2Gi', '4') as a number; None when it is not one."""
    amount = quantities.parse(text.strip())
    return None if amount is None else float(amount)


def _amounts(text: str) -> dict[str, tuple[str, float]]:
    out = {}
    for pair in text.split(","):
        name, _, value = pair.strip().partition("=")
        amount = quantity(value)
        if name and amount is not None:
            out[name] = (value, amount)
    return out


def quota_never_fits(message: str) -> str:
    """'requests.cpu: requested 8 > limited 4' when a request alone exceeds the quota's hard limit.

    The quota admission message reads 'exceeded quota: q, requested: requests.cpu=8, used:
    requests.cpu=0, limited: requests.cpu=4'; what is used frees up, a request above the limit
    never fits. '' when every request could fit once the namespace's other pods are gone.
    """
    m = re.search(r"requested: (\S+), used: (\S*), limited: (\S+)", message)
    if not m:
        return ""
    requested, limited = _amounts(m.group(1)), _amounts(m.group(3))
    for name, (text, amount) in requested.items():
        if name in limited and amount > limited[name][1]:
            return f"{name}: requested {text} > limited {limited[name][0]}"
    return ""
