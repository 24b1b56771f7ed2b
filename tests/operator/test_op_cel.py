"""CEL rules of the generated CRD: each one is present where it applies, its pydantic/operator twin
rejects the same input (and accepts the fix), and every rule reads only bounded fields.

No CEL evaluator is a dependency; the rules' expressions are checked by the twins' behaviour and
by shape, the API server's own evaluation by the end-to-end suite.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import pytest
import yaml

from grappa_operator import crdgen
from grappa_operator.api import parse_spec
from grappa_operator.desired import JobRef, check_runnable
from grappa_operator.errors import SpecError

CRD = yaml.safe_load(crdgen.render())
ROOT = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC = ROOT["properties"]["spec"]
BASE = {"storage": {"hostPath": "/srv"}, "dataset": {"name": "cora"}, "partitions": 2}


def node(path: str) -> dict[str, Any]:
    """The schema node at a dotted path under spec ('' = spec itself)."""
    out = SPEC
    for part in filter(None, path.split(".")):
        out = out["items"] if part == "[]" else out["properties"][part]
    return out


def messages(schema: dict[str, Any]) -> list[str]:
    return [r["message"] for r in schema.get("x-kubernetes-validations", [])]


def merged(over: dict[str, Any]) -> dict[str, Any]:
    raw = {**BASE}
    for k, v in over.items():
        same = isinstance(v, dict) and isinstance(raw.get(k), dict) and k != "storage"  # one source
        raw[k] = {**raw[k], **v} if same else v
    return raw


def twin_error(raw: dict[str, Any], name: str = "demo") -> Optional[str]:
    """What the operator says about a spec: the model's validators, then check_runnable."""
    try:
        spec = parse_spec(raw)
        check_runnable(JobRef(name, "ns", "uid"), spec)
    except SpecError as err:
        return err.message
    return None


