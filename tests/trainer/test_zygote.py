"""runtime/zygote.py: a forked rank behaves as `python -m MODULE ARGS` would (its argv, env, log,
session and exit code), and none outlives the launcher's side or the zygote."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grappa.runtime.zygote import Zygote

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}"}
RANK = '''
import os, sys, time
print("argv", sys.argv[1:], "rank", os.environ.get("RANK"), "own session", os.getsid(0) == os.getpid(),
      "preloaded", "json" in sys.modules, flush=True)
what = sys.argv[1]
if what == "exit":
    sys.exit(int(sys.argv[2]))
if what == "raise":
    raise ValueError("the user's line")
if what == "sleep":
    time.sleep(600)
'''


@pytest.fixture
def zygote(tmp_path: Path):
    (tmp_path / "ranky.py").write_text(RANK)
    env = {**ENV, "PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    z = Zygote(env, ["json", "no_such_module_to_preload"], tmp_path / "zygote.log")
    yield z, env
    z.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def wait_gone(pid: int, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def test_a_forked_rank_is_the_module_run_with_its_own_env_log_session_and_code(zygote, tmp_path):
    z, env = zygote
    ok = z.start(["-m", "ranky", "exit", "0"], {**env, "RANK": "1"}, tmp_path / "r1.log")
    code = z.start(["-m", "ranky", "exit", "3"], {**env, "RANK": "2"}, tmp_path / "r2.log")
    raised = z.start(["-m", "ranky", "raise"], env, tmp_path / "r3.log")
    assert (ok.wait(60), code.wait(60), raised.wait(60)) == (0, 3, 1)
    assert (tmp_path / "r1.log").read_text() == "argv ['exit', '0'] rank 1 own session True preloaded True\n"
    assert (tmp_path / "r2.log").read_text().startswith("argv ['exit', '3'] rank 2 ")
    assert "ValueError: the user's line" in (tmp_path / "r3.log").read_text()  # the traceback, as python prints it
    assert "could not preload no_such_module_to_preload" in (tmp_path / "zygote.log").read_text()
    with pytest.raises(ValueError, match="MODULE"):
        z.start(["ranky.py"], env, tmp_path / "r4.log")


def test_a_signalled_rank_reports_the_signal_as_subprocess_does(zygote, tmp_path):
    z, env = zygote
    rank = z.start(["-m", "ranky", "sleep"], env, tmp_path / "r.log")
    assert rank.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        rank.wait(0.2)
    os.killpg(rank.pid, signal.SIGKILL)  # its own process group: what the launcher signals
    assert rank.wait(60) == -signal.SIGKILL and rank.returncode == -signal.SIGKILL


def test_closing_the_launchers_side_ends_the_ranks_still_running(zygote, tmp_path):
    z, env = zygote
    rank = z.start(["-m", "ranky", "sleep"], env, tmp_path / "r.log")
    z.close()
    assert wait_gone(rank.pid) and z.proc.returncode == 0


def test_ranks_die_with_the_zygote_and_their_codes_say_so(zygote, tmp_path):
    z, env = zygote
    rank = z.start(["-m", "ranky", "sleep"], env, tmp_path / "r.log")
    z.proc.kill()  # even SIGKILL: each rank gets SIGTERM (PR_SET_PDEATHSIG)
    assert wait_gone(rank.pid)
    assert rank.wait(60) == -signal.SIGTERM
    with pytest.raises(RuntimeError, match="the zygote exited"):
        z.start(["-m", "ranky", "exit", "0"], env, tmp_path / "late.log")


def test_a_zygote_that_cannot_start_says_where_its_log_is(tmp_path):
    env = {**os.environ, "PYTHONPATH": "/nonexistent"}  # grappa.runtime.zygote itself cannot import
    with pytest.raises(RuntimeError, match=r"exited with code 1 before it was ready; its log: .*zygote.log"):
        Zygote(env, [], tmp_path / "zygote.log")
    assert "No module named 'grappa'" in (tmp_path / "zygote.log").read_text()


def test_fresh_interpreters_on_request(monkeypatch):
    """GRAPPA_FORK_RANKS=0 starts each rank as a fresh interpreter, as a pod is (a forked job trains
    as the in-process simulation does: test_local_runs.py)."""
    from grappa.runtime.zygote import FORK_ENV, forking_enabled
    monkeypatch.setenv(FORK_ENV, "0")
    assert not forking_enabled()
    monkeypatch.setenv(FORK_ENV, "1")
    assert forking_enabled()


def test_what_an_import_prints_goes_to_the_log_not_into_the_protocol(tmp_path):
    (tmp_path / "noisy.py").write_text("print('ready')\nprint('pid 1')\n")
    (tmp_path / "ranky.py").write_text(RANK)
    env = {**ENV, "PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    z = Zygote(env, ["noisy"], tmp_path / "zygote.log")
    try:
        assert z.start(["-m", "ranky", "exit", "0"], env, tmp_path / "r.log").wait(60) == 0
    finally:
        z.close()
    assert (tmp_path / "zygote.log").read_text() == "ready\npid 1\n"


LAUNCHER = '''
import json, os, sys, threading, time
from grappa.runtime.zygote import Zygote
how = sys.argv[1]
if how == "thread":
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
if how == "torch":
    import torch
z = Zygote.forked_here(["json"])
if z is None:
    print(json.dumps(None), flush=True)
    sys.exit(0)
z.log_to(sys.argv[2] + "/zygote.log")
rank = z.start(["-m", "ranky", "sleep" if how == "killed" else "exit", "0"], {**os.environ, "RANK": "1"},
               sys.argv[2] + "/r.log")
print(json.dumps({"zygote": z.proc.pid, "rank": rank.pid}), flush=True)
if how == "killed":
    time.sleep(600)
print(json.dumps({"code": rank.wait(60)}), flush=True)
z.close()
print(json.dumps({"zygote_code": z.proc.returncode}), flush=True)
'''


def run_launcher(tmp_path: Path, how: str) -> subprocess.Popen:
    (tmp_path / "ranky.py").write_text(RANK)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    env = {**ENV, "PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    return subprocess.Popen([sys.executable, str(tmp_path / "launcher.py"), how, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_a_zygote_forked_from_the_launcher_runs_ranks_as_a_fresh_one_does(tmp_path):
    launcher = run_launcher(tmp_path, "clean")
    first = json.loads(launcher.stdout.readline())
    # a fork of the launcher (its command line), not a fresh interpreter, in its own session
    zygote_cmdline = cmdline(first["zygote"])
    assert zygote_cmdline == cmdline(launcher.pid) and os.getsid(first["zygote"]) == first["zygote"]
    rest = [json.loads(line) for line in launcher.stdout]
    assert launcher.wait(60) == 0 and rest == [{"code": 0}, {"zygote_code": 0}]
    assert (tmp_path / "r.log").read_text() == "argv ['exit', '0'] rank 1 own session True preloaded True\n"
    assert (tmp_path / "zygote.log").exists()  # log_to: its messages go there from then on


@pytest.mark.parametrize("how", ["thread", "torch"])
def test_a_launcher_with_threads_or_torch_running_forks_no_zygote(tmp_path, how):
    launcher = run_launcher(tmp_path, how)
    assert launcher.stdout.read().strip() == "null" and launcher.wait(60) == 0


def test_the_forked_zygote_and_its_ranks_die_with_a_killed_launcher(tmp_path):
    launcher = run_launcher(tmp_path, "killed")
    pids = json.loads(launcher.stdout.readline())
    launcher.kill()
    launcher.wait(60)
    assert wait_gone(pids["zygote"]) and wait_gone(pids["rank"])
