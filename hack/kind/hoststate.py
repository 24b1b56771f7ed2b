"""What the test bed may change on the host, as a snapshot, and the difference between two.

    python3 hoststate.py snapshot >before.json
    python3 hoststate.py compare before.json     # exit 1 and a list when something is left behind

A snapshot holds the network interfaces, the iptables chains and FORWARD policy of every table,
the running processes of the bed's kinds (dockerd, containerd and their shims, kubelet, etcd,
kube-apiserver, prometheus) and the mounts under the bed's folder. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BED_PROCESSES = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "kubelet",
                 "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "prometheus")


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def snapshot(bed: str) -> dict[str, list[str]]:
    chains, policies = [], []
    for table in ("filter", "nat", "mangle", "raw"):
        for line in _run("iptables", "-t", table, "-S").splitlines():
            if line.startswith("-N "):
                chains.append(f"{table}:{line[3:]}")
            elif line.startswith("-P "):
                policies.append(f"{table}:{line[3:]}")
    procs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name in BED_PROCESSES:
            procs.append(name)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(bed)]
    links = [line.split()[0].split("@")[0] for line in _run("ip", "-br", "link").splitlines() if line.strip()]
    return {"interfaces": sorted(links), "iptables chains": sorted(chains),
            "iptables policies": sorted(policies), "processes": sorted(procs), "mounts": sorted(mounts)}


def left_behind(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """Everything present after that was not before (and policies that changed)."""
    problems = []
    for kind, now in after.items():
        was = before.get(kind, [])
        extra = [x for x in now if x not in was]
        if kind == "processes":  # counted: a second dockerd beside the machine's own is still a leftover
            extra = [x for x in set(now) if now.count(x) > was.count(x)]
        problems += [f"{kind}: {x}" for x in sorted(extra)]
    for policy in before.get("iptables policies", []):
        if policy not in after.get("iptables policies", []):
            problems.append(f"iptables policies: {policy} not restored")
    return problems


def main(argv: list[str]) -> int:
    bed = os.environ.get("GRAPPA_KIND_BED", os.path.expanduser("~/.cache/grappa/kind-bed"))
    if argv[:1] == ["snapshot"]:
        json.dump(snapshot(bed), sys.stdout)
        return 0
    if argv[:1] == ["compare"] and len(argv) == 2:
        problems = left_behind(json.loads(Path(argv[1]).read_text()), snapshot(bed))
        for p in problems:
            print(f"left behind: {p}", file=sys.stderr)
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
