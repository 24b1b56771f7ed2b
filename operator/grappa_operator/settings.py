"""Names and knobs shared by every module of the operator (one place to change them)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

GROUP = "grappa.dev"
VERSION = "v1alpha1"
KIND = "GrappaJob"
PLURAL = "grappajobs"
SINGULAR = "grappajob"
SHORT_NAMES = ["gj"]
API_VERSION = f"{GROUP}/{VERSION}"

# Labels on every child object; the job label is how the operator finds its pods.
LABEL_JOB = f"{GROUP}/job-name"
LABEL_ROLE = f"{GROUP}/role"
LABEL_RANK = f"{GROUP}/rank"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "grappa-operator"

ROLE_PREPARE = "prepare"
ROLE_AGGREGATOR = "aggregator"
ROLE_WORKER = "worker"

DEFAULT_TRAINER_IMAGE = "ghcr.io/grappa-dev/grappa-trainer:0.1.0"
TRAINER_IMAGE_ENV = "GRAPPA_TRAINER_IMAGE"  # the chart's trainerImage: a platform's default


def trainer_image() -> str:
    """The image of pods whose spec names none: the operator's setting, else the release's."""
    return os.environ.get(TRAINER_IMAGE_ENV, "").strip() or DEFAULT_TRAINER_IMAGE
DEFAULT_MOUNT_PATH = "/grappa"
# A worker pod's emptyDir for fetched round data (spec.storage.fetch not direct): storage.localDir
LOCAL_DATA_PATH = "/grappa-local"
CONTAINER_NAME = "grappa"
TERMINATION_LOG = "/dev/termination-log"

# Exit codes of the trainer that mean "do not retry" (docs/architecture.md).
EXIT_BAD_CONFIG = 2
EXIT_CANNOT_RUN = 3
PERMANENT_EXIT_CODES = {EXIT_BAD_CONFIG: "InvalidConfig", EXIT_CANNOT_RUN: "CannotRun"}

# Name budget: pod/service names derive from the job name and label values are <= 63 chars.
MAX_JOB_NAME = 63 - len("-aggregator")
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a Service name must be one

# Node counts of the built-in (PyG versions) and OGB datasets, to refuse P > nodes before any
# pod starts (operator and CRD). A user's arrays are only counted by the prepare pod.
KNOWN_NODE_COUNTS = {
    "cora": 2708,
    "citeseer": 3327,
    "coauthor-cs": 18333,
    "coauthor-physics": 34493,
    "amazon-computers": 13752,
    "amazon-photo": 7650,
    "ogbn-arxiv": 169343,
    "ogbn-products": 2449029,
    "ogbn-papers100M": 111059956,
}

# Variables the operator owns; a user env entry may not replace them (it would break rendezvous).
RESERVED_ENV = (
    "GRAPPA_CONFIG", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "POD_IP",
    "GRAPPA_JOB_NAME", "GRAPPA_JOB_NAMESPACE",
)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


@dataclass
class OperatorSettings:
    """Runtime settings of the operator process (flags override the environment)."""

    namespaces: list[str] = field(default_factory=list)  # empty = all namespaces
    metrics_port: int = 8080
    health_port: int = 8081
    bind_address: str = "0.0.0.0"
    resync_seconds: float = 5.0  # timer period: deadlines, TTL, pending checks
    leader_lease: str = ""  # "<namespace>/<name>" of the election Lease; empty = no election
    identity: str = ""  # this replica's name in the Lease (its pod name)

    @classmethod
    def from_env(cls) -> "OperatorSettings":
        ns = [n.strip() for n in os.environ.get("GRAPPA_WATCH_NAMESPACES", "").split(",") if n.strip()]
        return cls(
            namespaces=ns,
            metrics_port=_env_int("GRAPPA_METRICS_PORT", 8080),
            health_port=_env_int("GRAPPA_HEALTH_PORT", 8081),
            # All interfaces: `kubectl port-forward` connects to 127.0.0.1 inside the pod, which a
            # server bound to the pod IP refuses; the pod network exposes nothing else anyway.
            bind_address=os.environ.get("GRAPPA_BIND_ADDRESS", "").strip() or "0.0.0.0",
            resync_seconds=float(os.environ.get("GRAPPA_RESYNC_SECONDS", "") or 5.0),
            leader_lease=os.environ.get("GRAPPA_LEADER_LEASE", "").strip(),
            identity=os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or "grappa-operator",
        )
