"""kopf handlers: thin glue between watch events and the pure state machine in status.py.

Every trigger (job event, child pod event, periodic resync) runs the same `reconcile`, serialised
per job. Order inside a reconcile is what makes it restart-safe: read fresh -> compute plan ->
write status (durable) -> act on children -> events/metrics.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import kopf

from . import desired, kueue, metrics
from . import settings as s
from .api import GrappaJobSpec, parse_spec
from .errors import CreateBlocked, SpecError
from .kubeapi import Kube, load_credentials
from .status import Plan, PodObs, refused, step, unblocked
from .timeutil import iso, now, parse

log = logging.getLogger("grappa_operator")

# status keys the operator writes; progress and result belong to the aggregator (never overwritten)
OWNED_STATUS_KEYS = ("phase", "reason", "message", "conditions", "observedGeneration", "restarts",
                     "prepared", "replicas", "startTime", "runningTime", "completionTime", "rounds",
                     "blockedSince", "disruptions", "activeSince", "queue", "runDir", "artifacts",
                     "disruptionHistory", "queueEvictions")

POD_SELECTOR = f"{s.LABEL_MANAGED_BY}={s.MANAGED_BY},{s.LABEL_JOB}"
_locks: dict[tuple[str, str], asyncio.Lock] = {}
_kube: Optional[Kube] = None
_config = s.OperatorSettings()


def configure(cfg: s.OperatorSettings) -> None:
    global _config
    _config = cfg


def kube() -> Kube:
    global _kube
    if _kube is None:
        load_credentials()
        _kube = Kube()
    return _kube


def owned_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Merge patch of the operator-owned status keys that changed (None removes a key)."""
    return {k: new.get(k) for k in OWNED_STATUS_KEYS if new.get(k) != old.get(k)}


async def reconcile(namespace: str, name: str, handler: str) -> None:
    lock = _locks.setdefault((namespace, name), asyncio.Lock())
    async with lock:
        with metrics.RECONCILE_SECONDS.labels(handler).time():
            try:
                await _reconcile(namespace, name)
            except Exception:
                metrics.RECONCILE_ERRORS.labels(handler).inc()
                log.exception("reconcile of %s/%s failed; retrying at the next resync", namespace, name)


