"""The job state machine: (spec, status, observed pods, now) -> new status, events and actions.

Pure and level-based: the same inputs always give the same plan, so a restarted operator simply
re-derives what to do from what it sees. handlers.py writes `plan.status` first (durably), then
creates/deletes children, then emits events and metrics.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Optional, Union

from . import gpu, imagepull
from . import rounds as rounds_mod
from . import settings as s
from .api import MAX_DISRUPTIONS, GrappaJobSpec
from .desired import JobRef, artifacts, check_runnable, pod_name, run_dir
from .errors import CreateBlocked, SpecError
from .kueue import WorkloadObs, is_deactivation
from .timeutil import iso, parse

TERMINAL = ("Succeeded", "Failed")
STATE_CONDITIONS = ("Queued", "Running", "Restarting", "Succeeded", "Failed", "Suspended")
# Why Kubernetes stopped a pod that did nothing wrong (DisruptionTarget condition reasons; a
# node-pressure eviction also sets status.reason "Evicted"): such a restart is not a failure.
DISRUPTIONS = ("PreemptionByScheduler", "PreemptionByKubeScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager",
               "TerminationByKubelet", "DeletionByPodGC", "Evicted")


ERROR_PREFIX = "grappa: error:"  # the trainer's one-line reason for exit codes 2 and 3


def error_line(message: str) -> str:
    """The trainer's `grappa: error:` text when the termination message holds it (the trainer
    writes exactly that; a log tail kept by FallbackToLogsOnError may have progress bars before
    it, even on the same line): from its last such start to the end. Else the message as it is."""
    lines = message.splitlines()
    starts = [i for i, ln in enumerate(lines) if ERROR_PREFIX in ln]
    if not starts:
        return message
    first = lines[starts[-1]]  # an unfinished progress bar may share the error's line
    return "\n".join([first[first.rindex(ERROR_PREFIX):], *lines[starts[-1] + 1:]]).strip()


@dataclass(frozen=True)
class PodObs:
    """What the state machine needs to know about one child pod."""

    name: str
    role: str
    rank: Optional[int] = None
    attempt: Optional[int] = None
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    created_at: Optional[datetime] = None
    deleting: bool = False
    exit_code: Optional[int] = None
    message: str = ""  # termination message (or reason) of a finished container
    pending_reason: str = ""  # why a Pending pod is not running yet
    disruption: str = ""  # set when Kubernetes evicted or preempted the pod (not its fault)
    # The grappa container has terminated but other containers (a plain sidecar) keep the pod
    # Running: `phase` is then the grappa container's outcome, and the pod is deleted when done.
    lingering: bool = False
    pull_error: Optional[imagepull.PullError] = None  # its image cannot be pulled

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> "PodObs":
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        lbls = meta.get("labels") or {}

        def _int(v: Any) -> Optional[int]:
            try:
                return int(v)
            except (TypeError, ValueError):
                return None

        # A pod is judged by its grappa container, as a Job judges its main container: a sidecar
        # the user added never decides (or hangs) the outcome.
        exit_code, message, waiting, phase, done = None, "", "", status.get("phase") or "Pending", False
        others_run = False  # another container (a plain sidecar) still runs or waits to
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if state.get("waiting"):
                w = state["waiting"]
                waiting = f"container {cs.get('name')}: {w.get('reason', '')} {w.get('message', '')}".strip()
            if cs.get("name") != s.CONTAINER_NAME:
                others_run = others_run or not state.get("terminated")
                continue
            term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term:
                exit_code = _int(term.get("exitCode"))
                message = error_line((term.get("message") or term.get("reason") or "").strip())
            if state.get("terminated"):
                done, phase = True, "Succeeded" if exit_code == 0 else "Failed"
        # The kubelet reports the pod's terminal phase a moment after its containers stopped: only
        # a container still running makes the pod linger (and be deleted when done).
        lingering = done and others_run and status.get("phase") in ("Pending", "Running")
        pending = waiting
        if not pending:
            for cond in status.get("conditions") or []:
                if cond.get("status") == "False" and cond.get("type") == "PodScheduled":
                    pending = f"unschedulable: {cond.get('reason', '')} {cond.get('message', '')}".strip()
        if not pending and status.get("reason"):
            pending = f"{status.get('reason')}: {status.get('message', '')}"
        disruption = "Evicted" if status.get("reason") == "Evicted" else ""
        for cond in status.get("conditions") or []:
            if (cond.get("type") == "DisruptionTarget" and cond.get("status") == "True"
                    and cond.get("reason") in DISRUPTIONS):
                disruption = cond["reason"]
        return cls(
            name=meta.get("name", ""),
            role=lbls.get(s.LABEL_ROLE, ""),
            rank=_int(lbls.get(s.LABEL_RANK)),
            attempt=_int(lbls.get(s.LABEL_ATTEMPT)),
            phase=phase,
            created_at=parse(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            exit_code=exit_code,
            message=message[-1000:],
            pending_reason=pending or "not started yet",
            disruption=disruption,
            lingering=lingering,
            pull_error=imagepull.observe(status),
        )


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    create_supporting: bool = False  # Service, aggregator RBAC, PodGroup
    create_prepare: bool = False
    create_group: bool = False  # create the missing group pods of attempt status.restarts
    delete_pods: list[str] = field(default_factory=list)
    delete_job: bool = False
    # Kueue (kueue.py): file the Workload, mark it Finished (succeeded?), clear an evicted
    # admission once the pods are gone, or set spec.active (user suspend).
    create_workload: bool = False
    finish_workload: Optional[bool] = None
    release_workload: bool = False
    workload_active: Optional[bool] = None
    entered: Optional[str] = None  # the phase entered in this step, if it changed
    disrupted: list[tuple[str, str]] = field(default_factory=list)  # (source, reason) recorded now
    round_reason: Optional[str] = None  # set when a repartition round was decided

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))


# ---- helpers ------------------------------------------------------------------------------

def set_condition(st: dict[str, Any], type_: str, status: str, reason: str, message: str,
                  now: datetime) -> None:
    conds = st.setdefault("conditions", [])
    for c in conds:
        if c.get("type") == type_:
            if c.get("status") != status:
                c["lastTransitionTime"] = iso(now)
            c.update(status=status, reason=reason, message=message)
            return
    conds.append({"type": type_, "status": status, "reason": reason, "message": message,
                  "lastTransitionTime": iso(now)})


def _enter(plan: Plan, phase: str, reason: str, message: str, now: datetime) -> None:
    """Set phase/reason/message; exactly the condition of the current state is True."""
    st = plan.status
    if st.get("phase") != phase:
        plan.entered = phase
        st.pop("blockedSince", None)  # a wait for quota belongs to the phase that asked
    st.update(phase=phase, reason=reason, message=message)
    for t in STATE_CONDITIONS:
        if t == phase:
            set_condition(st, t, "True", reason, message, now)
        elif any(c.get("type") == t and c.get("status") == "True" for c in st.get("conditions", [])):
            set_condition(st, t, "False", reason, f"job is {phase}", now)


def _cleanup(plan: Plan, policy: str, pods: list[PodObs]) -> None:
    if policy == "None":
        return
    for p in pods:
        if p.deleting or p.name in plan.delete_pods:
            continue
        if policy == "All" or p.phase in ("Pending", "Running", "Unknown") or p.lingering:
            plan.delete_pods.append(p.name)


def _fail(plan: Plan, reason: str, message: str, now: datetime, pods: list[PodObs], policy: str,
          event_message: str = "") -> None:
    _enter(plan, "Failed", reason, message, now)
    plan.status["completionTime"] = iso(now)
    plan.event("Warning", reason, event_message or message)
    _cleanup(plan, policy, pods)


def _restart(plan: Plan, spec: GrappaJobSpec, reason: str, message: str, now: datetime,
             pods: list[PodObs], disruption: str = "") -> None:
    """Restart the whole group. A disruption (eviction, preemption) is not the job's failure: it
    gets a new attempt without using up spec.runPolicy.backoffLimit, like Job's pod failure policy;
    `disruption` is Kubernetes' reason for it, kept in status.disruptionHistory."""
    st = plan.status
    limit = spec.run_policy.backoff_limit
    restarts, disruptions = int(st.get("restarts") or 0), int(st.get("disruptions") or 0)
    failures = restarts - disruptions
    if not disruption and failures >= limit:
        _fail(plan, "BackoffLimitExceeded",
              f"{message}; the group failed {failures} times and spec.runPolicy.backoffLimit is {limit}",
              now, pods, spec.run_policy.clean_pod_policy)
        return
    st["restarts"] = restarts + 1
    if disruption:
        st["disruptions"] = disruptions + 1
        _record_disruption(plan, "Kubernetes", disruption, message, now)
        msg = (f"{message}; restarting the whole group from the latest checkpoint (a disruption: "
               f"not counted against backoffLimit, {failures}/{limit} used)")
    else:
        msg = f"{message}; restarting the whole group from the latest checkpoint ({failures + 1}/{limit})"
    _enter(plan, "Restarting", reason, msg, now)
    plan.event("Warning", reason, msg)
    _leftovers_delete(plan, pods)


