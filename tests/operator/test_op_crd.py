"""The committed CRD matches the model and is a structural schema Kubernetes accepts."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from grappa_operator import crdgen

# JSONSchemaProps fields of apiextensions.k8s.io/v1
ALLOWED = {
    "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "multipleOf",
    "enum", "maxProperties", "minProperties", "required", "items", "properties", "additionalProperties",
    "nullable", "example", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-validations", "x-kubernetes-embedded-resource",
}
# Structural schemas forbid these (or we never want them): refs, composition carrying types, etc.
FORBIDDEN = {"$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "not", "const",
             "patternProperties", "dependencies", "additionalItems", "uniqueItems", "$schema", "id"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def _walk(node, path, problems):
    if not isinstance(node, dict):
        problems.append(f"{path}: not a mapping")
        return
    for key in node:
        if key in FORBIDDEN:
            problems.append(f"{path}: forbidden keyword {key}")
        elif key not in ALLOWED:
            problems.append(f"{path}: unknown keyword {key}")
    typed = node.get("type") in TYPES
    if not typed and not (node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")):
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties together with additionalProperties")
    if isinstance(node.get("additionalProperties"), bool):
        problems.append(f"{path}: boolean additionalProperties")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node and not isinstance(node[bound], bool):
            problems.append(f"{path}: {bound} must be a boolean in OpenAPI v3.0")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: array without items")
    if "enum" in node and "default" in node and node["default"] not in node["enum"]:
        problems.append(f"{path}: default not in enum")
    if "default" in node:
        _check_default(node, node["default"], path, problems)
    for name, sub in (node.get("properties") or {}).items():
        _walk(sub, f"{path}.{name}", problems)
    if isinstance(node.get("additionalProperties"), dict):
        _walk(node["additionalProperties"], f"{path}.*", problems)
    if "items" in node:
        _walk(node["items"], f"{path}[]", problems)
    for req in node.get("required", []):
        if req not in (node.get("properties") or {}):
            problems.append(f"{path}: required {req} is not a property")


def _check_default(node, value, path, problems):
    typ = node.get("type")
    ok = {"object": dict, "array": list, "string": str, "boolean": bool}.get(typ)
    if typ == "integer":
        good = isinstance(value, int) and not isinstance(value, bool)
    elif typ == "number":
        good = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        good = ok is None or isinstance(value, ok)
    if not good:
        problems.append(f"{path}: default {value!r} is not a {typ}")
    if typ in ("integer", "number") and good:
        if "minimum" in node and value < node["minimum"]:
            problems.append(f"{path}: default below minimum")
        if "maximum" in node and value > node["maximum"]:
            problems.append(f"{path}: default above maximum")
    if typ == "object" and isinstance(value, dict) and value == {} and node.get("required"):
        problems.append(f"{path}: default {{}} misses required fields")


def test_committed_crd_is_current():
    proc = subprocess.run([sys.executable, "-m", "grappa_operator.crdgen", "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + " -- run `make crd`"


def test_check_detects_drift(tmp_path, monkeypatch):
    stale = tmp_path / "crd.yaml"
    stale.write_text("old")
    monkeypatch.setattr(crdgen, "OUTPUTS", (stale,))
    assert crdgen.main(["--check"]) == 1
    assert crdgen.main(["--write"]) == 0
    assert crdgen.main(["--check"]) == 0


def test_schema_is_structural():
    crd = yaml.safe_load(crdgen.render())
    version = crd["spec"]["versions"][0]
    problems: list[str] = []
    _walk(version["schema"]["openAPIV3Schema"], "root", problems)
    assert not problems, "\n".join(problems)


def test_crd_shape():
    crd = yaml.safe_load(crdgen.render())
    assert crd["metadata"]["name"] == "grappajobs.grappa.dev"
    assert crd["spec"]["names"]["shortNames"] == ["gj"]
    v = crd["spec"]["versions"][0]
    assert v["name"] == "v1alpha1" and v["subresources"] == {"status": {}}
    cols = [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Phase", "Epoch", "Val-Acc", "Test-Acc", "Test-MRR", "ETA-Seconds", "Age"]  # test_op_columns.py
    spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["partitions"]["default"] == 4
    assert spec["properties"]["runPolicy"]["properties"]["cleanPodPolicy"]["enum"] == ["All", "Running", "None"]
    # an Optional section stays absent (absent = off): no {} default on plateau
    rounds = spec["properties"]["grappa"]["properties"]["rounds"]["properties"]
    assert "default" not in rounds["plateau"]
    status = v["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["progress"]["x-kubernetes-preserve-unknown-fields"] is True


def test_defaults_in_crd_match_the_model():
    """Server-side defaults must equal what the operator would assume for a missing field."""
    from grappa_operator.api import parse_spec
    crd = yaml.safe_load(crdgen.render())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def defaults(node):
        if node.get("type") != "object" or "properties" not in node:
            return node.get("default")
        out = {}
        for k, sub in node["properties"].items():
            d = defaults(sub) if (sub.get("type") == "object" and "default" in sub) else sub.get("default")
            if d is not None:
                out[k] = d
        return out

    applied = defaults(spec)
    applied["storage"] = {"hostPath": "/srv"}
    model = parse_spec(applied).model_dump(by_alias=True, exclude_none=True)
    assert model == parse_spec({"storage": {"hostPath": "/srv"}}).model_dump(by_alias=True, exclude_none=True)


def test_section_defaults_are_written_out_whole():
    """The API server checks a section's default against the section's CEL rules without
    defaulting inside it (a `{}` default made the CRD invalid: "no such key: rMin"), so every
    defaulted section carries each of its fields' defaults, nested sections included."""
    crd = yaml.safe_load(crdgen.render())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    problems = []

    def check(node, path):
        for name, sub in (node.get("properties") or {}).items():
            if sub.get("type") == "object" and "properties" in sub and "default" in sub:
                want = {k for k, f in sub["properties"].items() if "default" in f}
                if set(sub["default"]) != want:
                    problems.append(f"{path}.{name}: default has {sorted(sub['default'])}, fields with defaults {sorted(want)}")
            check(sub, f"{path}.{name}")

    check(spec, "spec")
    assert not problems, "\n".join(problems)
    assert spec["properties"]["varco"]["default"]["rMin"] == 1.0


