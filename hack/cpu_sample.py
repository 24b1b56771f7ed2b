"""The CPU a `make test` run used, as rows of its phases file, so a run on two shared cores
says where their time went: `cpu-busy` (every process on the machine), `cpu-containers` (the
bed's Docker containers: the cluster's node with every pod in it, and image builds' steps) and
`cpu-available` (cores x the run's wall time), each in core-seconds in the `took` column with
status `core-s` (hack/phases.py prints them apart from the timeline). The containers' share is
split (cgroup v1) into the cluster's pods that ended while the cluster ran (the tests' jobs,
prepare and predict pods, operators installed per test), the pods that lasted until the cluster
went (control plane, CoreDNS, Kueue) and the rest (the node's containerd and kubelet, image
imports, builds' steps): `cpu-pods-ended`, `cpu-pods-lasting`, `cpu-containers-other`.
usage: python3 hack/cpu_sample.py PHASES_FILE   (runs until SIGTERM, then appends the rows)"""
import os
import re
import signal
import sys
import time
from pathlib import Path

V1 = "sys/fs/cgroup/cpuacct/docker/*/cpuacct.usage"  # nanoseconds (cgroup v1, this machine)
V2 = ("/sys/fs/cgroup/system.slice/docker-*.scope/cpu.stat", "/sys/fs/cgroup/docker/*/cpu.stat")


def busy_seconds() -> float:
    """Non-idle CPU seconds since boot, all cores (/proc/stat's first line, in clock ticks)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def containers() -> dict[str, float]:
    """CPU seconds of each Docker container now running (a removed one keeps its last sample)."""
    out = {}
    for f in Path("/").glob(V1):
        try:
            out[f.parent.name] = int(f.read_text()) / 1e9
        except OSError:  # the container ended between the glob and the read
            pass
    for pattern in V2:
        for f in Path("/").glob(pattern.lstrip("/")):
            try:
                usec = next(int(ln.split()[1]) for ln in f.read_text().splitlines() if ln.startswith("usage_usec"))
            except OSError:
                continue
            out[f.parent.name] = usec / 1e6
    return out


POD = re.compile(r"(^|-)pod[0-9a-f][0-9a-f_-]{15,}(\.slice)?$")  # a pod's cgroup (systemd or cgroupfs driver)


def pods(root: Path = Path("/")) -> dict[str, float]:
    """CPU seconds of each pod cgroup inside the running containers (the kind node's kubelet
    nests them below the node's own cgroup), by cgroup path."""
    out = {}
    for f in root.glob(V1):
        for folder, subfolders, _ in os.walk(f.parent):  # a folder removed mid-walk is skipped
            if POD.search(os.path.basename(folder)):
                subfolders.clear()  # its containers are counted in it
                try:
                    out[folder] = int(Path(folder, "cpuacct.usage").read_text()) / 1e9
                except OSError:  # removed between the walk and the read
                    pass
    return out


def sample_pods(before: dict[str, float], seen: dict[str, float], ended: set[str], root: Path = Path("/")) -> None:
    """One sample of every pod's CPU into `seen`; a pod gone while its container (the node) still
    runs joins `ended`. Pods gone with their node lasted until the cluster went."""
    now = pods(root)
    for path, seconds in now.items():
        seen[path] = seconds - before.get(path, 0.0)
    depth = len((root / V1).parts) - 1  # <root>/sys/fs/cgroup/cpuacct/docker/<id>
    ended.update(p for p in seen if p not in now and Path(*Path(p).parts[:depth]).exists())


def main(phases: str) -> None:
    t0, busy0 = time.monotonic(), busy_seconds()
    seen: dict[str, float] = {}
    before = containers()  # containers already running (another bed's) are not this run's
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):  # make test's end, or a Ctrl-C of it
        signal.signal(sig, lambda *_: stop.append(1))
    pods_before = pods()
    pod_seen: dict[str, float] = {}
    ended: set[str] = set()  # pods whose cgroup went while their node still ran
    while not stop:
        for cid, seconds in containers().items():
            seen[cid] = seconds - before.get(cid, 0.0)
        sample_pods(pods_before, pod_seen, ended)
        time.sleep(5)  # a signal ends the loop after this sleep (PEP 475 resumes it)
    for cid, seconds in containers().items():
        seen[cid] = seconds - before.get(cid, 0.0)
    sample_pods(pods_before, pod_seen, ended)
    wall = time.monotonic() - t0
    pods_ended = sum(pod_seen[k] for k in ended)
    pods_lasting = sum(pod_seen.values()) - pods_ended
    with open(phases, "a") as f:
        f.write(f"cpu-busy 0 {round(busy_seconds() - busy0)} core-s\n")
        f.write(f"cpu-containers 0 {round(sum(seen.values()))} core-s\n")
        f.write(f"cpu-pods-ended 0 {round(pods_ended)} core-s\n")
        f.write(f"cpu-pods-lasting 0 {round(pods_lasting)} core-s\n")
        f.write(f"cpu-containers-other 0 {round(sum(seen.values()) - pods_ended - pods_lasting)} core-s\n")
        f.write(f"cpu-available 0 {round(wall * (os.cpu_count() or 1))} core-s\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 hack/cpu_sample.py PHASES_FILE")
    main(sys.argv[1])
