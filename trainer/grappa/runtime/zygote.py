"""Local ranks forked from one process that has loaded torch and the ranks' code once.

A rank started as `python -m grappa worker` spends seconds of CPU importing torch (and PyG, for a
user's model) before it does anything: P + 1 times a job, at every start and resume. The
launcher instead starts one zygote, which imports them once and then forks each rank, which
runs exactly what `python -m MODULE ARGS` would run, with its own environment, log, session and
exit code. The zygote does nothing but import, so no thread, lock or OpenMP pool of a
computation is copied into a rank. Ranks that run elsewhere (a network namespace's prefix) and
`GRAPPA_FORK_RANKS=0` start fresh interpreters instead.

`grappa train` saves one more interpreter: its launcher imports what the ranks need and forks the
zygote itself (`Zygote.forked_here`) before it computes anything, when it is clean to fork (a
test runner or a notebook, with threads of its own, starts a fresh zygote instead).

Protocol (the launcher's pipes): the zygote says `ready`; each request is one JSON line
`{"argv": ["-m", MODULE, ARGS...], "env": {...}, "log": PATH}`, answered `pid N`, or
`{"stderr": PATH}` (unanswered: its own messages go there from now on); when a rank
ends, `exit N CODE` (CODE as subprocess gives it: -S for signal S). When the launcher goes (its
pipe closes) the zygote sends SIGTERM to the ranks still running and exits; each rank also gets
SIGTERM when the zygote dies, and the zygote when the launcher dies, even by SIGKILL.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Optional

FORK_ENV = "GRAPPA_FORK_RANKS"  # "0": fresh interpreters, as on Kubernetes (for debugging)


def forking_enabled() -> bool:
    return os.environ.get(FORK_ENV, "1") != "0" and hasattr(os, "fork") and sys.platform.startswith("linux")


def die_with(parent: int):
    """A hook for a child: it gets SIGTERM when `parent` dies, even by SIGKILL, which no `finally`
    can catch (Linux only). A child in its own session is safe from the terminal's Ctrl-C, so this
    is its only tie to the launcher. prctl is looked up here, before the fork: the child should do
    as little as possible between fork and exec."""
    try:
        prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        prctl = None

    def hook() -> None:
        if prctl is None:
            return
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent was already gone before prctl
            os.kill(os.getpid(), signal.SIGTERM)
    return hook


def signal_group(pid: int, sig: int) -> None:
    """A rank and what it started (its own session); a rank forked a moment ago may not have
    made its session yet, and then it has started nothing either."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# ---- the launcher's side ----------------------------------------------------------------------

class Forked:
    """A rank the zygote forked, used as a subprocess.Popen is (pid, poll, wait, returncode)."""

    def __init__(self, zygote: "Zygote", pid: int) -> None:
        self.zygote, self.pid = zygote, pid

    @property
    def returncode(self) -> Optional[int]:
        return self.zygote.codes.get(self.pid)

    def poll(self) -> Optional[int]:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # ended, its exit not reported yet
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: Optional[float] = None) -> int:
        with self.zygote.changed:
            if not self.zygote.changed.wait_for(lambda: self.pid in self.zygote.codes, timeout):
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
        return self.zygote.codes[self.pid]