async def _reconcile(namespace: str, name: str) -> None:
    k = kube()
    body = await asyncio.to_thread(k.get_job, namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        forget(namespace, name)
        return
    job = desired.JobRef.from_body(body)
    spec: GrappaJobSpec | SpecError
    try:
        spec = parse_spec(body.get("spec"))
    except SpecError as err:
        spec = err
    raw_pods = await asyncio.to_thread(k.list_pods, job)
    pods = [PodObs.from_pod(p) for p in raw_pods]
    wl_body, wl = await _read_workload(k, job) if job.queue else (None, None)
    t = now()
    old = body.get("status") or {}
    plan = step(job, spec, old, pods, t, body["metadata"].get("generation"), wl)
    await _write(k, namespace, name, old, plan)

    transient: Optional[Exception] = None
    if isinstance(spec, GrappaJobSpec):
        try:
            await _create_children(k, body, job, spec, plan, {p.name for p in pods}, wl)
        except (SpecError, CreateBlocked) as err:  # the API server refused what this spec produces
            after = refused(job, spec, plan.status, pods, t, err)
            await _write(k, namespace, name, plan.status, after)
            _merge(plan, after)
        except Exception as err:  # 429, 5xx, timeouts: announce what happened, then retry
            transient = err
        else:
            if plan.status.get("blockedSince"):
                after = Plan(unblocked(plan.status))
                await _write(k, namespace, name, plan.status, after)
                plan.status = after.status
    for pod_name in plan.delete_pods:
        await asyncio.to_thread(k.delete_pod, namespace, pod_name)
    if wl_body is not None:
        await _sync_workload(k, job, wl_body, plan, t)
    await _announce(k, body, plan, t)
    metrics.CACHE.update(namespace, name, {**plan.status, "progress": old.get("progress")})
    if plan.delete_job:
        log.info("deleting %s/%s: ttlSecondsAfterFinished elapsed", namespace, name)
        await asyncio.to_thread(k.delete_job, namespace, name)
        forget(namespace, name)
    if transient is not None:
        raise transient  # counted as a reconcile error; the next resync retries the create


def _merge(plan: Plan, after: Plan) -> None:
    """Fold the plan of a refusal into the step's plan: both plans' events are posted."""
    plan.events += after.events
    plan.delete_pods += [p for p in after.delete_pods if p not in plan.delete_pods]
    plan.entered = after.entered or plan.entered
    plan.status = after.status


async def _write(k: Kube, namespace: str, name: str, old: dict[str, Any], plan: Plan) -> None:
    patch = owned_patch(old, plan.status)
    if patch:
        await asyncio.to_thread(k.patch_status, namespace, name, patch)


async def _create_children(k: Kube, body: dict[str, Any], job: desired.JobRef, spec: GrappaJobSpec,
                           plan: Plan, existing: set[str], wl: Optional[kueue.WorkloadObs]) -> None:
    attempt = int(plan.status.get("restarts") or 0)
    place = wl.placement if wl is not None else None
    objs: list[dict[str, Any]] = []
    if plan.create_workload:
        priority = await asyncio.to_thread(_priority, k, body, spec)
        objs.append(desired.workload(job, spec, priority))
    if plan.create_supporting:
        objs += desired.supporting_objects(job, spec)
    if plan.create_prepare:
        objs.append(desired.prepare_pod(job, spec, attempt, place))
    if plan.create_group:
        objs += [p for p in desired.group_pods(job, spec, attempt, place)
                 if p["metadata"]["name"] not in existing]
    for obj in objs:
        if await asyncio.to_thread(k.create, obj):
            log.info("created %s %s/%s", obj["kind"], job.namespace, obj["metadata"]["name"])


async def _read_workload(k: Kube, job: desired.JobRef) -> tuple[Optional[dict[str, Any]], kueue.WorkloadObs]:
    """The job's Workload and the ResourceFlavors of its admission."""
    name = kueue.workload_name(job.name)
    body = await asyncio.to_thread(k.get_workload, job.namespace, name)
    flavors: dict[str, dict[str, Any]] = {}
    for flavor in kueue.assigned_flavors(((body or {}).get("status") or {}).get("admission")):
        flavors[flavor] = await asyncio.to_thread(
            k.get_cluster_object, kueue.GROUP, kueue.VERSION, kueue.FLAVORS, flavor) or {}
    return body, kueue.WorkloadObs.from_workload(name, job.queue or "", body, flavors)


def _priority(k: Kube, body: dict[str, Any], spec: GrappaJobSpec) -> Optional[kueue.Priority]:
    """The Workload's priority, resolved as Kueue's own integrations do (the class's value)."""
    pod_class_field = ("spec.aggregator.priorityClassName" if spec.aggregator.priority_class_name
                       else "spec.worker.priorityClassName")
    source = kueue.priority_source((body.get("metadata") or {}).get("labels") or {},
                                   spec.aggregator.priority_class_name or spec.worker.priority_class_name)
    if source is None:
        return None
    group, kind, name = source
    version, plural = ((kueue.VERSION, "workloadpriorityclasses") if group == kueue.GROUP
                       else ("v1", "priorityclasses"))
    cls = k.get_cluster_object(group, version, plural, name)
    if cls is None:
        where = f"metadata.labels[{kueue.PRIORITY_LABEL}]" if group == kueue.GROUP else pod_class_field
        raise SpecError("PriorityClassMissing", f"{where}: {kind} {name!r} does not exist: create it "
                        "or fix the name")
    return kueue.Priority(group, kind, name, int(cls.get("value") or 0))


async def _sync_workload(k: Kube, job: desired.JobRef, wl_body: dict[str, Any], plan: Plan, t) -> None:
    """Apply what the step decided for the Workload; a failure is retried at the next resync."""
    name = kueue.workload_name(job.name)
    if plan.finish_workload is not None:
        patch = kueue.finished_status(wl_body, plan.finish_workload, plan.status.get("message") or "", t)
        await asyncio.to_thread(k.patch_workload, job.namespace, name, {"status": patch}, True)
    if plan.release_workload:
        await asyncio.to_thread(k.patch_workload, job.namespace, name,
                                {"status": kueue.released_status(wl_body, t)}, True)
    if plan.workload_active is not None:
        await asyncio.to_thread(k.patch_workload, job.namespace, name,
                                kueue.activation_patch(plan.workload_active))


async def _announce(k: Kube, body: dict[str, Any], plan: Plan, t) -> None:
    for ev in plan.events:
        try:
            await asyncio.to_thread(k.post_event, body, ev.type, ev.reason, ev.message, iso(t))
        except Exception as err:  # an event is best effort; status already holds the reason
            log.warning("could not post event %s: %s", ev.reason, err)
        log.info("%s/%s %s: %s", body["metadata"]["namespace"], body["metadata"]["name"], ev.reason, ev.message)
        if ev.reason == "Created":
            metrics.JOBS_CREATED.inc()
        elif ev.reason == "RoundDecided":
            metrics.ROUNDS.labels(plan.round_reason or "every").inc()
    for source, reason in plan.disrupted:
        metrics.DISRUPTIONS.labels(source, reason).inc()
    st = plan.status
    if plan.entered == "Succeeded":
        metrics.JOBS_SUCCEEDED.inc()
    elif plan.entered == "Failed":
        metrics.JOBS_FAILED.labels(st.get("reason") or "Unknown").inc()
    elif plan.entered == "Restarting":
        metrics.JOB_RESTARTS.labels(st.get("reason") or "Unknown").inc()
    elif plan.entered == "Running" and st.get("runningTime") == iso(t) and int(st.get("restarts") or 0) == 0:
        created = parse(body["metadata"].get("creationTimestamp"))
        if created is not None:
            metrics.TIME_TO_RUNNING.observe(max(0.0, (t - created).total_seconds()))


def forget(namespace: str, name: str) -> None:
    metrics.CACHE.forget(namespace, name)
    _locks.pop((namespace, name), None)


# ---- kopf wiring --------------------------------------------------------------------------

@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf keeps its own bookkeeping in annotations, never in our structural status.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=s.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=s.GROUP, key="last-handled-configuration")
    settings.posting.enabled = False  # we post our own, meaningful Events
    settings.peering.standalone = True  # one replica (Recreate); no peering objects needed
    settings.watching.server_timeout = 300
    # The API server filters the pod watch: only the operator's children cross the wire, not
    # every pod of the cluster (the handler's own label filter alone is client-side).
    settings.watching.label_selectors["v1", "pods"] = POD_SELECTOR
    await asyncio.to_thread(kube)
    asyncio.get_running_loop().create_task(_resync_forever())


