"""Malformed GrappaJobs are refused by the real API server's OpenAPI validation of the CRD the
chart installs, with the offending field named; nothing is created. Unknown fields: the schema
does not preserve them, so `kubectl apply` (strict field validation by default) refuses them and
`--validate=warn` stores the object pruned, with a warning naming the field."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

import helpers as h
from cluster import Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def release(cluster: Cluster, request: pytest.FixtureRequest) -> h.Release:
    return h.operator_release(cluster, request)


@pytest.fixture(scope="module")
def ns(cluster: Cluster, release: h.Release):
    name = cluster.create_namespace(f"e2e-schema-{uuid.uuid4().hex[:6]}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, leaf = path.split(".")
    cur = out
    for p in parents:
        cur = cur.setdefault(p, {})
    if value is _DELETE:
        cur.pop(leaf, None)
    else:
        cur[leaf] = value
    return out


_DELETE = object()

# (id, path under the object, bad value, text the API server's error must contain)
CASES = [
    ("negative-partitions", "spec.partitions", -4,
     ["spec.partitions", "greater than or equal to 1"]),
    ("partitions-not-integer", "spec.partitions", 1.5,
     ["spec.partitions", "integer"]),
    ("unknown-arch", "spec.model.arch", "transformer",
     ["spec.model.arch", "Unsupported value", '"transformer"', '"gcn"']),
    ("unknown-correction", "spec.grappa.correction", "magic",
     ["spec.grappa.correction", "Unsupported value", '"node"']),
    ("unknown-mode", "spec.training.mode", "streaming",
     ["spec.training.mode", "Unsupported value"]),
    ("epochs-wrong-type", "spec.training.epochs", "ten",
     ["spec.training.epochs", "must be of type integer"]),
    ("fanouts-wrong-type", "spec.training.fanouts", "5,5",
     ["spec.training.fanouts", "must be of type array"]),
    ("dropout-exclusive-bound", "spec.model.dropout", 1.0,
     ["spec.model.dropout", "less than 1"]),
    ("metrics-port-range", "spec.metricsPort", 70000,
     ["spec.metricsPort", "less than or equal to 65535"]),
    ("relative-host-path", "spec.storage", {"hostPath": "relative/dir"},
     ["spec.storage.hostPath", "should match"]),
    ("missing-storage", "spec.storage", _DELETE,
     ["spec.storage", "Required value"]),
    # the CRD's CEL rule (x-kubernetes-validations), generated from the Storage model
    ("storage-without-source", "spec.storage", {"mountPath": "/grappa"},
     ["spec.storage", "set exactly one of claimName or hostPath"]),
    ("storage-with-two-sources", "spec.storage", {"claimName": "data", "hostPath": "/srv"},
     ["spec.storage", "set exactly one of claimName or hostPath"]),
    ("bad-clean-pod-policy", "spec.runPolicy.cleanPodPolicy", "Sometimes",
     ["spec.runPolicy.cleanPodPolicy", "Unsupported value"]),
    # cross-field CEL rules generated from the models (grappa_operator/cel.py); the operator keeps
    # their pydantic twins for CRDs installed without them and for `grappa train`
    ("chunks-below-partitions", "spec.grappa.chunks", 2,
     ["spec.grappa.chunks", "grappa.chunks must be >= partitions"]),
    ("more-partitions-than-nodes", "spec.dataset.synthetic.numNodes", 3,
     ["spec.partitions", "exceeds the dataset's nodes"]),
    ("grappa-settings-with-full", "spec.strategy", "full",
     ["run in training.mode full-graph only", "apply to strategy grappa"]),
    ("fanouts-per-layer", "spec.training.fanouts", [5, 5, 5],
     ["spec.training.fanouts", "one entry per model layer"]),
    # resource quantities: the quantity pattern on every role's resources and in the templates'
    # PodSpecs (a pod made of them would be refused far later, naming a pod)
    ("bad-worker-cpu-request", "spec.worker.resources", {"requests": {"cpu": "lots"}},
     ["spec.worker.resources.requests.cpu", '"lots"', "should match"]),
    ("bad-aggregator-memory-limit", "spec.aggregator.resources", {"limits": {"memory": "4GB"}},
     ["spec.aggregator.resources.limits.memory", '"4GB"', "should match"]),
    ("negative-worker-cpu", "spec.worker.resources", {"requests": {"cpu": "-1"}},
     ["spec.worker.resources.requests.cpu", "should match"]),
    ("bad-template-sidecar-cpu", "spec.worker.template",
     {"spec": {"initContainers": [{"name": "shipper", "image": "busybox", "restartPolicy": "Always",
                                   "resources": {"requests": {"cpu": "lots"}}}]}},
     ["spec.worker.template.spec.initContainers[0].resources.requests.cpu", "should match"]),
    ("bad-template-container-limit", "spec.aggregator.template",
     {"spec": {"containers": [{"name": "shipper", "image": "busybox", "resources": {"limits": {"memory": "big"}}}]}},
     ["spec.aggregator.template.spec.containers[0].resources.limits.memory", "should match"]),
    ("bad-template-overhead", "spec.worker.template", {"spec": {"overhead": {"cpu": "x"}}},
     ["spec.worker.template.spec.overhead.cpu", "should match"]),
    # an integer escapes the pattern (strings only): minimum 0 refuses it like "-1" (issue 35)
    ("negative-integer-worker-cpu", "spec.worker.resources", {"requests": {"cpu": -1}},
     ["spec.worker.resources.requests.cpu", "greater than or equal to 0"]),
    # Kubernetes refuses a pod whose overhead is not its RuntimeClass's, which the CRD cannot read
    ("template-overhead", "spec.aggregator.template", {"spec": {"overhead": {"cpu": "250m"}}},
     ["spec.aggregator.template.spec.overhead", "RuntimeClass"]),
]


def _job(name: str) -> dict[str, Any]:
    job = h.job_manifest(name)
    job["apiVersion"], job["kind"] = f"{h.GROUP}/{h.VERSION}", "GrappaJob"
    return job


@pytest.mark.parametrize("path,value,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_schema_rejects(cluster: Cluster, ns: str, path: str, value: Any, expect: list[str]) -> None:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    obj = _set(_job(name), path, value)
    proc = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the API server accepted {path}={value!r}:\n{out}"
    assert f'The GrappaJob "{name}" is invalid' in out, out
    for text in expect:
        assert text in out, f"{text!r} missing from the API server's answer:\n{out}"
    assert h.get_job(cluster, ns, name) is None


def test_valid_job_is_accepted_by_dry_run(cluster: Cluster, ns: str) -> None:
    """The baseline every case above perturbs is itself valid (so each rejection is the field's)."""
    obj = _job("baseline")
    cluster.kubectl("apply", "-n", ns, "--dry-run=server", "-f", "-", input=json.dumps(obj))


def test_good_template_quantities_are_accepted_and_the_podspec_kept_whole(cluster: Cluster, ns: str) -> None:
    """The templates' PodSpecs are typed only where they hold quantities: everything else a user
    writes there (commands, env, claims, probes) is stored as written, and integers are quantities."""
    sidecar = {"name": "shipper", "image": "busybox", "restartPolicy": "Always", "command": ["sleep", "inf"],
               "env": [{"name": "A", "value": "b"}],
               "resources": {"requests": {"cpu": 1, "memory": "64Mi"}, "limits": {"memory": "1.5e8"}, "claims": []}}
    template = {"spec": {"initContainers": [sidecar], "resources": {"requests": {"cpu": "250m"}},
                         "containers": [{"name": "grappa", "envFrom": [{"configMapRef": {"name": "c"}}]}]}}
    obj = _set(_job("templated"), "spec.worker.template", template)
    out = cluster.kubectl("apply", "-n", ns, "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
                          input=json.dumps(obj)).stdout
    assert json.loads(out)["spec"]["worker"]["template"]["spec"] == template["spec"], out


def test_unknown_field_strict_rejected(cluster: Cluster, ns: str) -> None:
    name = f"unk-{uuid.uuid4().hex[:6]}"
    obj = _set(_set(_job(name), "spec.model.depth", 3), "spec.colour", "blue")
    proc = cluster.kubectl("apply", "-n", ns, "--validate=strict", "-f", "-", input=json.dumps(obj), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert 'unknown field "spec.model.depth"' in out and 'unknown field "spec.colour"' in out, out
    assert h.get_job(cluster, ns, name) is None


def test_unknown_field_pruned_with_warning(cluster: Cluster, ns: str) -> None:
    name = f"prune-{uuid.uuid4().hex[:6]}"
    obj = _set(_job(name), "spec.model.depth", 3)
    # Keep the operator from starting pods for it: suspended from the start.
    obj = _set(obj, "spec.runPolicy.suspend", True)
    proc = cluster.kubectl("apply", "-n", ns, "--validate=warn", "-f", "-", input=json.dumps(obj))
    assert 'unknown field "spec.model.depth"' in proc.stderr, proc.stderr
    stored = h.get_job(cluster, ns, name)
    assert stored is not None and "depth" not in stored["spec"]["model"], stored
    # Defaults from the schema were applied by the API server.
    assert stored["spec"]["storage"]["mountPath"] == "/grappa"
    cluster.kubectl("delete", "grappajob", name, "-n", ns, "--wait=false")


def test_name_too_long_for_child_objects_is_refused(cluster: Cluster, ns: str) -> None:
    name = "n" * 53  # child names add up to 11 characters ("-worker-NNN") to a 63-character limit
    proc = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_job(name)), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "metadata.name" in out, out
    assert h.get_job(cluster, ns, name) is None


@pytest.mark.parametrize("path,value", [("spec.partitions", 2), ("spec.strategy", "full"),
                                        ("spec.model.hidden", 32)], ids=["partitions", "strategy", "model"])
def test_fields_that_define_the_store_are_immutable(cluster: Cluster, ns: str, path: str, value: Any) -> None:
    """A transition rule refuses the change; fields outside the list still change (suspend here)."""
    name = f"imm-{uuid.uuid4().hex[:6]}"
    obj = _set(_job(name), "spec.runPolicy.suspend", True)
    h.apply_file(cluster, ns, obj)
    proc = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_set(obj, path, value)), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "cannot change once the job exists" in out, out
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps(_set(obj, "spec.runPolicy.ttlSecondsAfterFinished", 60)))
    cluster.kubectl("delete", "grappajob", name, "-n", ns, "--wait=false")
