"""The memory cgroup a pod's limit is enforced on: found and read for cgroup v1 and v2, on cgroup
trees written here (as a host, a container without a cgroup namespace, and one with it), and on
this machine's own."""
from __future__ import annotations

from pathlib import Path

import pytest

from grappa.util.cgroup_memory import CgroupPeaks, find_memory_cgroup

MIB = 1 << 20

V1_STAT = """cache 5242880
rss 2097152
inactive_file 1048576
total_cache 8388608
total_rss 3145728
total_inactive_file 3145728
total_active_file 5242880
"""
V2_STAT = """anon 3145728
file 8388608
inactive_file 3145728
active_file 5242880
"""


def mountinfo(tmp_path: Path, *lines: str) -> Path:
    """mountinfo lines as the kernel writes them (fields up to the mount point, then ` - type`)."""
    path = tmp_path / "mountinfo"
    path.write_text("".join(f"{i + 30} 23 0:{i + 28} {line}\n" for i, line in enumerate(lines)))
    return path


def proc_cgroup(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return path


def v1_folder(folder: Path, usage: int = 11 * MIB, peak: int = 40 * MIB, limit: int = 9223372036854771712) -> Path:
    folder.mkdir(parents=True)
    (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (folder / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (folder / "memory.stat").write_text(V1_STAT)
    return folder


def v2_folder(folder: Path, current: int = 11 * MIB, peak: int | None = 40 * MIB, limit: str = "max") -> Path:
    folder.mkdir(parents=True)
    (folder / "memory.current").write_text(f"{current}\n")
    if peak is not None:
        (folder / "memory.peak").write_text(f"{peak}\n")
    (folder / "memory.max").write_text(f"{limit}\n")
    (folder / "memory.stat").write_text(V2_STAT)
    return folder


def test_v1_on_a_host_reads_the_hierarchys_totals(tmp_path):
    """The hybrid layout: the memory controller on v1, an empty v2 tree beside it (this machine's)."""
    root = tmp_path / "fs"
    folder = v1_folder(root / "memory" / "user.slice" / "session-4.scope")
    (root / "unified").mkdir(parents=True)
    info = mountinfo(tmp_path, f"/ {root}/cpu rw - cgroup cgroup rw,cpu",
                     f"/ {root}/memory rw,relatime - cgroup cgroup rw,memory",
                     f"/ {root}/unified rw - cgroup2 cgroup2 rw")
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "4:memory:/user.slice/session-4.scope\n1:cpu:/\n0::/\n"), info)
    assert cg is not None and (cg.version, cg.path, cg.folder) == (1, "/user.slice/session-4.scope", folder)
    r = cg.read()
    # total_*: the cgroup and its children (a container's processes may sit in a child)
    assert (r.usage, r.peak, r.cache, r.inactive_file) == (11 * MIB, 40 * MIB, 8 * MIB, 3 * MIB)
    assert r.working_set == 8 * MIB  # usage less inactive file: kubelet's figure
    assert r.limit is None  # v1's "unlimited" is the largest page-aligned value, no limit
    assert cg.describe() == {"path": "/user.slice/session-4.scope", "version": 1, "limit_bytes": None}


def test_v1_in_a_container_without_a_cgroup_namespace_finds_its_bind_mounted_cgroup(tmp_path):
    """Docker/containerd on cgroup v1: /proc/self/cgroup names the full path, and the container's
    mount shows its own cgroup at the mount point (mountinfo's root field is that path)."""
    pod = "/kubepods/burstable/pod1234/abcd"
    folder = v1_folder(tmp_path / "memory", limit=512 * MIB)
    info = mountinfo(tmp_path, f"{pod} {tmp_path}/memory ro,nosuid - cgroup cgroup rw,memory")
    cg = find_memory_cgroup(proc_cgroup(tmp_path, f"5:memory:{pod}\n"), info)
    assert cg is not None and cg.folder == folder and cg.path == pod
    assert cg.read().limit == 512 * MIB


def test_a_sub_tree_mount_that_does_not_hold_the_path_is_the_containers_own_cgroup(tmp_path):
    """A runtime that mounts the container's cgroup from another namespace's view: the path is not
    under the mount's root, and the mount point is the container's cgroup."""
    folder = v1_folder(tmp_path / "memory")
    info = mountinfo(tmp_path, f"/docker/node1/kubepods/pod9/c1 {folder} ro - cgroup cgroup rw,memory")
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "5:memory:/kubepods/pod9/c1\n"), info)
    assert cg is not None and cg.folder == folder


