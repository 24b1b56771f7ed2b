"""Helpers of the platform end-to-end tests (test_grappajob, test_rbac, test_schema_validation,
test_prometheus): helm/kubectl wrappers, the operator release, GrappaJob manifests and bounded
waits whose failure message dumps the job's status, Events, pods and logs.

Everything here talks to the cluster through kubectl/helm and, for what polls (jobs, pods,
Events), the API with the kubeconfig's own credentials (Cluster.api_get: a kubectl run costs tens
of ms of CPU), so the same code runs against the offline kind bed of `make test` and against any
cluster named by $KUBECONFIG
(GRAPPA_E2E_USE_KUBECONFIG=1, e.g. hack/kind-e2e.sh). Images: GRAPPA_E2E_OPERATOR_IMAGE and
GRAPPA_E2E_TRAINER_IMAGE (repository:tag) and, for images loaded into kind,
GRAPPA_E2E_PULL_POLICY=Never (the bed sets all three).

Session-wide objects (the operator release, the happy-path job) are cached here rather than in
conftest.py: each test module declares a thin session fixture that calls into this module, and
the first caller registers the teardown.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import yaml

import lanes
from cluster import Cluster
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "grappa"
EXAMPLE = REPO / "manifests" / "examples" / "csbm-synthetic.yaml"
GROUP, VERSION, PLURAL = "grappa.dev", "v1alpha1", "grappajobs"
RESOURCE = f"{PLURAL}.{GROUP}"
LABEL_JOB, LABEL_ROLE, LABEL_ATTEMPT = "grappa.dev/job-name", "grappa.dev/role", "grappa.dev/attempt"
# All waits scale with this (a slow CI runner or a big kind cluster: raise it).
TIMEOUT_SCALE = float(os.environ.get("GRAPPA_E2E_TIMEOUT_SCALE", "1"))
JOB_TIMEOUT = 420 * TIMEOUT_SCALE


def _split_image(ref: str) -> tuple[str, str]:
    repo, _, tag = ref.rpartition(":")
    if not repo or "/" in tag:
        return ref, ""
    return repo, tag


OPERATOR_IMAGE = os.environ.get("GRAPPA_E2E_OPERATOR_IMAGE", "")
TRAINER_IMAGE = os.environ.get("GRAPPA_E2E_TRAINER_IMAGE", "")
PULL_POLICY = os.environ.get("GRAPPA_E2E_PULL_POLICY", "IfNotPresent")


def scaled(seconds: float) -> float:
    return seconds * TIMEOUT_SCALE


# ---- helm ------------------------------------------------------------------------------------

def helm(cluster: Cluster, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([cluster.helm_bin, *args], env=cluster.env, text=True, capture_output=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@dataclass
class Release:
    name: str
    namespace: str
    values: dict[str, Any]

    @property
    def fullname(self) -> str:  # charts/grappa/templates/_helpers.tpl
        return f"{self.name}-operator" if "grappa" in self.name else f"{self.name}-grappa-operator"

    @property
    def service_account(self) -> str:
        return self.fullname

    @property
    def selector(self) -> str:
        return (f"app.kubernetes.io/name=grappa,app.kubernetes.io/instance={self.name},"
                "app.kubernetes.io/component=operator")

    def sa_user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def release_values(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Chart values for the suite: the operator image under test and a short resync."""
    # One replica (the helpers find "the" operator pod); its leader election still runs, and
    # test_operator_leader_killed_mid_job scales to two.
    values: dict[str, Any] = {"resyncSeconds": 2, "livenessProbe": {"initialDelaySeconds": 30},
                              "replicaCount": 1}
    if OPERATOR_IMAGE:
        repo, tag = _split_image(OPERATOR_IMAGE)
        values["image"] = {"repository": repo, "tag": tag or "latest", "pullPolicy": PULL_POLICY}
    if TRAINER_IMAGE:  # the default of jobs that name no image (test_pod_template)
        repo, tag = _split_image(TRAINER_IMAGE)
        values["trainerImage"] = {"repository": repo, "tag": tag or "latest"}
    if extra:
        values = _merge(values, extra)
    return values


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def helm_install(cluster: Cluster, name: str, namespace: str, values: dict[str, Any],
                 wait: bool = True) -> Release:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="grappa-values-", delete=False) as f:
        yaml.safe_dump(values, f)
    try:
        args = ["install", name, str(CHART), "-n", namespace, "--create-namespace", "-f", f.name]
        if wait:
            # helm's own readiness wait: the Deployment's pod must become Ready.
            args += ["--wait", f"--timeout={int(scaled(180))}s"]
        proc = helm(cluster, *args, check=False, timeout=scaled(240))
    finally:
        os.unlink(f.name)
    rel = Release(name, namespace, values)
    if proc.returncode != 0:
        raise AssertionError(f"helm install {name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n"
                             f"{operator_diagnostics(cluster, rel)}")
    return rel