# (where the rule sits, a word of its message, a spec it refuses, the field the twin names, a fix)
CASES = [
    ("", "grappa.chunks must be >= partitions", {"partitions": 4, "grappa": {"chunks": 2}},
     "grappa.chunks", {"partitions": 4, "grappa": {"chunks": 4}}),
    ("", "one entry per model layer", {"model": {"layers": 2}, "training": {"fanouts": [5]}},
     "training.fanouts", {"model": {"layers": 2}, "training": {"fanouts": [5, 5]}}),
    ("", "fanouts must all be >= 1", {"model": {"layers": 2}, "training": {"fanouts": [5, 0]}},
     "training.fanouts", {"model": {"layers": 2}, "training": {"fanouts": [5, 1]}}),
    ("", "model.custom trains with strategy grappa only", {"strategy": "full", "model": {
        "custom": {"factory": "my_models:make_model"}}}, "model.custom",
     {"model": {"custom": {"factory": "my_models:make_model"}}}),
    ("", "full-graph only", {"strategy": "full", "training": {"mode": "mini-batch"}},
     "training.mode", {"strategy": "full", "training": {"mode": "full-graph"}}),
    ("", "one stage per layer", {"strategy": "retexo", "model": {"layers": 3}, "training": {"epochs": 2}},
     "training.epochs", {"strategy": "retexo", "model": {"layers": 3}, "training": {"epochs": 3}}),
    ("", "remove training.evalMode", {"strategy": "retexo", "training": {"evalMode": "sampled"}},
     "training.evalMode", {"strategy": "retexo", "training": {"evalMode": "exact"}}),
    ("", "apply to strategy grappa only", {"strategy": "full", "grappa": {"rounds": {"every": 3}}},
     "grappa.rounds", {"strategy": "full", "grappa": {"chunks": 4}}),
    ("", "apply to strategy grappa only", {"strategy": "varco", "grappa": {"shrinkage": 1.0}},
     "grappa.shrinkage", {"strategy": "varco"}),
    ("", "apply to strategy grappa only", {"strategy": "full", "grappa": {"halo": "cut"}},
     "grappa.halo", {"strategy": "full"}),
    ("", "grappa.halo self and neighbours change how the built-in layers", {"grappa": {"halo": "self"}, "model": {
        "custom": {"factory": "my_models:make_model"}}}, "grappa.halo",
     {"grappa": {"halo": "cut"}, "model": {"custom": {"factory": "my_models:make_model"}}}),
    ("", "grappa.halo neighbours needs the graph known to be undirected", {"grappa": {"halo": "neighbours"}},
     "grappa.halo", {"grappa": {"halo": "self"}}),
    ("", "varco settings apply to strategy varco only", {"varco": {"rMax": 64}},
     "varco", {"strategy": "varco", "varco": {"rMax": 64}}),
    ("", "link settings apply to task link-prediction only", {"link": {"negatives": 5}}, "link",
     {"task": "link-prediction", "link": {"negatives": 5}}),
    ("", "link.valFraction + link.testFraction must be < 1", {"task": "link-prediction", "link": {
        "valFraction": 0.5, "testFraction": 0.5}}, "link.valFraction",
     {"task": "link-prediction", "link": {"valFraction": 0.5, "testFraction": 0.4}}),
    ("", "is served by strategies grappa and full only", {"task": "link-prediction", "strategy": "varco"},
     "strategy", {"task": "link-prediction", "strategy": "full"}),
    ("", "task link-prediction is evaluated exactly",
     {"task": "link-prediction", "training": {"evalMode": "sampled"}}, "training.evalMode",
     {"task": "link-prediction", "training": {"evalMode": "exact"}}),
    ("", "task link-prediction is evaluated exactly",
     {"task": "link-prediction", "training": {"mode": "mini-batch"}}, "training.evalMode",
     {"task": "link-prediction", "training": {"mode": "mini-batch", "evalMode": "exact"}}),
    ("", "task link-prediction trains the built-in models", {"task": "link-prediction", "model": {
        "custom": {"factory": "my_models:make_model"}}}, "model.custom",
     {"model": {"custom": {"factory": "my_models:make_model"}}}),
    ("", "is an OGB link-prediction dataset", {"dataset": {"name": "ogbl-collab"}}, "dataset.name",
     {"task": "link-prediction", "dataset": {"name": "ogbl-collab"}}),
    ("", "a graph from tables (dataset.name: tables) does not have", {
        "task": "link-prediction", "dataset": {"name": "tables", "path": "g"},
        "predict": {"model": "/srv/run/model.pt", "pairs": "pairs.npy"}}, "spec.predict.pairs",
     {"task": "link-prediction", "dataset": {"name": "tables", "path": "g"},
      "predict": {"model": "/srv/run/model.pt"}}),
    ("", "masterPort must differ from metricsPort", {"metricsPort": 9000, "masterPort": 9000},
     "spec.masterPort", {"metricsPort": 0, "masterPort": 9000}),
    ("", "spec.partitions exceeds the dataset's nodes", {"partitions": 1000, "dataset": {
        "name": "csbm", "synthetic": {"numNodes": 500}}}, "spec.partitions",
     {"partitions": 500, "dataset": {"name": "csbm", "synthetic": {"numNodes": 500}}}),
    ("", "spec.partitions exceeds the dataset's nodes", {"partitions": 32, "dataset": {
        "name": "rmat", "synthetic": {"scale": 4}}}, "spec.partitions",
     {"partitions": 16, "dataset": {"name": "rmat", "synthetic": {"scale": 4}}}),
    ("", "spec.grappa.chunks exceeds the dataset's nodes", {"grappa": {"chunks": 3000}},
     "spec.grappa.chunks", {"grappa": {"chunks": 2708}}),
    ("dataset", "dataset.path is required", {"dataset": {"name": "arrays"}}, "dataset.path",
     {"dataset": {"name": "arrays", "path": "g"}}),
    ("dataset", "dataset.arrays applies to dataset.name 'arrays' only",
     {"dataset": {"arrays": {"features": "x.npy"}}}, "dataset.arrays",
     {"dataset": {"name": "arrays", "path": "g", "arrays": {"features": "x.npy"}}}),
    ("dataset", "dataset.tables applies to dataset.name 'tables' only",
     {"dataset": {"tables": {"danglingEdges": "drop"}}}, "dataset.tables",
     {"dataset": {"name": "tables", "path": "g", "tables": {"danglingEdges": "drop"}}}),
    ("dataset", "dataset.path is required", {"dataset": {"name": "tables"}}, "dataset.path",
     {"dataset": {"name": "tables", "path": "g"}}),
    ("dataset", "addInverseEdges applies to ogbn-*, ogbl-*, arrays and tables only",
     {"dataset": {"addInverseEdges": True}}, "dataset.addInverseEdges",
     {"dataset": {"name": "ogbn-arxiv", "addInverseEdges": True}, "partitions": 2}),
    ("dataset", "either edges or src/dst", {"dataset": {"name": "arrays", "path": "g", "arrays": {
        "edges": ["e.npy"], "src": ["s.npy"], "dst": ["d.npy"]}}}, "dataset.arrays",
     {"dataset": {"name": "arrays", "path": "g", "arrays": {"src": ["s.npy"], "dst": ["d.npy"]}}}),
    ("dataset", "pair every src file", {"dataset": {"name": "arrays", "path": "g", "arrays": {
        "src": ["s.npy"]}}}, "dataset.arrays.src",
     {"dataset": {"name": "arrays", "path": "g", "arrays": {"src": ["s.npy"], "dst": ["d.npy"]}}}),
    ("varco", "varco.rMin must be <= varco.rMax", {"strategy": "varco", "varco": {"rMin": 9, "rMax": 8}},
     "varco.rMin", {"strategy": "varco", "varco": {"rMin": 8, "rMax": 8}}),
    ("worker.env", "are set by the operator", {"worker": {"env": [{"name": "RANK", "value": "1"}]}},
     "spec.worker.env[0].name", {"worker": {"env": [{"name": "MY_RANK", "value": "1"}]}}),
    ("aggregator.env", "are set by the operator", {"aggregator": {"env": [{"name": "MASTER_ADDR", "value": "x"}]}},
     "spec.aggregator.env[0].name", {"aggregator": {"env": [{"name": "ADDR", "value": "x"}]}}),
    ("predict", "must name a model file ending in .pt", {"predict": {"model": "/srv/run/model.bin"}},
     "spec.predict.model", {"predict": {"model": "/srv/run/model.pt"}}),
    ("predict", "candidates and topK choose the best candidates of spec.predict.queries",
     {"predict": {"model": "/srv/run/model.pt", "topK": 5}}, "spec.predict.queries",
     {"predict": {"model": "/srv/run/model.pt", "topK": 5, "queries": "q.npy"}}),
    ("", "storage.fetch fetches the rounds of strategy grappa only", {"strategy": "full", "storage": {
        "hostPath": "/srv", "fetch": "prefetch"}}, "storage.fetch",
     {"strategy": "full", "storage": {"hostPath": "/srv", "fetch": "direct"}}),
    ("", "storage.fetch direct reads the store through memory maps", {"storage": {
        "hostPath": "/srv", "s3": {"bucket": "graphs"}}}, "storage.fetch",
     {"storage": {"hostPath": "/srv", "fetch": "prefetch", "s3": {"bucket": "graphs"}}}),
    ("storage", "exactly one of claimName or hostPath", {"storage": {"hostPath": "/a", "claimName": "c"}},
     "spec.storage", {"storage": {"claimName": "c"}}),
    # no volume: the store and the run in the bucket, which storage.s3 must then name
    ("storage", "or neither with s3.bucket", {"storage": {"fetch": "prefetch", "s3": {"prefix": "g/"}}},
     "spec.storage", {"storage": {"fetch": "prefetch", "s3": {"bucket": "graphs", "prefix": "g/"}}}),
    ("storage", "storage.s3.runPrefix is the operator's to set", {"storage": {
        "fetch": "prefetch", "s3": {"bucket": "graphs", "runPrefix": "runs/mine/"}}}, "spec.storage",
     {"storage": {"fetch": "prefetch", "s3": {"bucket": "graphs"}}}),
    ("", "strategy retexo keeps its workers' stage rows in the run directory", {
        "strategy": "retexo", "training": {"epochs": 4}, "storage": {"s3": {"bucket": "graphs"}}},
     "claimName", {"strategy": "retexo", "training": {"epochs": 4},
                   "storage": {"hostPath": "/srv", "s3": {"bucket": "graphs"}}}),
    ("", "spec.predict reads its model and writes its outputs on the job's volume", {
        "storage": {"fetch": "prefetch", "s3": {"bucket": "graphs"}}, "predict": {"model": "/srv/m.pt"}},
     "claimName", {"storage": {"hostPath": "/srv", "fetch": "prefetch", "s3": {"bucket": "graphs"}},
                   "predict": {"model": "/srv/m.pt"}}),
]


