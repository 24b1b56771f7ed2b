"""Launching and stopping long-running components, each in its own process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now.

    Binding to port 0 lets the kernel choose; the tiny window before the component binds it is
    acceptable for a test bed (a collision shows up as a clear health-check failure).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-64 * 1024:]
    except OSError:
        return f"<no log at {path}>"
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (index 0 is the state)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is parenthesised and may itself contain spaces or parentheses.
    return stat.rsplit(")", 1)[1].split()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`.

    Zombies are ignored on purpose: orphans are reaped by PID 1, and whether that happens
    promptly depends on the machine's init, not on our teardown.
    """
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat_fields(entry)
            if f is not None and int(f[2]) == pgid and f[0] != "Z":
                out.append(int(entry))
    return out


def pgid_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks since boot), or None when there is no such pid."""
    f = _stat_fields(pid)
    return None if f is None else int(f[19])  # field 22 of stat(5)


def group_is_ours(pgid: int, leader_start: int) -> bool:
    """Is process group `pgid` still the one whose leader started at `leader_start`?

    Linux never hands out a PID that is still in use as a process-group ID, so: if a process
    with PID `pgid` exists it must be our leader (same start time) or the group is gone and the
    number was reused; if it does not exist, any member still carrying `pgid` is ours.
    """
    current = start_time(pgid)
    if current is not None and current != leader_start:
        return False
    return pgid_alive(pgid)


def stop_group(pgid: int, grace: float, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM the whole group, give it `grace` seconds, then SIGKILL what is left.

    `reap` (e.g. Popen.poll) collects our own child so it does not linger as a zombie.
    """
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            if not pgid_alive(pgid):
                return
            time.sleep(0.1)


@dataclass
class Component:
    """One control-plane process: its argv, log file and (once started) its Popen."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started: int = 0

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            # A new session makes the component the leader of its own process group, so teardown
            # can signal it and anything it forked in one call, and Ctrl-C on pytest does not hit
            # it before the fixture's orderly shutdown.
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                         start_new_session=True)
        self.started = start_time(self.proc.pid) or 0

    def alive(self) -> bool:
        """Anything of this component's process group still running (after stop)."""
        return self.proc is not None and group_is_ours(self.pgid, self.started)

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None or group_is_ours(self.pgid, self.started):
            stop_group(self.pgid, grace, self.proc.poll)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # unkillable (D state): reported by the leak check
            pass