def helm_uninstall(cluster: Cluster, rel: Release, delete_namespace: bool = True) -> None:
    helm(cluster, "uninstall", rel.name, "-n", rel.namespace, "--wait", "--timeout=120s", check=False,
         timeout=180)
    if delete_namespace:
        cluster.kubectl("delete", "namespace", rel.namespace, "--wait=false", check=False)


def operator_pods(cluster: Cluster, rel: Release) -> list[dict[str, Any]]:
    return cluster.api_items(f"/api/v1/namespaces/{rel.namespace}/pods", labels=rel.selector)


def running_operator_pod(cluster: Cluster, rel: Release) -> dict[str, Any] | None:
    """The operator pod that is Running, Ready and not being deleted, if exactly one is."""
    ready = [p for p in operator_pods(cluster, rel)
             if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    return ready[0] if len(ready) == 1 else None


def wait_operator(cluster: Cluster, rel: Release, timeout: float = 180, not_uid: str | None = None) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        p = running_operator_pod(cluster, rel)
        return p if p and p["metadata"]["uid"] != not_uid else None
    try:
        return cluster.wait_for(check, scaled(timeout), f"operator pod of release {rel.name} Running and Ready")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{operator_diagnostics(cluster, rel)}") from None


def operator_log(cluster: Cluster, rel: Release) -> str:
    out = ""
    for p in operator_pods(cluster, rel):
        name = p["metadata"]["name"]
        out += f"--- operator pod {name} ({p['status'].get('phase')}):\n"
        out += cluster.container_log(rel.namespace, name, "operator")[-6000:]
    return out


def operator_diagnostics(cluster: Cluster, rel: Release) -> str:
    out = f"=== operator release {rel.name} in {rel.namespace}\n"
    out += cluster.kubectl("get", "all", "-n", rel.namespace, "-o", "wide", check=False).stdout
    out += events_text(cluster, rel.namespace)
    for p in operator_pods(cluster, rel):
        out += cluster.describe_pod(rel.namespace, p["metadata"]["name"]) + "\n"
    return out


# ---- session-wide objects ----------------------------------------------------------------------

_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.RLock()  # make() may ask for another shared object


def shared(key: str, request: Any, make: Callable[[], Any], teardown: Callable[[Any], None] | None = None) -> Any:
    """One object per test session, whichever module's session fixture asks first (`request`
    is that fixture's request); the first caller's fixture tears it down at session end."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            obj = make()
            _SHARED[key] = obj

            def fin() -> None:
                _SHARED.pop(key, None)
                if teardown is not None:
                    teardown(obj)
            request.addfinalizer(fin)
        return _SHARED[key]


def operator_release(cluster: Cluster, request: Any) -> Release:
    """The chart installed cluster-wide (the default values) in its own namespace: once per
    session, or once for all parallel lanes (tests/lanes.py), whose controller removes it."""
    def make() -> Release:
        ns = f"grappa-e2e-{uuid.uuid4().hex[:6]}"
        crd_existed = cluster.kubectl("get", "crd", RESOURCE, check=False).returncode == 0
        rel = helm_install(cluster, "grappa-e2e", ns, release_values())
        rel.values["_crd_existed"] = crd_existed
        return rel

    if lanes.in_lane():
        return Release(**lanes.once("operator-release", lambda: asdict(make()),
                                    teardown="helpers:remove_operator_release"))
    return shared("operator-release", request, make, lambda rel: _remove_release(cluster, rel))


def _remove_release(cluster: Cluster, rel: Release) -> None:
    helm_uninstall(cluster, rel)
    if not rel.values.get("_crd_existed"):
        # helm never deletes CRDs; leave a user's cluster as we found it.
        cluster.kubectl("delete", "crd", RESOURCE, "--wait=false", check=False)


def remove_operator_release(made: dict[str, Any]) -> None:
    """The lanes' controller, after every lane is done (tests/lanes.py)."""
    _remove_release(Cluster.from_environment(), Release(**made))


# ---- GrappaJobs --------------------------------------------------------------------------------

def job_manifest(name: str, *, epochs: int = 10, rounds_every: int = 3, **spec_overrides: Any) -> dict[str, Any]:
    """The shipped csbm example, shrunk to a job that trains for well under a minute on two busy
    cores while epochs stay long enough (~1-3 s) for the operator to decide rounds between them."""
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"] = {"name": name}
    spec = job["spec"]
    spec["partitions"] = 4
    spec["dataset"]["synthetic"].update(numNodes=3000, numClasses=4, numFeatures=16, avgDegree=8)
    spec["model"].update(arch="sage", layers=2, hidden=16)
    spec["training"].update(mode="mini-batch", epochs=epochs, batchSize=8, fanouts=[5, 5])
    spec["grappa"]["rounds"] = {"every": rounds_every}
    spec["checkpoint"] = {"interval": 1}
    # A claim works on every cluster (kind: its local-path provisioner).
    spec["storage"] = {"claimName": "grappa-data"}
    spec["runPolicy"] = {"backoffLimit": 2}
    pod: dict[str, Any] = {
        # 50m -> GRAPPA_THREADS=1: one torch thread per pod. Small, so that the jobs of three
        # parallel lanes fit the bed's 2-CPU node beside the ~900m its system pods request.
        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}},
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
    }
    if TRAINER_IMAGE:
        pod.update(image=TRAINER_IMAGE, imagePullPolicy=PULL_POLICY)
    spec["aggregator"] = copy.deepcopy(pod)
    spec["worker"] = copy.deepcopy(pod)
    for k, v in spec_overrides.items():
        spec[k] = _merge(spec[k], v) if isinstance(v, dict) and isinstance(spec.get(k), dict) else v
    return job