@pytest.mark.parametrize("where,words,bad,field,fix", CASES, ids=[f"{c[0] or 'spec'}: {c[1]}" for c in CASES])
def test_rule_and_its_twin(where, words, bad, field, fix):
    assert any(words in m for m in messages(node(where))), f"no CEL rule saying {words!r} at spec.{where}"
    error = twin_error(merged(bad))
    assert error is not None and field in error, error
    assert twin_error(merged(fix)) is None, twin_error(merged(fix))


def test_every_rule_is_tested():
    tested = {(w, words) for w, words, *_ in CASES}
    untested = []
    for where in ("", "dataset", "varco", "worker.env", "aggregator.env", "storage", "predict"):
        for m in messages(node(where)):
            if "cannot change once the job exists" not in m and not any(
                    w == where and words in m for w, words in tested):
                untested.append(f"spec.{where}: {m}")
    assert not untested, "\n".join(untested)


@pytest.mark.parametrize("name,ok", [("demo", True), ("a" * 52, True), ("a" * 53, False),
                                     ("Demo", False), ("1job", False), ("job.v2", False), ("job-", False)])
def test_job_name_rule_and_twin(name, ok):
    """metadata.name: maxLength in the schema, DNS-1035 as CEL at the root, InvalidName in the operator."""
    rules = ROOT["x-kubernetes-validations"]
    assert any("DNS-1035" in r["message"] and "52" in r["message"] for r in rules)
    assert ROOT["properties"]["metadata"]["properties"]["name"]["maxLength"] == 52
    pattern = re.search(r"matches\('(.*)'\)", rules[0]["rule"]).group(1)
    assert (re.match(pattern, name) is not None and len(name) <= 52) == ok  # the rule's own regex
    assert (twin_error(BASE, name) is None) == ok


