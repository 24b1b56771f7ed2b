"""Queueing through Kueue: the Workload the operator files for a job, and what Kueue's answer means.

A GrappaJob labelled `kueue.x-k8s.io/queue-name` is integrated the way Kueue documents for a
controller it does not ship (an "external framework", listed in Kueue's configuration as
`GrappaJob.v1alpha1.grappa.dev`): the operator itself files one Workload owned by the job, with
two pod sets (the aggregator, P workers) so Kueue admits all P + 1 pods as one unit; no pod exists
until Kueue admits it. Admission applies the ResourceFlavors' node labels and tolerations to the
pods. An eviction (preemption, a stopped queue, deactivation) deletes the pods; once they are gone
the operator clears the admission so Kueue can queue the workload again, and the job resumes from
its latest checkpoint when re-admitted. A finished job marks its Workload Finished, which returns
the quota. docs/operator.md ("Queueing with Kueue") explains the choice.

Pure: handlers.py reads the Workload and flavors and applies the patches built here.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from . import settings as s
from .timeutil import iso

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # names a WorkloadPriorityClass
# On a Workload the operator deactivated for spec.runPolicy.suspend: only such a Workload is
# reactivated on resume (one Kueue deactivated itself, e.g. after too many requeues, stays so).
SUSPENDED_LABEL = f"{s.GROUP}/suspended"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOADS = "workloads"
FLAVORS = "resourceflavors"
EXTERNAL_FRAMEWORK = f"{s.KIND}.{s.VERSION}.{s.GROUP}"  # the entry Kueue's configuration needs
# Pod set names (DNS labels) -> the operator's roles; the prepare pod runs inside the aggregator's
# admitted share, before the group starts.
POD_SETS = {"aggregator": s.ROLE_AGGREGATOR, "workers": s.ROLE_WORKER}


def workload_name(job_name: str) -> str:
    return f"grappajob-{job_name}"


@dataclass(frozen=True)
class Priority:
    """The priority class a Workload refers to, and its value (Kueue orders and preempts by it)."""

    group: str  # scheduling.k8s.io (a pod PriorityClass) or kueue.x-k8s.io
    kind: str  # PriorityClass | WorkloadPriorityClass
    name: str
    value: int


def priority_source(job_labels: dict[str, str], pod_priority_class: Optional[str]) -> Optional[tuple[str, str, str]]:
    """(group, kind, name) of the class to resolve: Kueue's label first, then the pods' class."""
    if job_labels.get(PRIORITY_LABEL):
        return GROUP, "WorkloadPriorityClass", job_labels[PRIORITY_LABEL]
    if pod_priority_class:
        return "scheduling.k8s.io", "PriorityClass", pod_priority_class
    return None


@dataclass(frozen=True)
class Placement:
    """Node placement a flavor assignment adds to one role's pods."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class WorkloadObs:
    """What the state machine needs to know about the job's Workload."""

    name: str
    queue: str
    exists: bool = False
    admitted: bool = False
    quota_reserved: bool = False
    cluster_queue: str = ""
    evicted_reason: str = ""  # set while Kueue's Evicted condition is True
    evicted_message: str = ""
    pending_message: str = ""  # why it is not admitted yet (QuotaReserved=False)
    finished: bool = False
    active: bool = True
    suspended_by_job: bool = False  # deactivated by the operator for the job's suspend
    placement: dict[str, Placement] = field(default_factory=dict)  # role -> placement

    @classmethod
    def from_workload(cls, name: str, queue: str, wl: Optional[dict[str, Any]],
                      flavors: Optional[dict[str, dict[str, Any]]] = None) -> "WorkloadObs":
        if wl is None:
            return cls(name, queue)
        st = wl.get("status") or {}
        conds = {c.get("type"): c for c in st.get("conditions") or [] if isinstance(c, dict)}

        def true(t: str) -> bool:
            return (conds.get(t) or {}).get("status") == "True"

        admission = st.get("admission") or None
        evicted = conds.get("Evicted") if true("Evicted") else None
        pending = conds.get("QuotaReserved") or {}
        return cls(
            name, (wl.get("spec") or {}).get("queueName") or queue, exists=True,
            admitted=true("Admitted") and admission is not None,
            quota_reserved=true("QuotaReserved") or admission is not None,
            cluster_queue=str((admission or {}).get("clusterQueue") or ""),
            evicted_reason=str(evicted.get("reason") or "Evicted") if evicted else "",
            evicted_message=str(evicted.get("message") or "") if evicted else "",
            pending_message=str(pending.get("message") or "") if pending.get("status") != "True" else "",
            finished=true("Finished"),
            active=(wl.get("spec") or {}).get("active", True) is not False,
            suspended_by_job=((wl.get("metadata") or {}).get("labels") or {}).get(SUSPENDED_LABEL) == "true",
            placement=placement(admission, flavors or {}),
        )