def storage_claim(name: str = "grappa-data") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


def apply_file(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`kubectl apply -f FILE`, as a user would."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="grappajob-", delete=False) as f:
        yaml.safe_dump(obj, f)
    try:
        return cluster.kubectl("apply", "-n", namespace, "-f", f.name)
    finally:
        os.unlink(f.name)


def get_job(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    """The job, or None when it does not exist or the API did not answer (a wait polls again)."""
    return cluster.api_get_or_none(f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}")


def job_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    selector = quote(f"{LABEL_JOB}={name}", safe="")
    found = cluster.api_get(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")
    return (found or {}).get("items", [])


def events(cluster: Cluster, ns: str, kind: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    sel = []
    if kind:
        sel.append(f"involvedObject.kind={kind}")
    if name:
        sel.append(f"involvedObject.name={name}")
    items = cluster.api_items(f"/api/v1/namespaces/{ns}/events", fields=",".join(sel) or None)
    return sorted(items, key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "",
                                        e["metadata"].get("creationTimestamp", "")))


def job_warnings(cluster: Cluster, ns: str, name: str, match: Callable[[dict[str, Any]], bool],
                 what: str) -> list[dict[str, Any]]:
    """The job's Warning Events, once one that `match`es is listed: the operator posts an Event
    after the status write it reports, so a test that has seen the status can be early (more so
    while other lanes keep the operator busy)."""
    def listed() -> list[dict[str, Any]] | None:
        warn = [e for e in events(cluster, ns, "GrappaJob", name) if e["type"] == "Warning"]
        return warn if any(match(e) for e in warn) else None
    try:
        return cluster.wait_for(listed, scaled(30), what)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{events_text(cluster, ns)}") from None


def events_text(cluster: Cluster, ns: str) -> str:
    out = f"--- events in {ns}:\n"
    try:
        for e in events(cluster, ns):
            io = e.get("involvedObject", {})
            out += (f"{e.get('lastTimestamp') or e.get('eventTime')} {e.get('type')} {e.get('reason')} "
                    f"{io.get('kind')}/{io.get('name')} x{e.get('count', 1)}: {e.get('message')}\n")
    except Exception as err:  # noqa: BLE001 - diagnostics must never mask the real failure
        out += f"(could not list events: {err})\n"
    return out


def diagnostics(cluster: Cluster, ns: str, name: str, rel: Release | None = None) -> str:
    """Everything one needs to understand a stuck or failed job, for assertion messages."""
    out = f"\n=== GrappaJob {ns}/{name}\n"
    try:
        job = get_job(cluster, ns, name)
        out += json.dumps((job or {}).get("status", "job not found"), indent=1)[-8000:] + "\n"
        out += events_text(cluster, ns)
        out += cluster.kubectl("get", "pods,services", "-n", ns, "-o", "wide", check=False).stdout
        for p in job_pods(cluster, ns, name):
            out += f"\n=== pod {p['metadata']['name']}\n"
            out += cluster.describe_pod(ns, p["metadata"]["name"])[-5000:] + "\n"
        if rel is not None:
            out += "\n" + operator_log(cluster, rel)
    except Exception as err:  # noqa: BLE001
        out += f"(diagnostics incomplete: {err})\n"
    return out


def wait_job(cluster: Cluster, ns: str, name: str, predicate: Callable[[dict[str, Any]], Any], what: str,
             timeout: float | None = None, rel: Release | None = None, interval: float = 1.0,
             fail_on_failed: bool = True, stall: float = JOB_TIMEOUT) -> dict[str, Any]:
    """Poll the job until predicate(job) is truthy; fail early (with diagnostics) if it Fails.
    With `timeout`, fail once it is over (a bound the test asserts, e.g. "Failed within 30 s");
    without, wait as long as the job moves (its phase, reason, epoch, replicas, restarts) and
    fail once nothing moved for `stall` seconds, stretched by the machine's load (waiting.py):
    a slow, cold machine finishes a job later, it does not fail it."""
    last: dict[str, Any] = {}

    def done() -> dict[str, Any] | None:
        job = get_job(cluster, ns, name)
        last["job"] = job
        if job is not None and predicate(job):
            return job
        if fail_on_failed and phase(job) == "Failed":
            raise AssertionError(f"GrappaJob {ns}/{name} Failed while waiting for {what}"
                                 f"{diagnostics(cluster, ns, name, rel)}")
        return None

    def moved() -> str:
        st = (last.get("job") or {}).get("status") or {}
        keys = ("phase", "reason", "prepared", "restarts", "replicas")
        return json.dumps([{k: st.get(k) for k in keys}, progress(last.get("job") or {}).get("epoch")],
                          sort_keys=True)

    if timeout is None:
        return wait_until(done, f"GrappaJob {ns}/{name}: {what}", stall=stall, progress=moved, poll=interval,
                          describe=lambda: diagnostics(cluster, ns, name, rel))
    deadline = time.monotonic() + timeout
    while True:
        job = done()
        if job is not None:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for GrappaJob {ns}/{name}: {what} "
                                 f"(phase {phase(last.get('job'))}){diagnostics(cluster, ns, name, rel)}")
        time.sleep(interval)


def phase(job: dict[str, Any] | None) -> str | None:
    return ((job or {}).get("status") or {}).get("phase")


def progress(job: dict[str, Any]) -> dict[str, Any]:
    return (job.get("status") or {}).get("progress") or {}


def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions", [])}


class PodWatch(threading.Thread):
    """Polls a job's pods in the background and records every pod (uid) ever seen and the
    largest number of live pods per (role, rank) at any one time."""

    def __init__(self, cluster: Cluster, ns: str, job: str, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name=f"podwatch-{job}")
        self.cluster, self.ns, self.job, self.interval = cluster, ns, job, interval
        self.seen: dict[str, dict[str, Any]] = {}  # uid -> {name, role, rank, attempt}
        self.max_live: dict[tuple[str, str], int] = {}
        self.snapshots = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                pods = job_pods(self.cluster, self.ns, self.job)
            except Exception:  # noqa: BLE001 - a failed poll is just a missed sample
                pods = None
            if pods is not None:
                self.snapshots += 1
                live: dict[tuple[str, str], int] = {}
                for p in pods:
                    meta = p["metadata"]
                    lab = meta.get("labels", {})
                    key = (lab.get(LABEL_ROLE, "?"), lab.get("grappa.dev/rank", "-"))
                    self.seen.setdefault(meta["uid"], {"name": meta["name"], "role": key[0], "rank": key[1],
                                                       "attempt": lab.get(LABEL_ATTEMPT)})
                    if not meta.get("deletionTimestamp") and p["status"].get("phase") in (None, "Pending", "Running"):
                        live[key] = live.get(key, 0) + 1
                for k, n in live.items():
                    self.max_live[k] = max(self.max_live.get(k, 0), n)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


class JobWatch(threading.Thread):
    """`kubectl get grappajob NAME --watch -o json` in the background: every phase the job's
    status ever had, in order (short phases a poll would miss included)."""

    def __init__(self, cluster: Cluster, ns: str, job: str) -> None:
        super().__init__(daemon=True, name=f"jobwatch-{job}")
        self.phases: list[str] = []
        self.proc = subprocess.Popen([cluster.kubectl_bin, "get", RESOURCE, job, "-n", ns, "--watch",
                                      "-o", "json"], env=cluster.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)

    def run(self) -> None:
        assert self.proc.stdout is not None
        dec, buf = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = dec.raw_decode(buf.lstrip())
                except ValueError:
                    break  # incomplete object: read more
                buf = buf.lstrip()[end:]
                ph = phase(obj)
                if ph and (not self.phases or self.phases[-1] != ph):
                    self.phases.append(ph)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.join(timeout=10)


@dataclass
class JobRun:
    """A GrappaJob run to completion, with what was observed on the way."""

    namespace: str
    name: str
    job: dict[str, Any]
    phases: list[str] = field(default_factory=list)          # seen by polling
    watched_phases: list[str] = field(default_factory=list)  # seen by a watch (complete)
    started_wall: float = 0.0        # unix time the job was applied
    running_wall: float = 0.0        # first time it was seen Running with an epoch done
    finished_wall: float = 0.0
    apply_output: str = ""


def run_job(cluster: Cluster, ns: str, manifest: dict[str, Any], rel: Release | None,
            during: Callable[[dict[str, Any]], bool] | None = None, stall: float = JOB_TIMEOUT) -> JobRun:
    """Apply the claim and the job, follow it to Succeeded for as long as it moves (wait_job's
    `stall`). `during(job)` is called on every poll until it returns True (to inject faults
    mid-run)."""
    name = manifest["metadata"]["name"]
    cluster.apply(json.dumps(storage_claim()), ns)
    run = JobRun(ns, name, {}, started_wall=time.time())
    run.apply_output = apply_file(cluster, ns, manifest).stdout
    watch = JobWatch(cluster, ns, name)
    watch.start()
    done_during = during is None

    def check(job: dict[str, Any]) -> bool:
        nonlocal done_during
        ph = phase(job)
        if ph and (not run.phases or run.phases[-1] != ph):
            run.phases.append(ph)
        if ph == "Running" and progress(job).get("epoch", 0) >= 1 and not run.running_wall:
            run.running_wall = time.time()
        if not done_during:
            done_during = bool(during(job))  # type: ignore[misc]
        return ph == "Succeeded"
    try:
        run.job = wait_job(cluster, ns, name, check, "phase Succeeded", stall=stall, rel=rel, interval=0.5)
    finally:
        time.sleep(0.5)
        watch.stop()
        run.watched_phases = watch.phases
    run.finished_wall = time.time()
    if not done_during:
        raise AssertionError(f"the job finished before the fault could be injected (phases {run.phases})"
                             f"{diagnostics(cluster, ns, name, rel)}")
    return run


def run_job_watched(cluster: Cluster, ns: str, manifest: dict[str, Any], rel: Release | None,
                    during: Callable[[dict[str, Any]], bool]) -> tuple[JobRun, PodWatch]:
    """run_job while a PodWatch records every pod the job ever had (duplicates, attempts)."""
    watch = PodWatch(cluster, ns, manifest["metadata"]["name"])
    watch.start()
    try:
        return run_job(cluster, ns, manifest, rel, during=during), watch
    finally:
        watch.stop()


def aggregator_log(cluster: Cluster, ns: str, job: str) -> str:
    return cluster.container_log(ns, f"{job}-aggregator", "grappa")


# ---- the happy-path job (shared by test_grappajob and test_prometheus) --------------------------

def happy_job(cluster: Cluster, rel: Release, request: Any) -> JobRun:
    """The shipped example (shrunk) in its own namespace, run once per session to Succeeded
    while Prometheus (when it can be started) scrapes the operator and the trainers."""
    def make() -> JobRun:
        prometheus(cluster, rel, request)  # scrape from before the job starts
        ns = cluster.create_namespace(f"e2e-happy-{uuid.uuid4().hex[:6]}")
        try:
            return run_job(cluster, ns, job_manifest("csbm-p4"), rel)
        except BaseException:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
            raise

    def teardown(run: JobRun) -> None:
        cluster.kubectl("delete", "namespace", run.namespace, "--wait=false", check=False)
    return shared("happy-job", request, make, teardown)


# ---- Prometheus ----------------------------------------------------------------------------------

INSTALL_PROMETHEUS = REPO / "hack" / "install-prometheus.sh"


@dataclass
class Prometheus:
    """A local Prometheus (Debian's package) on 127.0.0.1 scraping the operator and the trainer
    pods through the API server's pod proxy (pod IPs are not routable from the test host).
    Targets are discovered from the API by a thread of the test process and handed over
    through file_sd."""

    cluster: Cluster
    rel: Release
    url: str = ""
    error: str = ""
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    started_wall: float = 0.0
    targets_seen: dict[str, set[str]] = field(default_factory=lambda: {"operator": set(), "trainers": set()})
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    # -- set-up ----------------------------------------------------------------------------------
    def start(self) -> None:
        from cluster import free_port

        inst = subprocess.run([str(INSTALL_PROMETHEUS)], text=True, capture_output=True, timeout=600)
        if inst.returncode != 0:
            self.error = f"hack/install-prometheus.sh failed ({inst.returncode}): {inst.stderr[-2000:]}"
            return
        binary = inst.stdout.strip().splitlines()[-1]
        self.root = Path(tempfile.mkdtemp(prefix="grappa-e2e-prometheus-"))
        scrape_auth = self._proxy_auth()
        for name in ("operator", "trainers"):
            (self.root / f"{name}.json").write_text("[]")
        scrape = chart_scrape_settings(self.cluster)
        self.honor = {name: bool(cfg.get("honor_labels")) for name, cfg in scrape.items()}
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "5s"},
            "scrape_configs": [
                # honor_labels and relabelings exactly as the chart's ServiceMonitor (operator) and
                # trainer PodMonitor set them, so label clashes show up here as they would there.
                {"job_name": f"grappa-{name}", **scrape[name], **scrape_auth,
                 "file_sd_configs": [{"files": [str(self.root / f"{name}.json")], "refresh_interval": "1s"}]}
                for name in ("operator", "trainers")
            ],
        }
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = open(self.root / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.root / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.root / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=1d", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        log.close()
        deadline = time.monotonic() + scaled(60)
        while True:
            try:
                if self._get("/-/ready", raw=True):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.error = f"prometheus did not become ready:\n{self.log_tail()}"
                self.stop()
                return
            time.sleep(0.3)
        self.started_wall = time.time()
        self._thread = threading.Thread(target=self._discover_forever, daemon=True, name="prom-sd")
        self._thread.start()

    def _proxy_auth(self) -> dict[str, Any]:
        """Scrape settings for the API server's pod proxy, from the kubeconfig's current context."""
        import base64

        kc = yaml.safe_load(Path(self.cluster.kubeconfig).read_text())
        ctx_name = kc.get("current-context")
        ctx = next(c["context"] for c in kc["contexts"] if c["name"] == ctx_name)
        cl = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
        assert self.root is not None
        tls: dict[str, Any] = {}
        self.apiserver = cl["server"].split("://", 1)[1].rstrip("/")

        def material(key: str, data_key: str, fname: str) -> str | None:
            src = cl if key == "certificate-authority" else user
            if src.get(data_key):
                p = self.root / fname  # type: ignore[operator]
                p.write_bytes(base64.b64decode(src[data_key]))
                p.chmod(0o600)
                return str(p)
            return src.get(key)
        ca = material("certificate-authority", "certificate-authority-data", "ca.crt")
        if ca:
            tls["ca_file"] = ca
        if cl.get("insecure-skip-tls-verify"):
            tls["insecure_skip_verify"] = True
        cert = material("client-certificate", "client-certificate-data", "client.crt")
        key = material("client-key", "client-key-data", "client.key")
        out: dict[str, Any] = {"scheme": "https"}
        if cert and key:
            tls.update(cert_file=cert, key_file=key)
        elif user.get("token"):
            (self.root / "token").write_text(user["token"])
            out["authorization"] = {"credentials_file": str(self.root / "token")}
        out["tls_config"] = tls
        return out

    # -- targets ---------------------------------------------------------------------------------
    def _target(self, pod: dict[str, Any], port: int, pod_labels: bool = False) -> dict[str, Any] | None:
        meta, ip = pod["metadata"], pod["status"].get("podIP")
        if not ip or pod["status"].get("phase") != "Running" or meta.get("deletionTimestamp"):
            return None
        labels = {"namespace_pod": f"{meta['namespace']}/{meta['name']}",
                  "__metrics_path__": f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}:{port}/proxy/metrics"}
        if pod_labels:
            # What the Prometheus Operator's PodMonitor attaches (the trainers' own series have no
            # `namespace`; the dashboards filter them by it) and the pod's labels as Kubernetes
            # service discovery names them, for the chart's relabelings.
            labels.update(namespace=meta["namespace"], pod=meta["name"])
            for key, value in (meta.get("labels") or {}).items():
                labels["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
        return {"targets": [self.apiserver], "labels": labels}

    @staticmethod
    def _metrics_port(pod: dict[str, Any]) -> int | None:
        for c in pod["spec"]["containers"]:
            for p in c.get("ports", []):
                if p.get("name") == "metrics":
                    return int(p["containerPort"])
        return None

    def discover(self) -> None:
        groups: dict[str, list[dict[str, Any]]] = {"operator": [], "trainers": []}
        for p in operator_pods(self.cluster, self.rel):
            port = self._metrics_port(p)
            t = self._target(p, port) if port else None
            if t:
                groups["operator"].append(t)
        trainers = self.cluster.api_items(
            "/api/v1/pods", labels="app.kubernetes.io/managed-by=grappa-operator,grappa.dev/role in (aggregator,worker)")
        for p in trainers:
            port = self._metrics_port(p)
            t = self._target(p, port, pod_labels=True) if port else None
            if t:
                groups["trainers"].append(t)
        assert self.root is not None
        for name, tg in groups.items():
            path = self.root / f"{name}.json"
            text = json.dumps(tg, indent=1, sort_keys=True)
            if path.read_text() != text:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(path)
            for t in tg:
                self.targets_seen[name].add(t["labels"]["namespace_pod"])

    def _discover_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.discover()
            except Exception:  # noqa: BLE001 - retried a second later
                pass
            self._stop.wait(1.0)

    # -- queries ---------------------------------------------------------------------------------
    def _get(self, path: str, raw: bool = False, **params: Any) -> Any:
        import urllib.parse
        import urllib.request

        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - loopback only
            body = resp.read().decode()
        return body if raw else json.loads(body)

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        import urllib.error

        try:
            out = self._get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"Prometheus rejected {expr!r}: {e.read().decode()[:500]}") from None
        assert out["status"] == "success", out
        return out["data"]["result"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        out = self._get("/api/v1/query", query=expr)
        assert out["status"] == "success", out
        return out["data"]["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/targets")["data"]["activeTargets"]

    def log_tail(self) -> str:
        from cluster.procs import tail
        return tail(self.root / "prometheus.log") if self.root else ""

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.root is not None and os.environ.get("GRAPPA_E2E_KEEP_DIR") != "1":
            import shutil
            shutil.rmtree(self.root, ignore_errors=True)


_RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label", "action": "action",
                 "regex": "regex", "replacement": "replacement", "separator": "separator"}


def _relabel(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prometheus Operator relabelings (camelCase) as Prometheus relabel_configs."""
    out = []
    for rule in rules:
        unknown = set(rule) - set(_RELABEL_KEYS)
        assert not unknown, f"the chart's relabeling uses {unknown}: teach tests/e2e/helpers.py about it"
        out.append({_RELABEL_KEYS[k]: v for k, v in rule.items()})
    return out


def chart_scrape_settings(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """honor_labels, relabel_configs and metric_relabel_configs of the chart's operator
    ServiceMonitor and trainer PodMonitor (helm template), as Prometheus scrape settings."""
    proc = helm(cluster, "template", "x", str(CHART), "--set", "metrics.serviceMonitor.enabled=true",
                "--set", "metrics.trainerPodMonitor.enabled=true", "--show-only", "templates/monitoring.yaml")
    out: dict[str, dict[str, Any]] = {"operator": {}, "trainers": {}}
    for doc in yaml.safe_load_all(proc.stdout):
        if not doc:
            continue
        (ep,) = doc["spec"].get("endpoints") or doc["spec"].get("podMetricsEndpoints")
        cfg = {"honor_labels": bool(ep.get("honorLabels")),
               "relabel_configs": _relabel(ep.get("relabelings") or []),
               "metric_relabel_configs": _relabel(ep.get("metricRelabelings") or [])}
        if doc["kind"] == "ServiceMonitor":
            out["operator"] = cfg
        elif doc["metadata"]["name"].endswith("-trainers"):
            out["trainers"] = cfg
    return out


def prometheus(cluster: Cluster, rel: Release, request: Any) -> Prometheus:
    """The session's Prometheus; `.error` says why it is not running (never raises)."""
    def make() -> Prometheus:
        p = Prometheus(cluster, rel)
        try:
            p.start()
        except Exception as err:  # noqa: BLE001 - the job tests must not depend on it
            p.error = f"could not start prometheus: {err!r}"
            p.stop()
        return p
    return shared("prometheus", request, make, lambda p: p.stop())