IMMUTABLE = ["strategy", "partitions", "task", "dataset", "model", "link", "storage", "predict"]


@pytest.mark.parametrize("field", IMMUTABLE)
def test_fields_that_define_the_store_are_immutable(field):
    rules = node(field)["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf", "message": next(
        r["message"] for r in rules if r["rule"] == "self == oldSelf")} in rules
    assert any(f"spec.{field} cannot change" in r["message"] for r in rules)


def test_store_settings_of_grappa_are_immutable():
    rules = {r["fieldPath"]: r["rule"] for r in node("grappa")["x-kubernetes-validations"]}
    assert "oldSelf.chunks" in rules[".chunks"] and "has(oldSelf.chunks)" in rules[".chunks"]
    assert rules[".partitionSeed"] == "self.partitionSeed == oldSelf.partitionSeed"
    # everything else may change (takes effect at the next group start)
    for field in ("training", "runPolicy", "worker", "aggregator", "checkpoint", "prepare"):
        assert not any("oldSelf" in r["rule"] for r in node(field).get("x-kubernetes-validations", []))


def test_field_paths_exist():
    """fieldPath must name a field of the schema, or the API server refuses the CRD."""
    for where in ("", "dataset", "varco", "grappa", "worker.env", "storage"):
        for r in node(where).get("x-kubernetes-validations", []):
            if "fieldPath" in r:
                target = node(where)
                for part in r["fieldPath"].strip(".").split("."):
                    target = target["properties"][part]


# ---- cost: every value a rule reads has a maximum size ------------------------------------

def _bounded(schema: dict[str, Any], path: str, problems: list[str]) -> int:
    """An upper bound of the bytes under `schema`; records every unbounded string, list or map."""
    typ = schema.get("type")
    if typ == "string":
        if "maxLength" not in schema:
            problems.append(f"{path}: string without maxLength")
            return 0
        return schema["maxLength"]
    if typ == "array":
        if "maxItems" not in schema:
            problems.append(f"{path}: list without maxItems")
            return 0
        return schema["maxItems"] * max(1, _bounded(schema["items"], f"{path}[]", problems))
    if typ == "object":
        if "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{path}: map or free-form object")
            return 0
        return sum(_bounded(p, f"{path}.{k}", problems) for k, p in (schema.get("properties") or {}).items())
    return 8