def _record_disruption(plan: Plan, source: str, reason: str, message: str, now: datetime) -> None:
    """Keep the stop in status after its Events expire: when, why, and the epochs completed by
    then (the SIGTERM checkpoint the job resumes from); the newest MAX_DISRUPTIONS are kept."""
    st = plan.status
    record: dict[str, Any] = {"time": iso(now), "source": source, "reason": reason, "message": message[:500]}
    epoch = (st.get("progress") or {}).get("epoch")
    if isinstance(epoch, int):
        record["epoch"] = epoch
    st["disruptionHistory"] = [*(st.get("disruptionHistory") or []), record][-MAX_DISRUPTIONS:]
    plan.disrupted.append((source, reason))


def _leftovers(pods: list[PodObs]) -> list[PodObs]:
    # A succeeded prepare pod is history (the store exists); everything else belongs to an attempt.
    return [p for p in pods if not (p.role == s.ROLE_PREPARE and p.phase == "Succeeded")]


def _leftovers_delete(plan: Plan, pods: list[PodObs]) -> None:
    plan.delete_pods += [p.name for p in _leftovers(pods) if not p.deleting and p.name not in plan.delete_pods]


def _pod_failed(plan: Plan, spec: GrappaJobSpec, pod: PodObs, now: datetime, pods: list[PodObs]) -> None:
    detail = pod.message or "no termination message"
    if pod.exit_code in s.PERMANENT_EXIT_CODES:
        where = f"pod {pod.name} exited with code {pod.exit_code}: {detail}"
        # The trainer's own error line is the whole message (it names the field, or file and row);
        # the Event still says which pod.
        message = detail if detail.startswith(ERROR_PREFIX) else where
        _fail(plan, s.PERMANENT_EXIT_CODES[pod.exit_code], message, now, pods,
              spec.run_policy.clean_pod_policy, event_message=where)
    elif pod.disruption:
        _restart(plan, spec, "PodDisrupted", f"pod {pod.name} was stopped by Kubernetes "
                 f"({pod.disruption}): {detail}", now, pods, disruption=pod.disruption)
    else:
        _restart(plan, spec, "PodFailed", f"pod {pod.name} failed (exit code {pod.exit_code}): {detail}",
                 now, pods)