def test_a_whole_hierarchy_is_never_taken_for_a_missing_cgroup(tmp_path):
    v1_folder(tmp_path / "memory")  # the machine's root: not this process's cgroup
    info = mountinfo(tmp_path, f"/ {tmp_path}/memory rw - cgroup cgroup rw,memory")
    assert find_memory_cgroup(proc_cgroup(tmp_path, "5:memory:/gone\n"), info) is None


def test_v2_in_a_container_with_a_cgroup_namespace_is_the_root_of_the_mount(tmp_path):
    folder = v2_folder(tmp_path / "sys" / "fs" / "cgroup", limit=str(768 * MIB))
    info = mountinfo(tmp_path, f"/ {folder} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate")
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "0::/\n"), info)
    assert cg is not None and (cg.version, cg.path, cg.folder) == (2, "/", folder)
    r = cg.read()
    assert (r.usage, r.peak, r.cache, r.inactive_file, r.limit) == (11 * MIB, 40 * MIB, 8 * MIB, 3 * MIB, 768 * MIB)
    assert r.working_set == 8 * MIB


def test_a_mount_point_with_a_space_is_unescaped(tmp_path):
    folder = v2_folder(tmp_path / "cgroup fs" / "job")
    info = mountinfo(tmp_path, f"/ {tmp_path}/cgroup\\040fs rw - cgroup2 cgroup2 rw")
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "0::/job\n"), info)
    assert cg is not None and cg.folder == folder


def test_without_a_kernel_peak_the_peak_is_the_largest_usage_sampled(tmp_path):
    """cgroup v2 before Linux 5.19 has no memory.peak: the peaks are what the samples saw."""
    folder = v2_folder(tmp_path / "cg", current=11 * MIB, peak=None)
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "0::/\n"), mountinfo(tmp_path, f"/ {folder} rw - cgroup2 cgroup2 rw"))
    peaks = CgroupPeaks(cg)
    peaks.sample()
    (folder / "memory.current").write_text(f"{30 * MIB}\n")  # grows, then shrinks
    peaks.sample()
    (folder / "memory.current").write_text(f"{20 * MIB}\n")
    peaks.sample()
    assert cg.read().peak == 0
    assert peaks.values() == [30 * MIB, 27 * MIB, 8 * MIB]  # usage, working set (30 - 3), cache


def test_the_kernels_peak_counts_when_it_keeps_one(tmp_path):
    folder = v1_folder(tmp_path / "cg", usage=11 * MIB, peak=40 * MIB)
    cg = find_memory_cgroup(proc_cgroup(tmp_path, "4:memory:/\n"),
                            mountinfo(tmp_path, f"/ {folder} rw - cgroup cgroup rw,memory"))
    peaks = CgroupPeaks(cg)
    peaks.sample()
    assert peaks.usage == 40 * MIB  # before the first sample, too


@pytest.mark.parametrize("cgroup_text, mounts", [
    ("4:memory:/a\n", []),                                       # no memory mount visible
    ("0::/a\n", ["/ {root} rw - cgroup2 cgroup2 rw"]),           # v2 mounted, memory controller off
    ("1:cpu:/\n", ["/ {root} rw - cgroup cgroup rw,cpu"]),       # no memory controller at all
])
def test_no_readable_memory_cgroup_is_none_and_reads_zeros(tmp_path, cgroup_text, mounts):
    root = tmp_path / "fs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "cgroup.procs").write_text("1\n")
    info = mountinfo(tmp_path, *(m.format(root=root) for m in mounts))
    assert find_memory_cgroup(proc_cgroup(tmp_path, cgroup_text), info) is None
    assert find_memory_cgroup(tmp_path / "absent", info) is None  # no /proc (macOS)
    peaks = CgroupPeaks(None, find=False)
    peaks.sample()
    assert peaks.values() == [0, 0, 0] and peaks.describe() is None


def test_this_machines_cgroup_holds_this_process():
    """Whatever this machine has: its usage includes this process's own anonymous memory."""
    cg = find_memory_cgroup()
    if cg is None:
        pytest.skip("no readable memory cgroup here")
    with open("/proc/self/status") as fh:
        anon = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("RssAnon:"))
    r = cg.read()
    assert r.usage >= anon > 0
    assert r.usage >= r.working_set > 0 and r.cache >= r.inactive_file >= 0
    peaks = CgroupPeaks(cg)
    peaks.sample()
    assert peaks.usage >= r.usage * 0.5 and peaks.working_set > 0