def _read_paths(expr: str) -> set[str]:
    """The field paths a rule reads from self/oldSelf. A list iterated by a macro (all, exists)
    counts as its length plus what the body reads of each item ('list.[].field')."""
    paths = set()
    for m in re.finditer(r"\b(?:self|oldSelf)((?:\.[A-Za-z_][A-Za-z0-9_]*(?![\w(]))*)", expr):
        path = m.group(1).lstrip(".")
        macro = re.match(r"\.(?:all|exists)\((\w+),", expr[m.end():])
        if macro is None:
            paths.add(path)
            continue
        paths.add(f"{path}.#len" if path else "#len")
        for item in re.finditer(rf"\b{macro.group(1)}((?:\.\w+)+)", expr[m.end():]):
            paths.add(f"{path}.[]{item.group(1)}".lstrip("."))
    return paths


def _rule_nodes(schema: dict[str, Any], path: str = "root"):
    if schema.get("x-kubernetes-validations"):
        yield path, schema
    for k, sub in (schema.get("properties") or {}).items():
        yield from _rule_nodes(sub, f"{path}.{k}")
    if "items" in schema:
        yield from _rule_nodes(schema["items"], f"{path}[]")


def test_rules_read_only_bounded_values():
    problems: list[str] = []
    largest = 0
    for where, schema in _rule_nodes(ROOT):
        for r in schema["x-kubernetes-validations"]:
            for read in _read_paths(r["rule"]):
                target, label = schema, f"{where}: {r['rule'][:40]}... reads {read}"
                for part in filter(None, read.split(".")):
                    if part == "#len":  # only the length is read: the list needs a maxItems
                        if "maxItems" not in target:
                            problems.append(f"{label}: list without maxItems")
                        target = {"type": "integer"}
                    elif part == "[]":
                        target = target["items"]
                    else:
                        target = (target.get("properties") or {}).get(part, target)
                largest = max(largest, _bounded(target, label, problems))
    assert not problems, "\n".join(problems)
    # The API server estimates 4 bytes per character of maxLength and about 0.1 cost units per
    # byte compared; the biggest value a rule compares (spec.dataset) must stay well inside its
    # per-rule limit of 10,000,000 units (a tenth of it here, for the traversal on top).
    assert largest * 4 * 0.1 < 1_000_000, largest


def test_bounds_are_shared_with_the_models():
    """The bounds that keep CEL cheap are validated by pydantic too (one source of truth)."""
    assert twin_error(merged({"dataset": {"name": "arrays", "path": "g" * 4097}})) is not None
    assert twin_error(merged({"dataset": {"name": "arrays", "path": "g", "arrays": {
        "edges": [f"e{i}.npy" for i in range(257)]}}})) is not None
    assert twin_error(merged({"worker": {"env": [{"name": f"V{i}", "value": ""} for i in range(257)]}})) is not None
    assert twin_error(merged({"storage": {"claimName": "c" * 254}})) is not None


def test_a_template_overhead_is_refused_by_a_rule_and_its_twin():
    """Kubernetes refuses a pod whose overhead differs from its RuntimeClass's, which the CRD cannot
    read: an overhead is refused at admission, on the field, saying so (issue 35)."""
    for role in ("aggregator", "worker"):
        rules = node(f"{role}.template.spec.overhead")["x-kubernetes-validations"]
        assert [r["rule"] for r in rules] == ["false"]
        assert "RuntimeClass" in rules[0]["message"] and "cannot read" in rules[0]["message"]
        error = twin_error(merged({role: {"template": {"spec": {"overhead": {"cpu": "250m"}}}}}))
        assert error is not None and f"spec.{role}.template.spec: overhead: " in error, error
        assert "RuntimeClass" in error
        assert twin_error(merged({role: {"template": {"spec": {"runtimeClassName": "kata"}}}})) is None