def _replicas(spec: Optional[GrappaJobSpec], pods: list[PodObs], attempt: int) -> dict[str, Any]:
    out = {}
    for role, desired in ((s.ROLE_AGGREGATOR, 1), (s.ROLE_WORKER, spec.partitions if spec else 0)):
        counts = {"desired": desired, "pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for p in pods:
            if p.role == role and p.attempt == attempt and p.phase.lower() in counts:
                counts[p.phase.lower()] += 1
        out[role] = counts
    return out


# ---- the step -----------------------------------------------------------------------------

def step(job: JobRef, spec: Union[GrappaJobSpec, SpecError], status: Optional[dict[str, Any]],
         pods: list[PodObs], now: datetime, generation: Optional[int] = None,
         workload: Optional[WorkloadObs] = None) -> Plan:
    """`workload` is the job's Kueue Workload as observed (None when the job is not queued)."""
    st = copy.deepcopy(status) if status else {}
    st.pop("kopf", None)
    plan = Plan(st)
    if not st.get("phase"):
        st.update(startTime=iso(now), activeSince=iso(now), restarts=0, prepared=False)
        set_condition(st, "Created", "True", "Created", "GrappaJob accepted by the operator", now)
        _enter(plan, "Pending", "Created", "waiting for pods", now)
        plan.event("Normal", "Created", f"GrappaJob {job.namespace}/{job.name} accepted")
        if isinstance(spec, GrappaJobSpec) and gpu.requested(spec):
            plan.event("Warning", gpu.REASON, gpu.warning(spec))
    if generation is not None:
        st["observedGeneration"] = generation
    if isinstance(spec, GrappaJobSpec) and not st.get("runDir"):
        st["runDir"] = run_dir(job, spec)
        st["artifacts"] = artifacts(st["runDir"], spec)
    _step(plan, job, spec, pods, now, workload)
    if workload is not None:
        _sync_workload(plan, workload, pods)
    good = spec if isinstance(spec, GrappaJobSpec) else None
    st["replicas"] = _replicas(good, pods, int(st.get("restarts") or 0))
    return plan


@dataclass
class Tick:
    """One reconcile's inputs, as the transitions below read them."""

    plan: Plan
    job: JobRef
    spec: Union[GrappaJobSpec, SpecError]
    pods: list[PodObs]
    now: datetime
    workload: Optional[WorkloadObs]

    @property
    def st(self) -> dict[str, Any]:
        return self.plan.status

    @property
    def policy(self) -> str:
        return self.spec.run_policy.clean_pod_policy if isinstance(self.spec, GrappaJobSpec) else "All"

    @property
    def attempt(self) -> int:
        return int(self.st.get("restarts") or 0)

    @property
    def group(self) -> list[PodObs]:
        return [p for p in self.pods if p.role in (s.ROLE_AGGREGATOR, s.ROLE_WORKER)]

    @property
    def live(self) -> dict[tuple[str, Optional[int]], PodObs]:
        return {(p.role, p.rank): p for p in self.group if not p.deleting}

    def enter(self, phase: str, reason: str, message: str) -> None:
        _enter(self.plan, phase, reason, message, self.now)

    def fail(self, reason: str, message: str) -> None:
        _fail(self.plan, reason, message, self.now, self.pods, self.policy)


def _step(plan: Plan, job: JobRef, spec: Union[GrappaJobSpec, SpecError], pods: list[PodObs],
          now: datetime, workload: Optional[WorkloadObs]) -> None:
    """The transitions in order of precedence: the first that decides ends this reconcile (the
    rest wait for the next one, which sees the new status)."""
    tick = Tick(plan, job, spec, pods, now, workload)
    for transition in TRANSITIONS:
        if transition(tick):
            return


def _finished(t: Tick) -> bool:
    """A finished job only tidies up: its pods by cleanPodPolicy, itself after its TTL."""
    if t.st["phase"] not in TERMINAL:
        return False
    _cleanup(t.plan, t.policy, t.pods)
    ttl = t.spec.run_policy.ttl_seconds_after_finished if isinstance(t.spec, GrappaJobSpec) else None
    done = parse(t.st.get("completionTime"))
    if ttl is not None and done is not None and done + timedelta(seconds=ttl) <= t.now:
        t.plan.delete_job = True
    return True


def _unrunnable(t: Tick) -> bool:
    """A spec the operator cannot use, or one that can never run: Failed, naming the field."""
    if not isinstance(t.spec, GrappaJobSpec):
        t.fail(t.spec.reason, t.spec.message)
        return True
    try:
        check_runnable(t.job, t.spec)
    except SpecError as err:
        t.fail(err.reason, err.message)
        return True
    return False


def _suspension(t: Tick) -> bool:
    """Suspended: no pods. Resumed: back to Pending, with a fresh deadline clock (as Job)."""
    st = t.st
    if t.spec.run_policy.suspend:
        _leftovers_delete(t.plan, t.pods)
        if st["phase"] != "Suspended":
            msg = "pods deleted; set spec.runPolicy.suspend to false to resume from the latest checkpoint"
            t.enter("Suspended", "Suspended", msg)
            t.plan.event("Normal", "Suspended", msg)
        return True
    if st["phase"] == "Suspended":
        t.enter("Pending", "Resumed", "resuming from the latest checkpoint")
        t.plan.event("Normal", "Resumed", "resuming from the latest checkpoint")
        st["activeSince"] = iso(t.now)
    return False


def _admission(t: Tick) -> bool:
    """A job in a Kueue queue waits for its Workload's admission (no pods, no deadline)."""
    return t.workload is not None and _queued(t.plan, t.workload, t.pods, t.now)


def _deadlines(t: Tick) -> bool:
    """Active too long (counted from the last start, resume or admission, never while suspended
    or queued), an image that cannot be pulled, or a pod Pending too long: Failed."""
    rp = t.spec.run_policy
    started = parse(t.st.get("activeSince")) or parse(t.st.get("startTime")) or t.now
    if rp.active_deadline_seconds is not None and started + timedelta(seconds=rp.active_deadline_seconds) <= t.now:
        t.fail("DeadlineExceeded", f"the job was active longer than spec.runPolicy.activeDeadlineSeconds "
               f"({rp.active_deadline_seconds}s) since {iso(started)}")
        return True
    pull = _pull_failure(t.spec, t.pods, t.now)
    if pull:
        t.fail(imagepull.REASON, pull)
        return True
    if rp.pre_running_deadline_seconds is not None:
        limit = timedelta(seconds=rp.pre_running_deadline_seconds)
        for p in t.pods:
            if p.phase == "Pending" and not p.deleting and p.created_at and p.created_at + limit <= t.now:
                t.fail("PodPendingTimeout", f"pod {p.name} was Pending for more than spec.runPolicy."
                       f"preRunningDeadlineSeconds ({rp.pre_running_deadline_seconds}s): {p.pending_reason}")
                return True
    return False


def _restarting(t: Tick) -> bool:
    """A restart waits until the old attempt is completely gone, then starts the next."""
    if t.st["phase"] != "Restarting":
        return False
    if _leftovers(t.pods):
        _leftovers_delete(t.plan, t.pods)
        return True
    t.enter("Pending", "Restarted", f"starting attempt {t.st.get('restarts', 0)}")
    return False


def _preparing(t: Tick) -> bool:
    """The chunk store, once per job (prepare is idempotent; the flag saves a pod per restart)."""
    st, plan = t.st, t.plan
    if st["phase"] in ("Pending", "Preparing"):
        plan.create_supporting = True
    if st.get("prepared"):
        return False
    preps = [p for p in t.pods if p.role == s.ROLE_PREPARE]
    live = [p for p in preps if not p.deleting]
    if not live or live[0].phase not in ("Failed", "Succeeded"):
        if not preps:
            plan.create_prepare = True
        if st["phase"] != "Preparing":
            t.enter("Preparing", "Preparing", "preparing the chunk store")
        return True
    prep = live[0]
    if prep.phase == "Failed":
        _pod_failed(plan, t.spec, prep, t.now, t.pods)
        return True
    st["prepared"] = True
    if prep.lingering:  # only the template's sidecars still run: they hold resources for nothing
        plan.delete_pods.append(prep.name)
    plan.event("Normal", "Prepared", "chunk store ready")
    if st["phase"] == "Preparing":
        t.enter("Pending", "Prepared", "chunk store ready; starting the group")
    return False


def _stale_attempt(t: Tick) -> bool:
    """Pods of an earlier attempt go before the current one is judged."""
    stale = [p for p in t.group if p.attempt != t.attempt]
    t.plan.delete_pods += [p.name for p in stale if not p.deleting]
    return bool(stale)


def _succeeded(t: Tick) -> bool:
    agg = t.live.get((s.ROLE_AGGREGATOR, 0))
    if agg is None or agg.phase != "Succeeded":
        return False
    done = "prediction finished" if t.spec.predict is not None else "training finished"
    t.enter("Succeeded", "Succeeded", done)
    t.st["completionTime"] = iso(t.now)
    t.plan.event("Normal", "Succeeded", done + _result_suffix(t.st))
    _cleanup(t.plan, t.policy, t.pods)
    return True


def _pod_failure(t: Tick) -> bool:
    """A failed pod fails the job (a permanent exit code) or restarts the group; once the
    aggregator reported the last epoch, a worker dying on shutdown is not worth a restart."""
    finished = bool((t.st.get("progress") or {}).get("finished"))
    failed = sorted((p for p in t.live.values() if p.phase == "Failed"
                     and not (finished and p.role == s.ROLE_WORKER)),
                    key=lambda p: (p.exit_code not in s.PERMANENT_EXIT_CODES, p.rank or 0))
    if failed:
        _pod_failed(t.plan, t.spec, failed[0], t.now, t.pods)
    return bool(failed)


def _missing_pods(t: Tick) -> bool:
    """Pods missing from the group: created before it runs (round 0 recorded first); gone while
    it runs, a restart (one Kubernetes stopped is a disruption, not a failure)."""
    live, spec = t.live, t.spec
    expected = [(s.ROLE_AGGREGATOR, 0)] + [(s.ROLE_WORKER, r) for r in range(1, spec.partitions + 1)]
    missing = [k for k in expected if k not in live]
    if t.st["phase"] != "Running":
        if missing:
            t.plan.create_group = True
            if t.st.get("rounds") is None:
                t.st["rounds"] = rounds_mod.initial(spec, t.now)  # round 0, durable before any pod runs
        return bool(missing)
    gone = sorted({p.name for p in t.group if p.deleting} | {pod_name(t.job, r, k) for r, k in missing})
    if not gone:
        return False
    disrupted = sorted({p.disruption for p in t.group if p.deleting and p.disruption})
    if disrupted:
        _restart(t.plan, spec, "PodDisrupted", f"pod(s) {', '.join(gone)} were stopped by Kubernetes "
                 f"({', '.join(disrupted)})", t.now, t.pods, disruption=", ".join(disrupted))
    else:
        _restart(t.plan, spec, "PodDeleted", f"pod(s) {', '.join(gone)} disappeared while training",
                 t.now, t.pods)
    return True


def _started(t: Tick) -> bool:
    """The group runs once every pod is Running (or already done)."""
    if t.st["phase"] == "Running":
        return False
    if all(p.phase in ("Running", "Succeeded") for p in t.live.values()):
        msg = f"aggregator and {t.spec.partitions} workers running"
        t.enter("Running", "Running", msg)
        t.st.setdefault("runningTime", iso(t.now))
        t.plan.event("Normal", "Running", msg)
    return True


def _rounds(t: Tick) -> bool:
    """Repartition rounds, decided only while the group trains."""
    new_rounds, decision, reason = rounds_mod.decide(t.spec, t.st.get("rounds"), t.st.get("progress"), t.now)
    t.st["rounds"] = new_rounds
    if decision is not None:
        t.plan.round_reason = reason
        t.plan.event("Normal", "RoundDecided", f"round {decision.round} ({reason}): pairing seed "
                     f"{decision.pairing_seed}, effective from epoch {decision.effective_epoch}")
    return True


TRANSITIONS = (_finished, _unrunnable, _suspension, _admission, _deadlines, _restarting, _preparing,
               _stale_attempt, _succeeded, _pod_failure, _missing_pods, _started, _rounds)


def _pull_failure(spec: GrappaJobSpec, pods: list[PodObs], now: datetime) -> Optional[str]:
    for p in pods:
        if p.phase == "Pending" and not p.deleting and p.pull_error is not None:
            settings_ = spec.worker if p.role == s.ROLE_WORKER else spec.aggregator
            msg = imagepull.failure(p.name, p.role, p.pull_error, p.created_at, now, settings_.image is not None)
            if msg:
                return msg
    return None


# ---- Kueue ---------------------------------------------------------------------------------

def _queued(plan: Plan, wl: WorkloadObs, pods: list[PodObs], now: datetime) -> bool:
    """Gate a queued job on Kueue's admission; True while it must wait (no pods, no deadline)."""
    st = plan.status
    where = f"LocalQueue {wl.queue} (Workload {wl.name})"
    if not wl.exists:
        _leftovers_delete(plan, pods)  # a Workload deleted under a running job takes its pods
        plan.create_workload = True
        _wait(plan, wl, "WaitingForAdmission", f"waiting for Kueue to admit the aggregator and "
              f"workers together in {where}", now)
        return True
    if wl.evicted_reason and wl.suspended_by_job and is_deactivation(wl.evicted_reason):
        # the job's own suspend, being undone: not an eviction to warn about
        plan.release_workload = wl.quota_reserved and not _leftovers(pods)
        _wait(plan, wl, "WaitingForAdmission", f"resumed: waiting for Kueue to admit the aggregator "
              f"and workers together in {where}", now)
        return True
    if wl.evicted_reason:
        if st["phase"] != "Queued" or st.get("reason") not in ("Preempted", "Evicted"):  # a new eviction
            st["queueEvictions"] = int(st.get("queueEvictions") or 0) + 1
            _record_disruption(plan, "Kueue", wl.evicted_reason, wl.evicted_message, now)
        _leftovers_delete(plan, pods)
        plan.release_workload = wl.quota_reserved and not _leftovers(pods)
        _wait(plan, wl, "Preempted" if wl.evicted_reason == "Preempted" else "Evicted",
              f"Kueue evicted the job ({wl.evicted_reason}: {wl.evicted_message}); the pods are "
              f"deleted and it resumes from the latest checkpoint once admitted again in {where} "
              "(not counted against backoffLimit)", now)
        return True
    if not wl.admitted:
        _leftovers_delete(plan, pods)
        why = f": {wl.pending_message}" if wl.pending_message else ""
        _wait(plan, wl, "WaitingForAdmission", f"waiting for Kueue to admit the aggregator and workers "
              f"together in {where}{why}", now)
        return True
    if st["phase"] == "Queued":
        msg = f"admitted by Kueue to ClusterQueue {wl.cluster_queue or '?'}"
        _enter(plan, "Pending", "Admitted", msg, now)
        plan.event("Normal", "Admitted", msg)
        st["activeSince"] = iso(now)
    st["queue"] = {"localQueue": wl.queue, "workload": wl.name, "clusterQueue": wl.cluster_queue,
                   "admitted": True}
    return False


def _wait(plan: Plan, wl: WorkloadObs, reason: str, message: str, now: datetime) -> None:
    st = plan.status
    st["queue"] = {"localQueue": wl.queue, "workload": wl.name, "admitted": False}
    if st["phase"] != "Queued":
        _enter(plan, "Queued", reason, message, now)
        plan.event("Warning" if reason in ("Preempted", "Evicted") else "Normal", reason, message)
    elif st.get("reason") != reason or st.get("message") != message:
        _enter(plan, "Queued", reason, message, now)


def _sync_workload(plan: Plan, wl: WorkloadObs, pods: list[PodObs]) -> None:
    """Keep the Workload in step with the job: inactive while suspended, Finished when done."""
    st = plan.status
    if not wl.exists:
        return
    if st.get("phase") in TERMINAL:
        if not wl.finished:
            plan.finish_workload = st["phase"] == "Succeeded"
        return
    suspended = st.get("phase") == "Suspended"
    if suspended and wl.active:
        plan.workload_active = False
    elif not suspended and not wl.active and wl.suspended_by_job:
        plan.workload_active = True
    if suspended and wl.evicted_reason and wl.quota_reserved and not _leftovers(pods):
        plan.release_workload = True


def refused(job: JobRef, spec: GrappaJobSpec, status: dict[str, Any], pods: list[PodObs],
            now: datetime, err: Union[SpecError, CreateBlocked]) -> Plan:
    """The plan after the API server refused a child that `step` asked for (handlers.py).

    A permanent refusal fails the job at once. A blocked one (quota in use) waits: status says
    why (one Warning Event per new message), and the job fails with that reason once the wait
    outlasts spec.runPolicy.preRunningDeadlineSeconds, the budget a Pending pod gets.
    """
    plan = Plan(copy.deepcopy(status))
    st = plan.status
    if st.get("phase") in TERMINAL:
        return plan
    policy = spec.run_policy.clean_pod_policy
    if isinstance(err, SpecError):
        _fail(plan, err.reason, err.message, now, pods, policy)
        return plan
    since = parse(st.get("blockedSince")) or now
    limit = spec.run_policy.pre_running_deadline_seconds
    if limit is not None and since + timedelta(seconds=limit) <= now:
        _fail(plan, err.reason, f"{err.message}; still refused after "
              f"spec.runPolicy.preRunningDeadlineSeconds ({limit}s)", now, pods, policy)
        return plan
    st["blockedSince"] = iso(since)
    message = f"waiting since {iso(since)}: {err.message}"
    if st.get("reason") != err.reason or not str(st.get("message", "")).endswith(err.message):
        plan.event("Warning", err.reason, err.message)
    st.update(reason=err.reason, message=message)
    return plan


def unblocked(status: dict[str, Any]) -> dict[str, Any]:
    """The status once every child a blocked step asked for was created."""
    st = copy.deepcopy(status)
    if st.pop("blockedSince", None) is not None and st.get("phase") not in TERMINAL:
        st.update(reason=st.get("phase"), message="the refused objects were created")
    return st


def _result_suffix(st: dict[str, Any]) -> str:
    res = st.get("result") or {}
    if isinstance(res.get("testAcc"), (int, float)):
        return f": test accuracy {res['testAcc']:.4f}"
    if isinstance(res.get("testMrr"), (int, float)):
        return f": test MRR {res['testMrr']:.4f}"
    return ""
