"""Which code measured a benchmark job, and when, so a page can tell a cell measured before a change
from one measured after it.

Every job the peer benchmarks record carries `measured` (bench/link.py's cells: `code`):
{"date", "commit"} (the checkout's HEAD), "changes" (uncommitted edits under trainer/, operator/
or bench/: the commit alone does not say what ran) and "host" (the CPU's model, its widest vector
units and the cores this process may use: a fresh machine may be another host, and dense layers
run at the vector width they find; its kernel release, and what a system call and a page fault cost
it, measured: a host whose kernel makes those dear spends more CPU on every message between
processes). Jobs recorded before that field existed are given it from git
history by `python bench/provenance.py RUNS.json`: the commit that first holds the job's record
exactly, as {"date", "recorded_in"}; the code that measured it is that commit's parent or older.
"""
from __future__ import annotations

import json
import mmap
import os
import platform
import resource
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
    return {"cpu": cpu, "simd": simd, "cores": len(os.sched_getaffinity(0)), "kernel": platform.release()}


def host_costs(calls: int = 20_000, pages: int = 2_000) -> dict:
    """This host's CPU microseconds per system call (getppid, less the bare loop) and per minor page
    fault (first touches of a fresh anonymous mapping), on this thread's CPU clock, so a busy
    machine's waiting is not in them. About 50 ms."""
    clock = time.thread_time
    t = clock()
    for _ in range(calls):
        pass
    bare = clock() - t
    t = clock()
    for _ in range(calls):
        os.getppid()
    syscall = max(0.0, clock() - t - bare) / calls
    area = mmap.mmap(-1, pages * mmap.PAGESIZE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # a huge page would take one fault for 512 pages
        area.madvise(mmap.MADV_NOHUGEPAGE)
    try:
        before, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, clock()
        for off in range(0, pages * mmap.PAGESIZE, mmap.PAGESIZE):
            area[off] = 1
        seconds, faults = clock() - t, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    finally:
        area.close()
    return {"syscall_us": round(syscall * 1e6, 3), "page_fault_us": round(seconds * 1e6 / max(faults, 1), 3),
            "page_faults": faults}


def stamp(root: Path = ROOT) -> dict:
    """This job's date (UTC), the code's commit (None outside a git checkout) and the host."""
    status = _git("status", "--porcelain", "--", *CODE, root=root)
    return {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "commit": _git("rev-parse", "--short", "HEAD", root=root), "changes": bool(status), "host": {**host(), **host_costs()}}


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


def hosts_table(cells: Iterable[tuple[str, Iterable[dict]]]) -> list[str]:
    """A markdown table of the hosts that measured `cells` ((label, records) pairs): one row a host
    (CPU, vector units, cores, kernel), its jobs' system call and page fault costs (min-max), and
    the cells it measured. Records without a host are left out (measured before it was kept)."""
    hosts: dict[tuple, dict] = {}
    for label, records in cells:
        for rec in records:
            h = (rec.get("measured") or {}).get("host")
            if not h:
                continue
            key = (h.get("cpu"), h.get("simd"), h.get("cores"), h.get("kernel"))
            row = hosts.setdefault(key, {"syscall": [], "fault": [], "cells": []})
            row["syscall"] += [h["syscall_us"]] if "syscall_us" in h else []
            row["fault"] += [h["page_fault_us"]] if "page_fault_us" in h else []
            if label not in row["cells"]:
                row["cells"].append(label)

    def span(values: list[float]) -> str:
        if not values:
            return "not measured"
        lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
        return lo if lo == hi else f"{lo}-{hi}"
    md = ["| CPU | vector units | cores | kernel | system call µs | page fault µs | cells |", "|---|---|---|---|---|---|---|"]
    for (cpu, simd, cores, kernel), row in hosts.items():
        md.append(f"| {cpu or '?'} | {simd or '?'} | {cores or '?'} | {kernel or 'not recorded'} | "
                  f"{span(row['syscall'])} | {span(row['fault'])} | {'; '.join(row['cells'])} |")
    return md if hosts else []


if __name__ == "__main__":
    for name in sys.argv[1:]:
        p = Path(name)
        data = json.loads(p.read_text())
        n = from_history(data, p)
        p.write_text(json.dumps(data, indent=1, sort_keys=True))  # as network.save writes it
        print(f"{p}: {n} records given their recording commit")
