"""GPUs a job requests but cannot use: the trainer runs on CPU only (gloo, no CUDA device), so a
GPU granted to its pods stays idle while the job holds it. Said in a Warning Event when the job
is accepted, in the CRD's `resources` description and in docs/operator.md."""
from __future__ import annotations

from .api import GrappaJobSpec

REASON = "GPUNotUsed"
# Device-plugin resources of GPUs and their slices: nvidia.com/gpu, nvidia.com/mig-1g.5gb,
# amd.com/gpu, gpu.intel.com/i915, ...
_VENDORS = ("nvidia.com/",)


def _is_gpu(resource: str) -> bool:
    return "gpu" in resource.lower() or resource.startswith(_VENDORS)


def requested(spec: GrappaJobSpec) -> list[str]:
    """'spec.<role>.resources.<requests|limits>[<name>]' of every GPU the job asks for."""
    out = []
    for role in ("aggregator", "worker"):
        res = getattr(spec, role).resources
        for kind, values in (("requests", res.requests), ("limits", res.limits)):
            out += [f"spec.{role}.resources.{kind}[{name}]" for name in sorted(values) if _is_gpu(name)]
    return out


def warning(spec: GrappaJobSpec) -> str:
    return (f"{', '.join(requested(spec))}: the trainer runs on CPU only (gloo, no CUDA device), so "
            "these GPUs are allocated to the pods but stay idle; remove the GPU request and give the "
            "pods CPU instead (spec.<role>.resources.requests.cpu)")
