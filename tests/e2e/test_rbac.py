"""Least privilege, decided by the real RBAC authorizer (`kubectl auth can-i --as`, and real
requests under impersonation): the operator's ServiceAccount from the chart (cluster-wide and
namespace-scoped installs) and a job's aggregator ServiceAccount."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e

GJ = h.RESOURCE
# Exactly what docs/operator.md promises (verbs per resource), cluster-wide install.
OPERATOR_ALLOWED = {
    "grappajobs.grappa.dev": {"get", "list", "watch", "patch", "delete"},
    "grappajobs.grappa.dev/status": {"get", "patch"},
    "grappajobs.grappa.dev/finalizers": {"update"},
    "pods": {"get", "list", "watch", "create", "delete"},
    "services": {"create"},
    "serviceaccounts": {"create"},
    "roles.rbac.authorization.k8s.io": {"create"},
    "rolebindings.rbac.authorization.k8s.io": {"create"},
    "events": {"create", "patch"},
    "events.events.k8s.io": {"create", "patch"},
    "customresourcedefinitions.apiextensions.k8s.io": {"get", "list", "watch"},
    "namespaces": {"get", "list", "watch"},
    # Kueue (chart value kueue.enabled): the Workloads it files, and what an admission refers to
    "workloads.kueue.x-k8s.io": {"get", "create", "patch"},
    "workloads.kueue.x-k8s.io/status": {"patch"},
    "resourceflavors.kueue.x-k8s.io": {"get"},
    "workloadpriorityclasses.kueue.x-k8s.io": {"get"},
    "priorityclasses.scheduling.k8s.io": {"get"},
}
# Granted to every authenticated identity by the default ClusterRoles (system:basic-user,
# system:discovery, system:public-info-viewer): not the chart's doing.
BUILTIN = {"selfsubjectaccessreviews.authorization.k8s.io", "selfsubjectrulesreviews.authorization.k8s.io",
           "selfsubjectreviews.authentication.k8s.io"}


@pytest.fixture(scope="session")
def release(cluster: Cluster, request: pytest.FixtureRequest) -> h.Release:
    return h.operator_release(cluster, request)


def can(cluster: Cluster, user: str, verb: str, resource: str, ns: str | None = None,
        sub: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={user}"]
    args += ["-n", ns] if ns else ["--all-namespaces"]
    if sub:
        args.append(f"--subresource={sub}")
    out = cluster.kubectl(*args, check=False).stdout.strip()
    assert out in ("yes", "no"), (args, out)
    return out == "yes"


def rules(cluster: Cluster, user: str, ns: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list`: resource -> verbs (resource names ignored: none granted)."""
    out = cluster.kubectl("auth", "can-i", "--list", f"--as={user}", "-n", ns).stdout
    got: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        if not line.strip() or line.split()[0].startswith("["):
            continue  # non-resource URLs (/healthz, /version, ...): public discovery
        resource = line.split()[0]
        verbs = line[line.index("["):] if "[" in line else ""
        verbs = verbs.rsplit("[", 1)[1].rstrip("]") if verbs else ""
        got.setdefault(resource, set()).update(v for v in verbs.split() if v)
    return got


@pytest.fixture(scope="module")
def scratch_ns(cluster: Cluster, release: h.Release) -> Iterator[str]:
    name = cluster.create_namespace(f"e2e-rbac-{uuid.uuid4().hex[:6]}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_operator_rules_are_exactly_the_documented_ones(cluster: Cluster, release: h.Release,
                                                        scratch_ns: str) -> None:
    got = rules(cluster, release.sa_user(), scratch_ns)
    extra = {r: v for r, v in got.items() if r not in BUILTIN}
    assert "*" not in extra and all("*" not in v for v in extra.values()), extra
    too_much = {r: v - OPERATOR_ALLOWED.get(r, set()) for r, v in extra.items()
                if v - OPERATOR_ALLOWED.get(r, set())}
    assert not too_much, f"operator may do more than documented: {too_much}"
    for r in ("grappajobs.grappa.dev", "pods"):
        assert got.get(r) == OPERATOR_ALLOWED[r], (r, got.get(r))


