"""The processes a test started, found by parentage in /proc, so that a test that fails (or
forgets) never leaves them running: a launcher it started and the ranks the launcher started in
sessions of their own are all descendants of the pytest process."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from waiting import load_factor


def _parents() -> dict[int, int]:
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie is already dead, only not reaped yet
            out[int(text.split(" ", 1)[0])] = int(fields[1])
    return out


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


# Helpers Python's multiprocessing starts once for the pytest process itself and keeps for the
# session (the first test that prepares a store in-process starts them): not a test's leftovers.
SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")

# Servers a session-scoped fixture started (tests/s3_server.py's SeaweedFS), for the whole session:
# they and theirs are not the leftovers of the test that happened to start them.
_KEPT: set[int] = set()


def keep(pid: int) -> None:
    _KEPT.add(pid)


def release(pid: int) -> None:
    _KEPT.discard(pid)


def _kept() -> set[int]:
    return set().union(*({pid} | descendants(pid) for pid in _KEPT))


def end_new(before: set[int], grace: float = 10.0) -> dict[int, str]:
    """The descendants that were not there `before`, given `grace` seconds (stretched by the
    machine's load) to exit on their own (a job's ranks wind down after it returns), then
    SIGKILLed. Returns what had to be killed."""
    deadline = time.monotonic() + grace * load_factor()
    while True:
        new = {pid for pid in descendants(os.getpid()) - before - _kept()
               if not any(h in command(pid) for h in SESSION_HELPERS)}
        if not new or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    left = {pid: command(pid) for pid in new}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
