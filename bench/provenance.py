"""Which code measured a benchmark job, and when, so a page can tell a cell measured before a change
from one measured after it.

Every job the peer benchmarks record carries `measured` (bench/link.py's cells: `code`):
{"date", "commit"} (the checkout's HEAD), "changes" (uncommitted edits under trainer/, operator/
or bench/: the commit alone does not say what ran) and "host" (the CPU's model, its widest vector
units and the cores this process may use: a fresh machine may be another host, and dense layers
run at the vector width they find). Jobs recorded before that field existed are given it from git
history by `python bench/provenance.py RUNS.json`: the commit that first holds the job's record
exactly, as {"date", "recorded_in"}; the code that measured it is that commit's parent or older.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
CODE = ("trainer", "operator", "bench")
SIMD = ("amx_tile", "avx512f", "avx2", "sse4_2")  # widest first


def _git(*args: str, root: Path = ROOT) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def host(cpuinfo: Optional[str] = None) -> dict:
    """The CPU as /proc/cpuinfo names it (its first processor), its widest SIMD extension among
    those torch's kernels choose from, and the cores this process may run on."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    first = dict(line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line)
    first = {k.strip(): v.strip() for k, v in first.items()}
    flags = set(first.get("flags", "").split())
    simd = next((f for f in SIMD if f in flags), None)
    cpu = first.get("model name")
    if cpu and "cpu family" in first:
        cpu += f" (family {first['cpu family']}, model {first.get('model', '?')})"
    return {"cpu": cpu, "simd": simd, "cores": len(os.sched_getaffinity(0))}


def stamp(root: Path = ROOT) -> dict:
    """This job's date (UTC), the code's commit (None outside a git checkout) and the host."""
    status = _git("status", "--porcelain", "--", *CODE, root=root)
    return {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "commit": _git("rev-parse", "--short", "HEAD", root=root), "changes": bool(status), "host": host()}


def from_history(runs: dict, path: Path, root: Path = ROOT) -> int:
    """Give each record without `measured` the commit that first recorded it (oldest first through
    the file's history); returns how many were given one."""
    rel = str(path.resolve().relative_to(root.resolve()))
    missing = {k for k, rec in runs.items() if "measured" not in rec}
    commits = (_git("log", "--reverse", "--format=%h %cs", "--", rel, root=root) or "").splitlines()
    given = 0
    for line in commits:
        if not missing:
            break
        sha, date = line.split()
        text = _git("show", f"{sha}:{rel}", root=root)
        old = json.loads(text) if text else {}
        for key in [k for k in missing if old.get(k) == runs[k]]:
            runs[key]["measured"] = {"date": date, "recorded_in": sha}
            missing.discard(key)
            given += 1
    return given


def describe(records: Iterable[dict]) -> str:
    """A cell's provenance for a table: its jobs' commits and dates, each once."""
    seen = []
    for rec in records:
        m = rec.get("measured")
        if not m:
            text = "unrecorded"
        elif m.get("recorded_in"):
            text = f"before {m['recorded_in']} ({m['date']})"
        else:
            text = f"{m.get('commit') or '?'}{'+changes' if m.get('changes') else ''} ({m['date'][:10]})"
        if text not in seen:
            seen.append(text)
    return ", ".join(seen) or "–"


if __name__ == "__main__":
    for name in sys.argv[1:]:
        p = Path(name)
        data = json.loads(p.read_text())
        n = from_history(data, p)
        p.write_text(json.dumps(data, indent=1, sort_keys=True))  # as network.save writes it
        print(f"{p}: {n} records given their recording commit")
