"""A pod whose image cannot be pulled: fail the job within a minute, naming the image and the
setting that chose it, instead of letting it sit Pending until preRunningDeadlineSeconds (600 s).

The kubelet retries a failed pull with back-off forever, so the job decides. A bad name or a
missing image under `imagePullPolicy: Never` never heals: Failed at once. A pull that fails
(ErrImagePull, then ImagePullBackOff while the kubelet waits) may be a registry blip: Failed once
the pod has existed for PULL_GRACE_SECONDS and its image still cannot be pulled. A pull still in
progress is "ContainerCreating", never one of these, so a big image that takes minutes is fine.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Optional

from . import settings as s

PERMANENT = ("InvalidImageName", "ErrImageNeverPull")
RETRIED = ("ErrImagePull", "ImagePullBackOff")
PULL_GRACE_SECONDS = 30
REASON = "ImagePullFailed"


@dataclass(frozen=True)
class PullError:
    container: str
    image: str
    reason: str  # the kubelet's waiting reason
    message: str


def observe(pod_status: dict[str, Any]) -> Optional[PullError]:
    """The first container (init containers first) whose image the kubelet cannot pull."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in pod_status.get(key) or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PERMANENT + RETRIED:
                return PullError(cs.get("name", ""), cs.get("image", ""), waiting["reason"],
                                 (waiting.get("message") or "").strip()[:500])
    return None


def _setting(role: str, container: str, image_in_spec: bool) -> str:
    """Where the image that failed was chosen, i.e. what the user changes."""
    section = "worker" if role == s.ROLE_WORKER else "aggregator"  # prepare runs with the aggregator's
    if container != s.CONTAINER_NAME:
        return f"the image of container {container!r} in spec.{section}.template.spec"
    if image_in_spec:
        return f"spec.{section}.image"
    return (f"spec.{section}.image, or the operator's default trainer image: the chart value "
            "imageRegistry (or trainerImage.repository/tag) naming a registry your nodes can pull from; "
            "`make images REGISTRY=<registry>` builds and pushes the images there")


def failure(pod_name: str, role: str, err: PullError, created_at: Optional[datetime], now: datetime,
            image_in_spec: bool) -> Optional[str]:
    """The job's failure message once this pull error is final, else None (keep waiting)."""
    if err.reason in RETRIED:
        if created_at is None or created_at + timedelta(seconds=PULL_GRACE_SECONDS) > now:
            return None
        since = f"for more than {PULL_GRACE_SECONDS}s "
    else:
        since = ""
    detail = f": {err.message}" if err.message else ""
    return (f"pod {pod_name} cannot pull image {err.image!r} {since}({err.reason}{detail}); "
            f"set {_setting(role, err.container, image_in_spec)}")