async def _resync_forever() -> None:
    """Time-based transitions (deadlines, pending timeouts, TTL) and retries after errors."""
    while True:
        await asyncio.sleep(_config.resync_seconds)
        await resync_all()


async def resync_all() -> None:
    """Reconcile every known job concurrently: one slow job (a hung call waits out its timeout)
    never delays the deadlines and TTLs of the others. A job whose previous reconcile is still
    running is skipped this round rather than queued behind it."""
    due = [(ns, name) for ns, name in metrics.CACHE.keys()
           if not _locks.get((ns, name), asyncio.Lock()).locked()]
    await asyncio.gather(*(reconcile(ns, name, "resync") for ns, name in due))


@kopf.on.event(s.GROUP, s.VERSION, s.PLURAL)
async def _on_job(event: dict[str, Any], body: Any, namespace: str, name: str, **_: Any) -> None:
    if event.get("type") == "DELETED":
        forget(namespace, name)
        return
    if (namespace, name) not in metrics.CACHE.keys():
        metrics.CACHE.update(namespace, name, dict(body.get("status") or {}))
    await reconcile(namespace, name, "job")


@kopf.on.event("", "v1", "pods", labels={s.LABEL_JOB: kopf.PRESENT, s.LABEL_MANAGED_BY: s.MANAGED_BY})
async def _on_pod(body: Any, namespace: str, labels: Any, **_: Any) -> None:
    job = labels.get(s.LABEL_JOB)
    if job:
        await reconcile(namespace, job, "pod")