def test_leader_lease_only_in_the_release_namespace(cluster: Cluster, release: h.Release,
                                                     scratch_ns: str) -> None:
    user, lease = release.sa_user(), f"leases.coordination.k8s.io/{release.fullname}-leader"
    assert can(cluster, user, "update", lease, release.namespace)
    assert can(cluster, user, "create", "leases.coordination.k8s.io", release.namespace)
    assert not can(cluster, user, "update", "leases.coordination.k8s.io/someone-elses", release.namespace)
    assert not can(cluster, user, "update", lease, scratch_ns)


@pytest.mark.parametrize("verb,resource,sub", [
    ("get", "secrets", None), ("list", "secrets", None), ("watch", "secrets", None),
    ("create", "secrets", None), ("get", "configmaps", None), ("create", "configmaps", None),
    ("create", "deployments.apps", None), ("create", "jobs.batch", None), ("create", "grappajobs.grappa.dev", None),
    ("update", "grappajobs.grappa.dev", None), ("delete", "services", None), ("update", "pods", None),
    ("patch", "pods", None), ("create", "pods", "exec"), ("get", "pods", "log"),
    ("create", "serviceaccounts", "token"), ("create", "clusterroles.rbac.authorization.k8s.io", None),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("escalate", "roles.rbac.authorization.k8s.io", None), ("bind", "roles.rbac.authorization.k8s.io", None),
    ("delete", "roles.rbac.authorization.k8s.io", None), ("create", "namespaces", None),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io", None), ("get", "nodes", None),
    ("create", "persistentvolumeclaims", None), ("*", "*", None),
])
def test_operator_cannot(cluster: Cluster, release: h.Release, scratch_ns: str, verb: str, resource: str,
                         sub: str | None) -> None:
    for ns in (scratch_ns, release.namespace):
        assert not can(cluster, release.sa_user(), verb, resource, ns, sub), (verb, resource, sub, ns)


def test_operator_can_what_it_reconciles(cluster: Cluster, release: h.Release, scratch_ns: str) -> None:
    user = release.sa_user()
    for verb, res, sub in [("watch", GJ, None), ("patch", GJ, "status"), ("create", "pods", None),
                           ("delete", "pods", None), ("create", "services", None),
                           ("create", "roles.rbac.authorization.k8s.io", None), ("create", "events", None)]:
        assert can(cluster, user, verb, res, scratch_ns, sub), (verb, res, sub)
    assert can(cluster, user, "list", GJ)  # cluster-wide install: every namespace


