"""One thread per pod: the kubelet's pod worker, with containers as local process groups."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .context import NodeContext
from .envvars import EnvError, ObjectCache, build_env, expand
from .kube import ApiError, Obj, pod_path
from .probes import ProbeState, run_probe
from .volumes import Volume, VolumeBuilder, VolumeNotReady, ensure_file, mounts_for

log = logging.getLogger("processnode.pod")

_PYTHON = re.compile(r"python(3(\.\d+)?)?")
MAX_BACKOFF = 300.0
BACKOFF_RESET_AFTER = 600.0  # the kubelet forgets a crash loop after 10 minutes of running
TERM_MSG_BYTES = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tail(path: Path, lines: int, limit: int) -> str:
    try:
        data = path.read_bytes()[-64 * 1024:]
    except OSError:
        return ""
    text = "\n".join(data.decode(errors="replace").splitlines()[-lines:])
    return text[-limit:]


@dataclass
class ContainerRun:
    spec: Obj
    init: bool
    restart_count: int = 0
    proc: subprocess.Popen[bytes] | None = None  # the current attempt, None once its exit is handled
    pid: int | None = None                        # last attempt's pid (the "container ID")
    started_mono: float = 0.0
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    ready: bool = False
    done: bool = False           # terminated and will not be restarted
    next_start: float = 0.0      # monotonic time before which a restart is held back
    backoff: float = 0.0
    exit_code: int | None = None
    readiness: ProbeState = field(default_factory=ProbeState)
    liveness: ProbeState = field(default_factory=ProbeState)
    kill_deadline: float | None = None
    log_path: Path | None = None
    term_path: Path | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> Obj:
        st: Obj = {"name": self.name, "image": self.spec.get("image", ""),
                   "imageID": f"processnode://{self.spec.get('image', '')}",
                   "ready": self.ready, "restartCount": self.restart_count,
                   "started": self.running, "state": self.state, "lastState": self.last_state}
        if self.pid is not None:
            st["containerID"] = f"processnode://{self.pid}"
        return st


class PodWorker(threading.Thread):
    def __init__(self, ctx: NodeContext, pod: Obj) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.ctx = ctx
        self.pod = pod
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.key = f"{self.ns}/{self.pod_name}"
        self._cv = threading.Condition()
        self._gone = False           # the API object no longer exists
        self._shutdown = False       # the node itself is stopping
        self.ip = ""
        self.pod_dir = ctx.workdir / "pods" / f"{self.ns}_{self.pod_name}_{self.uid[:8]}"
        self.start_time = now_iso()
        self.volumes: dict[str, Volume] = {}
        self.inits = [ContainerRun(c, True) for c in pod["spec"].get("initContainers", [])]
        self.mains = [ContainerRun(c, False) for c in pod["spec"]["containers"]]
        self.initialized = not self.inits
        self.phase = "Pending"
        self._reported: Obj | None = None
        self._cond_times: dict[str, tuple[str, str]] = {}

    # ---- events from the node ----------------------------------------------------------
    def update(self, pod: Obj) -> None:
        with self._cv:
            self.pod = pod
            self._cv.notify_all()

    def gone(self) -> None:
        with self._cv:
            self._gone = True
            self._cv.notify_all()

    def shutdown(self) -> None:
        with self._cv:
            self._shutdown = True
            self._cv.notify_all()

    def _sleep(self, seconds: float) -> None:
        with self._cv:
            if not self._terminating():
                self._cv.wait(seconds)

    def _terminating(self) -> bool:
        return self._gone or self._shutdown or bool(self.pod["metadata"].get("deletionTimestamp"))

    # ---- main ----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a bug in one pod must not take the node down
            log.exception("pod %s: worker crashed; killing its processes", self.key)
            self._kill_all(grace=0)
        finally:
            self.ctx.forget(self.uid, self)

    def _run(self) -> None:
        if self._terminating():  # deleted before we ever started it
            self._finalize()
            return
        if self.pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            # Terminal before we saw it (e.g. the node restarted): nothing to run.
            self.phase = self.pod["status"]["phase"]
            self._wait_and_finalize()
            return
        self.ip = self.ctx.allocate_ip()
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self._report()
        if not self._prepare_volumes():
            self._finalize()
            return
        for c in self.inits:
            if not self._run_init(c):
                if self._terminating():
                    self._finalize()
                    return
                self.phase = "Failed"
                self._report()
                self._wait_and_finalize()
                return
        self.initialized = True
        self._main_loop()

    def _prepare_volumes(self) -> bool:
        builder = VolumeBuilder(self.ctx.kube, self.ctx.workdir, self.pod, self.pod_dir)
        while not self._terminating():
            try:
                self.volumes = builder.build()
                return True
            except (VolumeNotReady, ApiError) as e:
                msg = f"MountVolume.SetUp failed: {e}"
                log.info("pod %s: %s (retrying)", self.key, msg)
                for c in self.inits[:1] + self.mains:
                    c.state = {"waiting": {"reason": "ContainerCreating", "message": msg[:1000]}}
                self._report()
                self._sleep(2.0)
        return False

    def _run_init(self, c: ContainerRun) -> bool:
        while not self._terminating():
            self._poll(c)
            if c.proc is None and time.monotonic() >= c.next_start and c.exit_code is None:
                self._start(c)
            if c.exit_code == 0:
                return True
            if c.exit_code is not None:
                if self._policy() == "Never":
                    return False
                self._schedule_restart(c)
            self._report()
            self._sleep(0.5)
        return False

    def _main_loop(self) -> None:
        while not self._terminating():
            now = time.monotonic()
            for c in self.mains:
                self._poll(c)
                if c.exit_code is not None and not c.done:
                    policy = self._policy()
                    if policy == "Always" or (policy == "OnFailure" and c.exit_code != 0):
                        self._schedule_restart(c)
                    else:
                        c.done = True
                if c.proc is None and not c.done and c.exit_code is None and now >= c.next_start:
                    self._start(c)
                if c.running:
                    self._probes(c, now)
            self.phase = self._phase()
            self._report()
            if all(c.done for c in self.mains):
                break
            self._sleep(0.5)
        self._wait_and_finalize()

    def _policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    def _phase(self) -> str:
        if not self.initialized:
            return "Pending"
        if all(c.done for c in self.mains):
            return "Succeeded" if all(c.exit_code == 0 for c in self.mains) else "Failed"
        if any(c.running or c.restart_count or c.exit_code is not None for c in self.mains):
            return "Running"
        return "Pending"

    # ---- containers ----------------------------------------------------------------------
    def _base_env(self) -> dict[str, str]:
        """What the image and the kubelet put in every container before the pod's own env."""
        port = str(self.ctx.apiserver_port)
        venv_bin = str(Path(self.ctx.python).parent)
        env = {
            "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": self.pod["spec"].get("hostname") or self.pod_name[:63],
            # A real container's home is inside its own file system; /tmp is the private one here.
            "HOME": "/tmp",
            # What a Python image's Dockerfile typically sets; the second also keeps pods from
            # writing bytecode into the working tree they run from.
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            # The kubelet always injects the `kubernetes` Service variables; they point at the
            # API server's real loopback address so in-cluster config works unchanged.
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://127.0.0.1:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": "127.0.0.1",
        }
        env.update(self.ctx.image_env)
        return env

    def _argv(self, c: ContainerRun, env: dict[str, str]) -> list[str]:
        spec = c.spec
        command = list(spec.get("command") or [])
        args = list(spec.get("args") or [])
        if not command:
            image = spec.get("image", "")
            entry = next((v for k, v in self.ctx.entrypoints.items() if image.startswith(k)), None)
            if entry is None:
                raise EnvError(f"container {c.name} has no command and image {image!r} has no "
                               "entrypoint configured (GRAPPA_PROCESSNODE_ENTRYPOINTS)")
            command = list(entry)
        argv = [expand(a, env) for a in command + args]
        if _PYTHON.fullmatch(os.path.basename(argv[0])):
            # The "image" is the repo's own virtualenv: pods run the product's entry points.
            argv[0] = self.ctx.python
        return argv

    def _start(self, c: ContainerRun) -> None:
        pod = self.pod
        try:
            base = self._base_env()
            env = build_env(pod_with_ip(pod, self.ip), c.spec, base,
                            ObjectCache(self.ctx.kube, self.ns), self.ctx.allocatable)
            # Only values the pod spelled out (literals, ConfigMap/Secret data) are subject to
            # "DNS": HOSTNAME or a downward-API POD_NAME is the pod's own name even when a
            # Service of the same name exists.
            downward = {e["name"] for e in c.spec.get("env", [])
                        if {"fieldRef", "resourceFieldRef"} & set(e.get("valueFrom", {}))}
            own = ({e["name"] for e in c.spec.get("env", [])} | (set(env) - set(base))) - downward
            ours = f"{self.ctx.repo}/trainer:{self.ctx.repo}/operator"
            env["PYTHONPATH"] = ours + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env = self.ctx.resolver.rewrite_env(env, pod, self._terminating, only=own)
            argv = self._argv(c, env)
        except (EnvError, ApiError) as e:
            log.warning("pod %s container %s: %s", self.key, c.name, e)
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)[:1000]}}
            c.next_start = time.monotonic() + 2.0
            return
        if self._terminating():
            return
        run = self.pod_dir / "run"
        run.mkdir(parents=True, exist_ok=True)
        attempt = f"{c.name}-{c.restart_count}"
        hosts = run / f"{attempt}.hosts"
        hosts.write_text(self.ctx.resolver.hosts_file(pod, self.ip))
        c.term_path = ensure_file(run / f"{attempt}.termination-log")
        tmp = self.pod_dir / "tmp" / c.name
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        mounts: list[dict[str, Any]] = [
            {"source": str(tmp), "target": "/tmp"},
            {"source": str(hosts), "target": "/etc/hosts"},
            {"source": str(c.term_path),
             "target": c.spec.get("terminationMessagePath") or "/dev/termination-log"},
        ]
        mounts += mounts_for(c.spec, self.volumes, env)
        root = self.pod_dir / "rootfs" / attempt
        root.mkdir(parents=True, exist_ok=True)
        hostname = pod["spec"].get("hostname") or self.pod_name[:63]
        spec = {"root": str(root), "hostname": hostname, "mounts": mounts,
                "workingDir": c.spec.get("workingDir") or "/", "argv": argv, "env": env,
                "hide": [str(h) for h in self.ctx.hide]}
        spec_file = run / f"{attempt}.json"
        spec_file.write_text(json.dumps(spec, indent=1))
        c.log_path = self.pod_dir / "logs" / c.name / f"{c.restart_count}.log"
        c.log_path.parent.mkdir(parents=True, exist_ok=True)
        latest = self.ctx.workdir / "logs" / f"{self.ns}_{self.pod_name}_{c.name}.log"
        latest.parent.mkdir(parents=True, exist_ok=True)
        latest.unlink(missing_ok=True)
        latest.symlink_to(c.log_path)
        with open(c.log_path, "ab") as out:
            c.proc = subprocess.Popen(
                [self.ctx.python, "-m", "processnode.sandbox", str(spec_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
                env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": env["PATH"]},
                start_new_session=True)
        c.pid = c.proc.pid
        self.ctx.record_pgid(c.proc.pid, f"{self.key}/{c.name}")
        c.started_mono = time.monotonic()
        c.exit_code = None
        c.kill_deadline = None
        c.readiness, c.liveness = ProbeState(), ProbeState()
        c.ready = not c.init and "readinessProbe" not in c.spec
        c.state = {"running": {"startedAt": now_iso()}}
        log.info("pod %s: started %s pid %d: %s", self.key, c.name, c.proc.pid, " ".join(argv))

    def _poll(self, c: ContainerRun) -> None:
        if c.proc is None:
            return
        if c.kill_deadline is not None and time.monotonic() > c.kill_deadline:
            _signal_group(c.proc.pid, signal.SIGKILL)
        rc = c.proc.poll()
        if rc is None:
            return
        # The container's main process is gone: like a runtime tearing down the container's
        # cgroup, make sure nothing it forked survives.
        _signal_group(c.proc.pid, signal.SIGKILL)
        c.proc = None
        code = rc if rc >= 0 else 128 - rc
        c.exit_code = code
        c.ready = False
        term: Obj = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                     "startedAt": c.state.get("running", {}).get("startedAt", now_iso()),
                     "finishedAt": now_iso(), "containerID": f"processnode://{c.pid}"}
        msg = ""
        if c.term_path is not None:
            try:
                msg = c.term_path.read_bytes()[:TERM_MSG_BYTES].decode(errors="replace")
            except OSError:
                msg = ""
        if (not msg and code != 0 and c.log_path is not None
                and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"):
            msg = _tail(c.log_path, FALLBACK_LINES, FALLBACK_BYTES)
        if msg:
            term["message"] = msg
        c.state = {"terminated": term}
        log.info("pod %s: container %s exited with %d", self.key, c.name, code)

    def _schedule_restart(self, c: ContainerRun) -> None:
        """CrashLoopBackOff: restart at once the first time, then 10s, 20s, ... up to 5 min."""
        if time.monotonic() - c.started_mono > BACKOFF_RESET_AFTER:
            c.backoff = 0.0
        delay = c.backoff
        c.backoff = self.ctx.backoff_base if c.backoff == 0 else min(2 * c.backoff, MAX_BACKOFF)
        c.last_state = c.state
        c.restart_count += 1
        c.exit_code = None
        c.next_start = time.monotonic() + delay
        if delay > 0:
            c.state = {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": f"back-off {delay:.0f}s restarting failed container="
                                              f"{c.name} pod={self.pod_name}"}}

    def _probes(self, c: ContainerRun, now: float) -> None:
        assert c.proc is not None
        for kind, state in (("readinessProbe", c.readiness), ("livenessProbe", c.liveness)):
            probe = c.spec.get(kind)
            if not probe or now < c.started_mono + probe.get("initialDelaySeconds", 0) or now < state.next_due:
                continue
            state.next_due = now + probe.get("periodSeconds", 10)
            if run_probe(probe, self.ip, c.spec):
                state.successes, state.failures = state.successes + 1, 0
            else:
                state.successes, state.failures = 0, state.failures + 1
            if kind == "readinessProbe":
                if state.successes >= probe.get("successThreshold", 1):
                    c.ready = True
                elif state.failures >= probe.get("failureThreshold", 3):
                    c.ready = False
            elif state.failures >= probe.get("failureThreshold", 3) and c.kill_deadline is None:
                log.info("pod %s: liveness probe of %s failed; killing it", self.key, c.name)
                _signal_group(c.proc.pid, signal.SIGTERM)
                c.kill_deadline = now + self._grace()

    # ---- status --------------------------------------------------------------------------
    def _condition(self, ctype: str, ok: bool, reason: str | None = None) -> Obj:
        status = "True" if ok else "False"
        prev = self._cond_times.get(ctype)
        if prev is None or prev[0] != status:
            self._cond_times[ctype] = (status, now_iso())
        cond: Obj = {"type": ctype, "status": status, "lastProbeTime": None,
                     "lastTransitionTime": self._cond_times[ctype][1]}
        # null deletes a stale reason under strategic merge (conditions merge by type).
        cond["reason"] = reason if reason and not ok else None
        return cond

    def _status(self) -> Obj:
        ready = self.initialized and all(c.ready for c in self.mains)
        terminal = self.phase in ("Succeeded", "Failed")
        conditions = [
            self._condition("PodReadyToStartContainers", not terminal),
            self._condition("Initialized", self.initialized, "ContainersNotInitialized"),
            self._condition("Ready", ready, "PodCompleted" if terminal else "ContainersNotReady"),
            self._condition("ContainersReady", ready, "PodCompleted" if terminal else "ContainersNotReady"),
            self._condition("PodScheduled", True),
        ]
        status: Obj = {"phase": self.phase, "conditions": conditions,
                       "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                       "startTime": self.start_time,
                       "containerStatuses": [c.status() for c in self.mains]}
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        if self.inits:
            if not self.initialized:
                for c in self.mains:
                    if "waiting" in c.state:
                        c.state = {"waiting": {"reason": "PodInitializing"}}
            status["initContainerStatuses"] = [c.status() for c in self.inits]
        return status

    def _report(self) -> None:
        if self._gone or self._shutdown:
            return
        status = self._status()
        if status == self._reported:
            return
        try:
            self.ctx.kube.patch(pod_path(self.ns, self.pod_name, "status"),
                                {"metadata": {"uid": self.uid}, "status": status})
            self._reported = status
        except ApiError as e:
            if e.status in (404, 409):
                log.info("pod %s: gone while reporting status", self.key)
            else:
                log.warning("pod %s: status update failed: %s", self.key, e)

    # ---- termination ---------------------------------------------------------------------
    def _grace(self) -> float:
        meta = self.pod["metadata"]
        g = meta.get("deletionGracePeriodSeconds")
        if g is None:
            g = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(g)

    def _kill_all(self, grace: float) -> None:
        running = [c for c in self.inits + self.mains if c.running]
        for c in running:
            if c.proc is not None:
                _signal_group(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(c.running for c in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        for c in running:
            proc = c.proc
            if proc is None:
                continue
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("pod %s: container %s (pid %d) did not die", self.key, c.name, proc.pid)
            self._poll(c)

    def _wait_and_finalize(self) -> None:
        with self._cv:
            while not self._terminating():
                self._cv.wait(30)
        self._finalize()

    def _finalize(self) -> None:
        if self._shutdown:
            self._kill_all(grace=min(self._grace(), 5.0))
            return
        self._kill_all(self._grace())
        for c in self.inits + self.mains:
            if c.pid is not None:
                c.done = True
        if self.phase not in ("Succeeded", "Failed") and self.initialized and any(
                c.pid is not None for c in self.mains):
            ok = all(c.exit_code == 0 for c in self.mains)
            self.phase = "Succeeded" if ok else "Failed"
        self._report()
        if not self._gone:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": self.uid}}
            try:
                self.ctx.kube.request("DELETE", pod_path(self.ns, self.pod_name), body)
            except ApiError as e:
                if e.status not in (404, 409):
                    log.warning("pod %s: final delete failed: %s", self.key, e)
        log.info("pod %s: finalized", self.key)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pod_with_ip(pod: Obj, ip: str) -> Obj:
    """The pod as the downward API sees it once the sandbox has its IP."""
    status = dict(pod.get("status", {}))
    status.update({"podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
                   "hostIPs": [{"ip": "127.0.0.1"}]})
    return dict(pod, status=status)

