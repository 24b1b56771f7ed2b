"""This process's memory cgroup: what a Kubernetes memory limit is enforced on.

A container's limit is its cgroup's limit, and the cgroup charges page cache (files read, the
memory-mapped chunk store) besides what the processes allocate, so a pod can be OOM-killed while
every process's RSS looks small. Kubelet's eviction and `kubectl top` use the "working set":
usage minus the inactive file pages (those the kernel reclaims first).

cgroup v2: memory.current, memory.peak (kernels from 5.19), memory.stat's `file` and
`inactive_file`, memory.max. cgroup v1: memory.usage_in_bytes, memory.max_usage_in_bytes,
memory.stat's `total_cache` and `total_inactive_file` (total_*: the cgroup and its children),
memory.limit_in_bytes. Where the kernel keeps no peak, the peak is the largest usage sampled; where
it keeps one, that spans the cgroup's life (a container's whole run, or a session's).

In a pod the cgroup is the container's. Outside a container it is whatever the session runs in
(a systemd scope, a user slice, a sandbox): shared with every process there, so the figures say
nothing of one job; `path` says which cgroup was read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# CgroupPeaks.values()' order, the names reports give them (`worker_<name>_bytes`)
CGROUP_PEAKS = ("cgroup_peak", "cgroup_working_set_peak", "cgroup_cache_peak")
# v1 writes "unlimited" as the largest page-aligned 64-bit value; anything this large is no limit
_NO_LIMIT = 1 << 62


@dataclass(frozen=True)
class CgroupReading:
    usage: int          # bytes charged now, page cache included
    peak: int           # the kernel's peak of usage; 0 where it keeps none
    cache: int          # page cache (file-backed pages) charged now
    inactive_file: int  # of the cache, what the kernel reclaims first
    limit: Optional[int]

    @property
    def working_set(self) -> int:
        """Kubelet's figure: usage less the inactive file pages, never below 0."""
        return max(0, self.usage - self.inactive_file)


@dataclass(frozen=True)
class MemoryCgroup:
    version: int  # 1 or 2
    path: str     # as /proc/self/cgroup names it ("/" at the root of a cgroup namespace)
    folder: Path  # where its files are

    def _int(self, name: str) -> Optional[int]:
        try:
            text = (self.folder / name).read_text().strip()
        except OSError:
            return None
        return None if text == "max" else int(text)

    def _stat(self) -> dict[str, int]:
        out = {}
        for line in (self.folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        return out

    def read(self) -> CgroupReading:
        stat = self._stat()
        if self.version == 2:
            usage, peak, limit = self._int("memory.current"), self._int("memory.peak"), self._int("memory.max")
            cache, inactive = stat.get("file", 0), stat.get("inactive_file", 0)
        else:
            usage, peak = self._int("memory.usage_in_bytes"), self._int("memory.max_usage_in_bytes")
            limit = self._int("memory.limit_in_bytes")
            cache, inactive = stat.get("total_cache", stat.get("cache", 0)), \
                stat.get("total_inactive_file", stat.get("inactive_file", 0))
        if usage is None:
            raise OSError(f"{self.folder}: no memory usage file (cgroup v{self.version})")
        return CgroupReading(usage, peak or 0, cache, inactive,
                             limit if limit is not None and limit < _NO_LIMIT else None)

    def describe(self) -> dict:
        """Which cgroup, for a report: its path, version and limit."""
        try:
            limit = self.read().limit
        except (OSError, ValueError):
            limit = None
        return {"path": self.path, "version": self.version, "limit_bytes": limit}


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts(mountinfo: Path) -> list[tuple[str, str, str, set[str]]]:
    """(root inside the hierarchy, mount point, type, options) of every cgroup mount."""
    out = []
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((_unescape(fields[3]), _unescape(fields[4]), tail[0], set(tail[2].split(","))))
    return out


def _folder(mount_root: str, mount_point: str, path: str) -> Path:
    """The cgroup's folder: a mount of a sub-tree (a container's own cgroup bind-mounted, without a
    cgroup namespace) shows it relative to its root."""
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
        path = path[len(mount_root):]
    return Path(mount_point) / path.lstrip("/")


def find_memory_cgroup(proc_cgroup: str | Path = "/proc/self/cgroup",
                       mountinfo: str | Path = "/proc/self/mountinfo") -> Optional[MemoryCgroup]:
    """The memory cgroup of this process, or None where there is none to read (no memory
    controller, no /proc: macOS). A v1 memory hierarchy wins over v2 (the hybrid layout keeps the
    controller on v1 and an empty v2 tree beside it)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
        mounts = _mounts(Path(mountinfo))
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    candidates = []
    if v1 is not None:
        candidates += [(1, v1, root, point) for root, point, kind, opts in mounts
                       if kind == "cgroup" and "memory" in opts]
    if v2 is not None:
        candidates += [(2, v2, root, point) for root, point, kind, _ in mounts if kind == "cgroup2"]
    for version, path, root, point in candidates:
        usage = "memory.current" if version == 2 else "memory.usage_in_bytes"
        # a mount of a sub-tree that does not hold the path shows this container's own cgroup at
        # its mount point (how runtimes mount it); a whole hierarchy's root is never taken for ours
        for folder in (_folder(root, point, path), *([Path(point)] if root != "/" else [])):
            if (folder / usage).is_file() and (folder / "memory.stat").is_file():
                return MemoryCgroup(version, path, folder)
    return None


class CgroupPeaks:
    """Peaks over a process's life: usage (the kernel's where it keeps one, else the largest
    sampled), and the largest working set and page cache sampled. Zeros without a cgroup."""

    def __init__(self, cgroup: Optional[MemoryCgroup] = None, find: bool = True) -> None:
        self.cgroup = cgroup if cgroup is not None or not find else find_memory_cgroup()
        self.usage = self.working_set = self.cache = 0

    def sample(self) -> None:
        if self.cgroup is None:
            return
        try:
            r = self.cgroup.read()
        except (OSError, ValueError):  # a cgroup removed under us: keep what was seen
            return
        self.usage = max(self.usage, r.usage, r.peak)
        self.working_set = max(self.working_set, r.working_set)
        self.cache = max(self.cache, r.cache)

    def values(self) -> list[int]:
        """[peak usage, peak working set, peak page cache]: CGROUP_PEAKS's order."""
        return [self.usage, self.working_set, self.cache]

    def describe(self) -> Optional[dict]:
        return None if self.cgroup is None else self.cgroup.describe()
