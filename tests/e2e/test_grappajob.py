"""The whole platform end to end: helm install of charts/grappa, a GrappaJob from the shipped
example (P = 4, synthetic CSBM) to Succeeded with rounds, printer columns, garbage collection,
a worker killed mid-training and the operator restarted mid-job.

Written against plain Kubernetes (kubectl, helm, the API); see helpers.py for images on kind."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


def _rounds(job: dict[str, Any]) -> dict[str, Any]:
    return (job.get("status") or {}).get("rounds") or {}


def test_operator_installed_with_helm(cluster: Cluster, release: h.Release) -> None:
    listed = h.helm(cluster, "list", "-n", release.namespace, "-o", "json").stdout
    assert f'"name":"{release.name}"' in listed and '"status":"deployed"' in listed, listed
    crd = cluster.kubectl_json("get", "crd", h.RESOURCE)
    assert crd["spec"]["names"]["shortNames"] == ["gj"]
    deploy = cluster.kubectl_json("get", "deployment", release.fullname, "-n", release.namespace)
    assert deploy["status"].get("readyReplicas") == 1, deploy["status"]
    pod = h.wait_operator(cluster, release)
    assert pod["spec"]["serviceAccountName"] == release.service_account
    assert pod["spec"]["containers"][0]["command"] == ["python", "-m", "grappa_operator"]


def test_job_succeeds_with_rounds(cluster: Cluster, release: h.Release, happy: h.JobRun) -> None:
    job = happy.job
    st = job["status"]
    diag = lambda: h.diagnostics(cluster, happy.namespace, happy.name, release)  # noqa: E731
    assert st["phase"] == "Succeeded"
    # Pending is usually too short to be seen by polling; Running must have been.
    assert "Running" in happy.phases and happy.phases[-1] == "Succeeded", happy.phases
    seq = happy.watched_phases  # from a watch: every phase, in order
    assert [p for p in seq if p in ("Preparing", "Running", "Succeeded")] == ["Preparing", "Running", "Succeeded"], seq
    assert st.get("restarts", 0) == 0, diag()
    result = st.get("result") or {}
    assert isinstance(result.get("testAcc"), float) and 0.0 < result["testAcc"] <= 1.0, st
    assert 0.0 < result.get("bestVal", 0) <= 1.0 and result.get("bestEpoch", 0) >= 1, st
    prog = st["progress"]
    assert prog["epoch"] == prog["epochsTotal"] == job["spec"]["training"]["epochs"], prog
    assert prog.get("finished") is True, prog
    cond = h.conditions(job)
    assert cond["Succeeded"]["status"] == "True" and cond["Created"]["status"] == "True", cond
    assert cond.get("Running", {}).get("status") in ("False", None), cond

    # Rounds: round 0 plus at least two repartitions, decided in order, each applied once.
    rounds = _rounds(job)
    history = rounds.get("history") or []
    numbers = [r["round"] for r in history]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 3, (rounds, diag())
    assert rounds["current"] == numbers[-1] == prog["round"], rounds
    boundaries = [r["effectiveEpoch"] for r in history]
    assert boundaries == sorted(boundaries) and len(set(boundaries)) == len(boundaries), history
    assert all(b < prog["epochsTotal"] for b in boundaries), history
    assert len({r["pairingSeed"] for r in history}) == len(history), history
    decided = [e for e in h.events(cluster, happy.namespace, "GrappaJob", happy.name)
               if e["reason"] == "RoundDecided"]
    assert len(decided) == len(numbers) - 1 >= 2, (decided, history)
    for r in range(1, len(numbers)):
        assert sum(f"round {r} " in e["message"] for e in decided) == 1, decided
    applied = [int(m) for m in re.findall(r"round (\d+) from epoch \d+",
                                          h.aggregator_log(cluster, happy.namespace, happy.name))]
    assert applied == numbers, f"aggregator applied rounds {applied}, status history {numbers}"


def test_printer_columns(cluster: Cluster, happy: h.JobRun) -> None:
    out = cluster.kubectl("get", "grappajobs", "-n", happy.namespace).stdout
    header, *rows = out.strip().splitlines()
    columns = header.split()
    assert columns == ["NAME", "PHASE", "EPOCH", "VAL-ACC", "TEST-ACC", "TEST-MRR", "ETA-SECONDS", "AGE"], out
    # a column is where its title starts: an empty cell (TEST-MRR of a node-classification job) is blank
    starts = [header.index(c) for c in columns] + [None]
    line = next(r for r in rows if r.split()[0] == happy.name)
    row = [line[a:b].strip() for a, b in zip(starts, starts[1:])]
    prog = happy.job["status"]["progress"]
    assert row[1:3] == ["Succeeded", str(prog["epoch"])], out
    assert abs(float(row[3]) - prog["valAcc"]) < 1e-3 and abs(float(row[4]) - prog["testAcc"]) < 1e-3, out
    assert row[5] == "", out  # no MRR: not a link-prediction job
    eta = prog.get("etaSeconds")
    assert row[6] == (str(int(eta)) if eta is not None else "<none>"), out  # truncated to an integer
    wide = cluster.kubectl("get", "gj", happy.name, "-n", happy.namespace, "-o", "wide").stdout
    for col in ("EPOCHS", "ROUND", "LOSS", "STRATEGY", "RESTARTS", "REASON"):
        assert col in wide.splitlines()[0].split(), wide
    assert "grappa" in wide.splitlines()[1].split(), wide


def test_deleting_job_collects_children(cluster: Cluster, release: h.Release, happy: h.JobRun) -> None:
    ns, name = happy.namespace, happy.name
    kinds = "pods,services,serviceaccounts,roles,rolebindings"
    sel = f"{h.LABEL_JOB}={name}"
    before = cluster.kubectl_json("get", kinds, "-n", ns, "-l", sel)["items"]
    got = {(o["kind"], o["metadata"]["name"]) for o in before}
    assert ("Service", f"{name}-aggregator") in got and ("Pod", f"{name}-aggregator") in got, got
    assert ("Role", f"{name}-aggregator") in got, got
    cluster.kubectl("delete", "grappajob", name, "-n", ns, "--wait=true", timeout=h.scaled(120))
    try:
        cluster.wait_for(lambda: not cluster.kubectl_json("get", kinds, "-n", ns, "-l", sel)["items"],
                         h.scaled(120), f"garbage collection of {name}'s children")
    except AssertionError as e:
        left = cluster.kubectl("get", kinds, "-n", ns, "-l", sel, check=False).stdout
        raise AssertionError(f"{e}; still there:\n{left}{h.diagnostics(cluster, ns, name, release)}") from None


def test_suspended_longer_than_the_deadline_then_resumed_succeeds(
        cluster: Cluster, release: h.Release, namespace: str) -> None:
    """activeDeadlineSeconds counts active time only: a job suspended mid-run for longer than its
    deadline resumes (from the checkpoint the aggregator wrote on SIGTERM) and Succeeds."""
    name = f"susp-{uuid.uuid4().hex[:5]}"
    # The deadline is set short only for the suspension: a busy machine takes longer than any short
    # deadline to reach epoch 1, and what is tested is that time suspended does not count. So:
    # suspend and cut the deadline to D in one patch, stay suspended longer than D, resume; a job
    # whose clock counted the suspension fails DeadlineExceeded at once. Once the operator has
    # restarted the clock (status.activeSince after the resume), the deadline goes back up so the
    # remaining epochs have time on any machine.
    deadline = int(h.scaled(30))
    roomy = int(h.scaled(3600))
    manifest = h.job_manifest(name, epochs=6, rounds_every=3, partitions=2,
                              runPolicy={"activeDeadlineSeconds": roomy})
    suspended: dict[str, Any] = {}

    def patch(run_policy: dict[str, Any]) -> None:
        cluster.kubectl("patch", h.RESOURCE, name, "-n", namespace, "--type=merge",
                        "-p", json.dumps({"spec": {"runPolicy": run_policy}}))

    def suspend_then_resume(job: dict[str, Any]) -> bool:
        if not suspended and h.phase(job) == "Running" and h.progress(job).get("epoch", 0) >= 1:
            suspended.update(epoch=h.progress(job)["epoch"], at=time.time())
            patch({"suspend": True, "activeDeadlineSeconds": deadline})
            return False
        if suspended and "resumed" not in suspended:
            if h.phase(job) != "Suspended" or time.time() - suspended["at"] < deadline + 5:
                return False
            assert not [p for p in h.job_pods(cluster, namespace, name)
                        if p["metadata"]["labels"].get(h.LABEL_ROLE) != "prepare"], "pods left while suspended"
            suspended["resumed"] = time.time()
            patch({"suspend": False})
            return False
        if "resumed" in suspended and "raised" not in suspended:
            since = (job.get("status") or {}).get("activeSince", "")
            if h.phase(job) == "Suspended" or since < time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(suspended["resumed"] - 1)):
                return False  # the operator has not taken the resume yet
            suspended["raised"] = time.time()
            patch({"activeDeadlineSeconds": roomy})
            return True
        return False

    run = h.run_job(cluster, namespace, manifest, release, during=suspend_then_resume)
    st = run.job["status"]
    diag = h.diagnostics(cluster, namespace, name, release)
    assert "Suspended" in run.watched_phases and run.watched_phases[-1] == "Succeeded", (run.watched_phases, diag)
    assert st.get("restarts", 0) == 0 and st["progress"]["epoch"] == 6, diag
    # The deadline clock restarted at the resume; the suspension alone outlasted it.
    assert suspended["resumed"] - suspended["at"] > deadline
    assert st["activeSince"] >= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(suspended["resumed"] - 1)), st
    reasons = [e["reason"] for e in h.events(cluster, namespace, "GrappaJob", name)]
    assert "Suspended" in reasons and "Resumed" in reasons and "DeadlineExceeded" not in reasons, reasons
    # The resumed group went on from the stop's checkpoint: no completed epoch lost.
    log = h.aggregator_log(cluster, namespace, name)
    resumed = [int(m) for m in re.findall(r"resuming from \S+ \(epoch (\d+)\)", log)]
    assert resumed and resumed[-1] >= suspended["epoch"], (resumed, suspended, log[-3000:])


def test_worker_killed_resumes_from_checkpoint(cluster: Cluster, release: h.Release, namespace: str) -> None:
    name = f"kill-{uuid.uuid4().hex[:5]}"
    manifest = h.job_manifest(name, epochs=10, rounds_every=3, partitions=2)  # 3 pods start sooner than 5
    victim = f"{name}-worker-2"
    killed: dict[str, Any] = {}

    def inject(job: dict[str, Any]) -> bool:
        if h.phase(job) == "Running" and h.progress(job).get("epoch", 0) >= 3:
            killed.update(epoch=h.progress(job)["epoch"], at=time.time())
            # The API way works on any cluster: the pod's container gets SIGTERM and goes away.
            cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
            return True
        return False

    run, watch = h.run_job_watched(cluster, namespace, manifest, release, inject)
    st = run.job["status"]
    diag = h.diagnostics(cluster, namespace, name, release)
    assert st["restarts"] == 1, diag
    seq = run.watched_phases
    assert "Restarting" in seq and seq.index("Restarting") > seq.index("Running"), (seq, diag)
    assert seq[-1] == "Succeeded" and "Running" in seq[seq.index("Restarting"):], seq
    # The Restarting phase can be shorter than a poll, but its condition stays in the list once
    # it has been True (now False, reason Restarted), next to the Warning Event that says why.
    restarting = h.conditions(run.job).get("Restarting")
    assert restarting and restarting["status"] == "False", (run.phases, diag)
    assert restarting["lastTransitionTime"] >= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(killed["at"] - 1))
    pod_gone = ("PodFailed", "PodDeleted")
    warnings = [e for e in h.job_warnings(cluster, namespace, name, lambda e: e["reason"] in pod_gone,
                                          "the Warning Event naming the killed pod")
                if e["reason"] in pod_gone]
    assert len(warnings) == 1 and victim in warnings[0]["message"], h.events_text(cluster, namespace)
    attempts = {v["attempt"] for v in watch.seen.values() if v["role"] in ("aggregator", "worker")}
    assert attempts == {"0", "1"}, watch.seen
    # The second group resumed from the newest checkpoint, not from epoch 0.
    log = h.aggregator_log(cluster, namespace, name)
    resumed = [int(m) for m in re.findall(r"resuming from \S+ \(epoch (\d+)\)", log)]
    assert resumed and 1 <= resumed[-1] <= st["progress"]["epochsTotal"], log[-3000:]
    assert resumed[-1] >= killed["epoch"] - 1, (resumed, killed)
    assert 0.0 < st["result"]["testAcc"] <= 1.0
    rounds = _rounds(run.job)["history"]
    assert [r["round"] for r in rounds] == list(range(len(rounds))), rounds


def _lease_holder(cluster: Cluster, release: h.Release) -> str:
    lease = cluster.kubectl_json("get", "lease", f"{release.fullname}-leader", "-n", release.namespace)
    return lease["spec"].get("holderIdentity") or ""


def _scale_operator(cluster: Cluster, release: h.Release, replicas: int) -> None:
    # The pod template does not change with the count, so no rollout: pods are only added/removed.
    cluster.kubectl("scale", "deployment", release.fullname, "-n", release.namespace, f"--replicas={replicas}")


@pytest.mark.exclusive  # every job's operator is down until another replica takes over
def test_operator_leader_killed_mid_job(cluster: Cluster, release: h.Release, namespace: str) -> None:
    """Two replicas with leader election; the leader is killed (no grace) while the job trains:
    another replica takes the Lease and sees the job through, no pod duplicated, no round skipped."""
    name = f"oprs-{uuid.uuid4().hex[:5]}"
    # Workers train on while no operator leads (the Lease outlives a killed leader by up to its
    # 15 s duration, then the new leader starts kopf), so the job must outlast that by a few
    # rounds. Alone on the node (this test is exclusive) epochs are short: with 18 epochs a run
    # once ended with no round decided after the takeover.
    manifest = h.job_manifest(name, epochs=40, rounds_every=3)
    _scale_operator(cluster, release, 2)
    restarted: dict[str, Any] = {}
    try:
        def two_ready() -> list[dict[str, Any]] | None:
            ready = [p for p in h.operator_pods(cluster, release) if not p["metadata"].get("deletionTimestamp")
                     and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
            return ready if len(ready) == 2 else None
        # Wait until one of the two Ready pods holds the Lease (if scaling replaced the leader,
        # its Lease must expire first).
        def leader_among_ready() -> tuple[str, str] | None:
            names = [p["metadata"]["name"] for p in two_ready() or []]
            holder = _lease_holder(cluster, release)
            return (holder, next(n for n in names if n != holder)) if holder in names else None
        leader, follower = cluster.wait_for(leader_among_ready, h.scaled(120),
                                            "two operator replicas Ready, one holding the Lease")

        def inject(job: dict[str, Any]) -> bool:
            if not restarted and h.phase(job) == "Running" and h.progress(job).get("epoch", 0) >= 2:
                restarted["epoch"] = h.progress(job)["epoch"]
                restarted["round"] = _rounds(job).get("current")
                cluster.kubectl("delete", "pod", leader, "-n", release.namespace, "--grace-period=0",
                                "--force", "--wait=false")
                return True
            return False

        run, watch = h.run_job_watched(cluster, namespace, manifest, release, inject)
        # The follower, or the pod the Deployment starts in the killed leader's place: both wait
        # for the Lease to expire, and either may take it first.
        holder = _lease_holder(cluster, release)
        live = [p["metadata"]["name"] for p in h.operator_pods(cluster, release)
                if not p["metadata"].get("deletionTimestamp")]
        assert holder != leader and holder in live, (leader, follower, holder, live)
        holder_log = cluster.container_log(release.namespace, holder, "operator")
        assert "leading (lease" in holder_log, holder_log[-3000:]
    finally:
        _scale_operator(cluster, release, 1)
        # The scale-down may end the leader: its lease then outlives it by up to LEASE_DURATION,
        # and no one reconciles until the replica left takes it. The next test's jobs need a leader.
        survivor = h.wait_operator(cluster, release)["metadata"]["name"]
        cluster.wait_for(lambda: _lease_holder(cluster, release) == survivor and "leading (lease" in
                         cluster.container_log(release.namespace, survivor, "operator"),
                         h.scaled(120), f"operator pod {survivor} leading after the scale-down")
    diag = h.diagnostics(cluster, namespace, name, release)
    st = run.job["status"]
    assert st.get("restarts", 0) == 0, diag
    # No duplicates: P + 1 training pods and one prepare pod ever, never two for one rank.
    trainers = [v for v in watch.seen.values() if v["role"] in ("aggregator", "worker")]
    assert len(trainers) == manifest["spec"]["partitions"] + 1, (watch.seen, diag)
    assert all(n == 1 for n in watch.max_live.values()), watch.max_live
    assert len([v for v in watch.seen.values() if v["role"] == "prepare"]) <= 1, watch.seen
    # Rounds neither skipped nor repeated, across the change of leader.
    history = _rounds(run.job)["history"]
    numbers = [r["round"] for r in history]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 3, (history, diag)
    # An Event is posted after the status write, so a decision whose Event was lost with the
    # killed leader may lack one; none may have two.
    decided = [e for e in h.events(cluster, namespace, "GrappaJob", name) if e["reason"] == "RoundDecided"]
    for r in range(1, len(numbers)):
        assert sum(f"round {r} " in e["message"] for e in decided) <= 1, (r, decided)
    applied = [int(m) for m in re.findall(r"round (\d+) from epoch \d+", h.aggregator_log(cluster, namespace, name))]
    assert applied == numbers, (applied, numbers)
    assert st["progress"]["round"] == numbers[-1]
    # The new leader reconciles: it saw the job through to Succeeded.
    assert h.conditions(run.job)["Succeeded"]["status"] == "True"
    assert restarted["epoch"] < st["progress"]["epochsTotal"]