def placement(admission: Optional[dict[str, Any]], flavors: dict[str, dict[str, Any]]) -> dict[str, Placement]:
    """role -> node labels and tolerations of the flavors Kueue assigned to its pod set."""
    out: dict[str, Placement] = {}
    for psa in (admission or {}).get("podSetAssignments") or []:
        role = POD_SETS.get(psa.get("name"))
        if role is None:
            continue
        selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for flavor_name in sorted(set((psa.get("flavors") or {}).values())):
            spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            selector.update(spec.get("nodeLabels") or {})
            tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
        out[role] = Placement(selector, tuple(tolerations))
    return out


def assigned_flavors(admission: Optional[dict[str, Any]]) -> list[str]:
    names = {f for psa in (admission or {}).get("podSetAssignments") or []
             for f in (psa.get("flavors") or {}).values()}
    return sorted(names)


def template_spec(pod: dict[str, Any]) -> dict[str, Any]:
    """What Kueue needs of a pod to count and place it. Kueue sums a pod's requests as the
    scheduler does (containers, plus native sidecars, or the largest init container if more, plus
    the pod overhead), so every part of that formula is carried; a limit without a request is the
    request, as the API server defaults it on the pod. The overhead is the RuntimeClass's (a
    template may not set one: api.OVERHEAD_REFUSED), which Kueue adds from runtimeClassName."""
    ps = pod["spec"]
    keep = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName", "resources")
    out = {k: copy.deepcopy(ps[k]) for k in keep if k in ps}
    out["restartPolicy"] = ps.get("restartPolicy", "Never")
    if ps.get("initContainers"):
        out["initContainers"] = [_counted(c) for c in ps["initContainers"]]
    out["containers"] = [_counted(c) for c in ps["containers"]]
    return out


def _counted(container: dict[str, Any]) -> dict[str, Any]:
    res = copy.deepcopy(container.get("resources") or {})
    limits = res.get("limits") or {}
    if limits:
        res["requests"] = {**limits, **(res.get("requests") or {})}
    out = {"name": container["name"], "image": container.get("image", ""), "resources": res}
    if container.get("restartPolicy"):
        out["restartPolicy"] = container["restartPolicy"]  # Always: a native sidecar, runs throughout
    return out


def _condition(type_: str, status: str, reason: str, message: str, now: datetime,
               generation: Optional[int]) -> dict[str, Any]:
    cond = {"type": type_, "status": status, "reason": reason, "message": message[:32000],
            "lastTransitionTime": iso(now)}
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def _with(conds: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    out = [c for c in conds if c.get("type") != new["type"]]
    for c in conds:
        if c.get("type") == new["type"] and c.get("status") == new["status"]:
            new = {**new, "lastTransitionTime": c.get("lastTransitionTime", new["lastTransitionTime"])}
    return out + [new]


def activation_patch(active: bool) -> dict[str, Any]:
    """Deactivate a Workload for the job's suspend (Kueue evicts it and returns its quota), or
    reactivate one the operator deactivated."""
    return {"metadata": {"labels": {SUSPENDED_LABEL: None if active else "true"}}, "spec": {"active": active}}


def is_deactivation(reason: str) -> bool:
    return reason.startswith("Deactivated")  # Kueue: "Deactivated" or "DeactivatedDueTo<cause>"


def finished_status(wl: dict[str, Any], succeeded: bool, message: str, now: datetime) -> dict[str, Any]:
    """Status patch marking the Workload Finished: Kueue then returns its quota."""
    gen = (wl.get("metadata") or {}).get("generation")
    conds = (wl.get("status") or {}).get("conditions") or []
    reason = "Succeeded" if succeeded else "Failed"
    return {"conditions": _with(conds, _condition("Finished", "True", reason, message, now, gen))}


def released_status(wl: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Status patch clearing the admission of an evicted Workload whose pods are gone, as Kueue's
    own job controllers do: QuotaReserved and Admitted turn False and Kueue queues it again
    (Requeued, unless the eviction deactivated it)."""
    st = wl.get("status") or {}
    gen = (wl.get("metadata") or {}).get("generation")
    conds = st.get("conditions") or []
    ev = next((c for c in conds if c.get("type") == "Evicted" and c.get("status") == "True"), {})
    message = str(ev.get("message") or "evicted")
    requeue = ev.get("reason") in ("Preempted", "NodeFailures")
    for cond in (_condition("QuotaReserved", "False", "Pending", message, now, gen),
                 _condition("Admitted", "False", "NoReservation", "The workload has no reservation",
                            now, gen),
                 _condition("Requeued", "True" if requeue else "False", str(ev.get("reason") or "Evicted"),
                            message, now, gen)):
        conds = _with(conds, cond)
    return {"conditions": conds, "admission": None}
