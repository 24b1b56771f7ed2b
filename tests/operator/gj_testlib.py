"""Shared helpers of the operator tests (a unique module name: tests/operator is not a package)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from grappa_operator import settings as s
from grappa_operator.api import parse_spec
from grappa_operator.status import PodObs

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def make_spec(**over: Any):
    raw: dict[str, Any] = {"partitions": 2, "dataset": {"name": "cora"}, "storage": {"hostPath": "/srv/grappa"},
                           "training": {"epochs": 30}}
    for k, v in over.items():
        raw[k] = v
    return parse_spec(raw)


def pod(name: str, role: str, rank: int | None = None, attempt: int = 0, phase: str = "Running",
        exit_code: int | None = None, message: str = "", created: datetime = T0, deleting: bool = False,
        pending_reason: str = "") -> PodObs:
    return PodObs(name=name, role=role, rank=rank, attempt=attempt, phase=phase, created_at=created,
                  deleting=deleting, exit_code=exit_code, message=message, pending_reason=pending_reason)


def group(p: int = 2, attempt: int = 0, phase: str = "Running", **kw: Any) -> list[PodObs]:
    out = [pod("job-aggregator", s.ROLE_AGGREGATOR, 0, attempt, phase, **kw)]
    out += [pod(f"job-worker-{r}", s.ROLE_WORKER, r, attempt, phase, **kw) for r in range(1, p + 1)]
    return out


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def cond(st, type_):
    return next((c for c in st.get("conditions", []) if c["type"] == type_), None)


def true_states(st):
    return sorted(c["type"] for c in st["conditions"] if c["status"] == "True" and c["type"] != "Created")


def prepared_status(phase="Pending", restarts=0, **extra):
    st = {"phase": phase, "startTime": "2026-01-01T12:00:00Z", "restarts": restarts, "prepared": True,
          "conditions": [{"type": "Created", "status": "True", "reason": "Created", "message": "",
                          "lastTransitionTime": "2026-01-01T12:00:00Z"}]}
    if phase not in ("Pending", "Preparing"):
        st["conditions"].append({"type": phase, "status": "True", "reason": phase, "message": "",
                                 "lastTransitionTime": "2026-01-01T12:00:00Z"})
    st.update(extra)
    return st


def running_status(**extra):
    return prepared_status("Running", runningTime="2026-01-01T12:00:00Z", **extra)