def test_namespaced_install_stays_in_its_namespaces(cluster: Cluster, release: h.Release) -> None:
    """watchNamespaces: Roles in those namespaces only; nothing but read-only discovery outside.
    The release's operator is kept Pending (unschedulable) so it cannot compete with the main one;
    only its RBAC matters here."""
    suffix = uuid.uuid4().hex[:6]
    watched = [cluster.create_namespace(f"e2e-team-a-{suffix}"), cluster.create_namespace(f"e2e-team-b-{suffix}")]
    other = cluster.create_namespace(f"e2e-other-{suffix}")
    rel = h.helm_install(cluster, "grappa-ns", f"grappa-e2e-ns-{suffix}", h.release_values({
        "watchNamespaces": watched, "nodeSelector": {"grappa.dev/e2e-unschedulable": "true"}}), wait=False)
    try:
        user = rel.sa_user()
        env = cluster.kubectl_json("get", "deployment", rel.fullname, "-n", rel.namespace)
        container = env["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "GRAPPA_WATCH_NAMESPACES", "value": ",".join(watched)} in container["env"]
        assert not cluster.kubectl("get", "clusterrole", rel.fullname, check=False).returncode == 0
        for ns in watched:
            assert can(cluster, user, "create", "pods", ns) and can(cluster, user, "patch", GJ, ns, "status")
            assert can(cluster, user, "watch", GJ, ns)
            assert not can(cluster, user, "get", "secrets", ns)
        for ns in (other, rel.namespace, "default", "kube-system"):
            for verb, res, sub in [("list", GJ, None), ("patch", GJ, "status"), ("create", "pods", None),
                                   ("delete", "pods", None), ("create", "services", None),
                                   ("create", "roles.rbac.authorization.k8s.io", None),
                                   ("create", "events", None), ("get", "secrets", None)]:
                assert not can(cluster, user, verb, res, ns, sub), (verb, res, sub, ns)
        assert not can(cluster, user, "list", GJ)          # not cluster-wide
        assert not can(cluster, user, "create", "pods")
        assert can(cluster, user, "list", "namespaces")    # kopf's discovery, read-only
        assert can(cluster, user, "list", "customresourcedefinitions.apiextensions.k8s.io")
        assert not can(cluster, user, "create", "namespaces")
    finally:
        h.helm_uninstall(cluster, rel)
        for ns in (*watched, other):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_aggregator_may_patch_only_its_own_status(cluster: Cluster, release: h.Release, scratch_ns: str) -> None:
    """The operator creates `<job>-aggregator` SA + Role + RoleBinding per job. The jobs' pods are
    kept Pending (unschedulable prepare pod) so no training runs; the RBAC objects exist anyway."""
    ns = scratch_ns
    names = [f"alpha-{uuid.uuid4().hex[:4]}", f"beta-{uuid.uuid4().hex[:4]}"]
    cluster.apply(json.dumps(h.storage_claim()), ns)
    for n in names:
        job = h.job_manifest(n, aggregator={"nodeSelector": {"grappa.dev/e2e-unschedulable": "true"}})
        h.apply_file(cluster, ns, job)
    for n in names:
        cluster.wait_for(lambda n=n: cluster.kubectl("get", "rolebinding", f"{n}-aggregator", "-n", ns,
                                                     check=False).returncode == 0,
                         h.scaled(90), f"RoleBinding {n}-aggregator")
    a, b = names
    agg = f"system:serviceaccount:{ns}:{a}-aggregator"
    assert can(cluster, agg, "patch", f"{GJ}/{a}", ns, "status")
    assert can(cluster, agg, "get", f"{GJ}/{a}", ns, "status")
    assert not can(cluster, agg, "patch", f"{GJ}/{b}", ns, "status")
    assert not can(cluster, agg, "patch", f"{GJ}/{a}", ns)      # the spec
    assert not can(cluster, agg, "get", f"{GJ}/{a}", ns)
    assert not can(cluster, agg, "delete", f"{GJ}/{a}", ns)
    assert not can(cluster, agg, "list", GJ, ns)
    assert not can(cluster, agg, "update", f"{GJ}/{a}", ns, "status")
    for verb, res in [("get", "secrets"), ("list", "pods"), ("create", "pods"), ("get", "configmaps")]:
        assert not can(cluster, agg, verb, res, ns), (verb, res)
    assert not can(cluster, agg, "patch", f"{GJ}/{a}", release.namespace, "status")

    # Real requests under impersonation, authorized by the same RBAC.
    patch = json.dumps({"status": {"progress": {"epoch": 0, "epochsTotal": 10}}})

    def kpatch(job: str, *extra: str) -> tuple[int, str]:
        p = cluster.kubectl("patch", GJ, job, "-n", ns, "--type=merge", "-p", patch, f"--as={agg}",
                            *extra, check=False)
        return p.returncode, p.stdout + p.stderr
    rc, out = kpatch(a, "--subresource=status")
    assert rc == 0, out
    rc, out = kpatch(b, "--subresource=status")
    assert rc != 0 and "forbidden" in out.lower(), out
    spec_patch = cluster.kubectl("patch", GJ, a, "-n", ns, "--type=merge", "-p",
                                 '{"spec": {"training": {"epochs": 1}}}', f"--as={agg}", check=False)
    assert spec_patch.returncode != 0 and "forbidden" in spec_patch.stderr.lower(), spec_patch.stderr
    for n in names:
        cluster.kubectl("delete", GJ, n, "-n", ns, "--wait=false")