def test_crd_round_trips_through_the_official_client_model():
    """Every key is a field of apiextensions.k8s.io/v1 (the client model would drop unknown ones)."""
    import json

    import kubernetes
    crd = yaml.safe_load(crdgen.render())
    model = kubernetes.client.V1CustomResourceDefinition.from_dict(crd)
    back = kubernetes.client.ApiClient().sanitize_for_serialization(model)
    assert json.dumps(back, sort_keys=True) == json.dumps(crd, sort_keys=True)


def _violations(schema, value, path="spec"):
    """The subset of OpenAPI validation the API server applies to our schema (after pruning)."""
    import re as _re
    if value is None:
        return []  # non-nullable nulls are pruned before validation
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, (int, str)) and not isinstance(value, bool)
        return [] if ok else [path]
    typ = schema.get("type")
    checks = {"object": dict, "array": list, "string": str, "boolean": bool}
    if typ == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [path]
    elif typ == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return [path]
    elif typ in checks and not isinstance(value, checks[typ]):
        return [path]
    out = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(path)
    if typ in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and (value < lo or (schema.get("exclusiveMinimum") and value == lo)):
            out.append(path)
        if hi is not None and (value > hi or (schema.get("exclusiveMaximum") and value == hi)):
            out.append(path)
    if typ == "string":
        if len(value) < schema.get("minLength", 0) or ("pattern" in schema and not _re.search(schema["pattern"], value)):
            out.append(path)
    if typ == "object":
        props = schema.get("properties", {})
        out += [f"{path}.{r}" for r in schema.get("required", []) if r not in value]
        for k, v in value.items():
            if k in props:
                out += _violations(props[k], v, f"{path}.{k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += _violations(schema["additionalProperties"], v, f"{path}.{k}")
    if typ == "array":
        for i, item in enumerate(value):
            out += _violations(schema["items"], item, f"{path}[{i}]")
    return out


def test_crd_rejects_what_the_model_rejects():
    """Single source of truth: every single-field error of the model is also a schema error."""
    from test_op_api import MALFORMED, _with
    crd = yaml.safe_load(crdgen.render())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    unknown_fields = {"unknownField", "dataset.colour"}  # rejected by kubectl's strict field validation
    for path, value in MALFORMED:
        if path in unknown_fields:
            continue
        problems = _violations(spec_schema, _with(path, value))
        assert problems, f"{path}={value!r} is admitted by the CRD schema"
        assert any(path.split(".")[0] in p for p in problems), problems
    assert _violations(spec_schema, {"storage": {"hostPath": "/srv"}, "partitions": 4,
                                     "worker": {"resources": {"requests": {"cpu": 1, "memory": "1Gi"}}}}) == []


def test_storage_source_rule_is_in_the_crd():
    """The storage rule as CEL in the CRD says what the model's validator says."""
    from grappa_operator.api import ONE_STORAGE_SOURCE, parse_spec
    from grappa_operator.errors import SpecError
    crd = yaml.safe_load(crdgen.render())
    storage = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"]
    assert storage["x-kubernetes-validations"][0] == {
        "rule": "has(self.claimName) != has(self.hostPath) || (!has(self.claimName) && has(self.s3) "
                "&& has(self.s3.bucket))", "message": ONE_STORAGE_SOURCE}
    for bad in ({"mountPath": "/grappa"}, {"claimName": "data", "hostPath": "/srv"},
                {"fetch": "prefetch", "s3": {"prefix": "g/"}},
                {"claimName": "data", "hostPath": "/srv", "fetch": "prefetch", "s3": {"bucket": "graphs"}}):
        with pytest.raises(SpecError, match=re.escape(ONE_STORAGE_SOURCE)):
            parse_spec({"storage": bad})