class Zygote:
    """The launcher's handle: `start(argv, env, log)` forks a rank and returns its Forked."""

    def __init__(self, env: dict[str, str], preload: list[str], log: Optional[Path],
                 proc: Optional[object] = None) -> None:
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self._started: list[int] = []
        self._pids: queue.Queue[Optional[int]] = queue.Queue()
        if proc is None:
            with open(log, "ab") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "grappa.runtime.zygote", *preload], env=env, stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
                    preexec_fn=die_with(os.getpid()))
        self.proc = proc
        if self.proc.stdout.readline() != "ready\n":
            self.proc.wait()
            raise RuntimeError(f"the zygote that forks the ranks exited with code {self.proc.returncode} "
                               "before it was ready" + (f"; its log: {log}" if log else ""))
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    @classmethod
    def forked_here(cls, preload: list[str]) -> Optional["Zygote"]:
        """A zygote forked from this process once it has imported `preload` itself, so that a
        launcher which needs torch anyway (to prepare a graph) does not pay for it twice. None when
        forking is off or this process is not clean to fork (a test runner's, a notebook's, one
        that has run torch already)."""
        if not (forking_enabled() and clean_to_fork()):
            return None
        _preload(preload, quiet=True)  # what fails to import fails again in the rank that needs it
        return cls({}, [], None, proc=_ForkedZygote())

    def log_to(self, path: Path) -> None:
        """Where the zygote's own messages go (a forked one starts with /dev/null)."""
        self.proc.stdin.write(json.dumps({"stderr": str(path)}) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, *fields = line.split()
            if kind == "pid":
                self._pids.put(int(fields[0]))
            elif kind == "exit":
                with self.changed:
                    self.codes[int(fields[0])] = int(fields[1])
                    self.changed.notify_all()
        # The zygote is gone: its ranks got SIGTERM with it (PR_SET_PDEATHSIG), unreported.
        self._pids.put(None)
        with self.changed:
            for pid in self._started:
                self.codes.setdefault(pid, -signal.SIGTERM)
            self.changed.notify_all()

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> Forked:
        if argv[:1] != ["-m"] or len(argv) < 2:
            raise ValueError(f"the zygote runs `-m MODULE ARGS...`, not {argv}")
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "log": str(log)}) + "\n")
            self.proc.stdin.flush()
            pid = self._pids.get()
        except (BrokenPipeError, ValueError):  # ValueError: its pipe is closed already
            pid = None
        if pid is None:
            raise RuntimeError(f"the zygote exited (code {self.proc.wait()}) instead of starting {argv}")
        self._started.append(pid)
        return Forked(self, pid)

    def close(self) -> None:
        """Ends the zygote once the ranks are done (any still running get SIGTERM from it)."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def clean_to_fork() -> bool:
    """No other Python thread runs here (a fork copies only the calling thread: a lock another
    one holds, the import lock or a logging handler's, would stay locked in every rank), and
    torch is not loaded yet (its OpenMP pool, once used, does not survive a fork). The pools
    that handle a fork themselves may run: OpenBLAS's, which numpy starts when it loads."""
    return threading.active_count() == 1 and "torch" not in sys.modules


class _ForkedZygote:
    """The zygote as a fork of the launcher, used as the Popen of `python -m grappa.runtime.zygote`
    is (stdin, stdout, wait, kill, returncode). The child is made what that interpreter would be:
    its own session, tied to the launcher, the launcher's signal handlers and logging undone."""

    def __init__(self) -> None:
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        tie = die_with(os.getpid())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                tie()
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(requests_r, 0)
                os.dup2(replies_w, 1)
                os.dup2(null, 2)  # until log_to() names the zygote's log
                for fd in {requests_r, requests_w, replies_r, replies_w, null} - {0, 1, 2}:
                    os.close(fd)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                import logging
                root = logging.getLogger()
                for handler in root.handlers[:]:  # each rank configures its own (roles._setup)
                    root.removeHandler(handler)
                root.setLevel(logging.WARNING)
                serve([])
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(requests_r)
        os.close(replies_w)
        self.pid = pid
        self.returncode: Optional[int] = None
        self.stdin = os.fdopen(requests_w, "w")
        self.stdout = os.fdopen(replies_r, "r")

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout)
            else:
                time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _preload(names: list[str], quiet: bool = False) -> None:
    # PyG touches torch.jit.script at import time (as grappa/__main__.py says)
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated", category=FutureWarning)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the rank that needs it will fail with its own error
            if not quiet:
                print(f"zygote: could not preload {name}: {err}", file=sys.stderr, flush=True)


# ---- the zygote's side ------------------------------------------------------------------------

def _run_rank(request: dict, tie, protocol: int) -> None:
    """In the forked child: become `python -m MODULE ARGS` with the request's env and log."""
    import atexit
    import runpy
    code = 1
    try:
        os.setsid()
        tie()
        os.close(protocol)  # the launcher's pipe is the zygote's alone: it ends when the zygote does
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        for name in ("sitecustomize", "usercustomize"):  # what an interpreter runs at start-up, now
            if name in sys.modules:                      # with the rank's environment (RANK, ...)
                importlib.reload(sys.modules[name])
        module = request["argv"][1]
        sys.argv = [module, *request["argv"][2:]]  # runpy puts the module's file in argv[0]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            code = end.code or 0
        else:
            print(end.code, file=sys.stderr)
    except BaseException:  # what the interpreter would print, and its exit code
        traceback.print_exc()
    finally:
        try:  # as an interpreter ends: non-daemon threads joined, atexit handlers run, output flushed
            for thread in threading.enumerate():
                if thread is not threading.current_thread() and not thread.daemon:
                    thread.join()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(preload: list[str]) -> None:
    # The protocol gets stdout's pipe to itself; whatever else prints (an import, a user's
    # sitecustomize) goes to the zygote's log with stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    _preload(preload)
    tie = die_with(os.getpid())
    out.write("ready\n")
    out.flush()
    running: set[int] = set()
    pending = b""
    open_ = True
    while open_ or running:
        if open_:
            readable, _, _ = select.select([0], [], [], 0.1)
            if readable:
                data = os.read(0, 65536)
                if not data:  # the launcher is done, or gone
                    open_ = False
                    for pid in running:
                        signal_group(pid, signal.SIGTERM)
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    for stream in (out, sys.stdout, sys.stderr):  # nothing buffered is written twice
                        stream.flush()
                    if "stderr" in request:
                        fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                        os.dup2(fd, 2)
                        os.dup2(fd, 1)  # where serve() sent stdout
                        os.close(fd)
                        continue
                    pid = os.fork()
                    if pid == 0:
                        _run_rank(request, tie, out.fileno())
                    running.add(pid)
                    out.write(f"pid {pid}\n")
                    out.flush()
        else:
            select.select([], [], [], 0.1)
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                running.clear()
                break
            if pid == 0:
                break
            running.discard(pid)
            if open_:
                try:
                    out.write(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n")
                    out.flush()
                except BrokenPipeError:
                    open_ = False


if __name__ == "__main__":  # python -m grappa.runtime.zygote MODULE...
    serve(sys.argv[1:])
