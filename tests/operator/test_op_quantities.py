"""A malformed resource quantity is refused at admission, naming the field (issue 28, item 3): the
CRD's pattern on every quantity of every role and of the templates' PodSpecs, and its twin in the
operator (the kubernetes client's parser), which agree on what a quantity is."""
from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

from grappa_operator import crdgen, quantities
from grappa_operator.api import parse_spec
from grappa_operator.errors import SpecError

BASE = {"partitions": 2, "dataset": {"name": "cora"}, "storage": {"hostPath": "/srv/grappa"}}

GOOD = ["500m", "2", "4Gi", "1.5", ".5", "1e3", "1E3", "2k", "64Mi", "0", "+1", "100n", "5Ei"]
BAD = ["lots", "", "-1", "1.5.3", "2 Gi", "4GB", "1Zi", "0x10", "m", "--1", "1e", "Gi"]


@pytest.mark.parametrize("text", GOOD + BAD)
def test_the_crd_pattern_and_the_operators_parser_agree(text):
    assert (re.fullmatch(quantities.PATTERN, text) is not None) == (text in GOOD)
    assert (quantities.parse(text) is not None) == (text in GOOD)


def test_integers_are_quantities():
    assert quantities.parse(2) == 2 and quantities.parse(True) is None and quantities.parse(-1) is None


@pytest.mark.parametrize("where,field", [
    ({"worker": {"resources": {"requests": {"cpu": "lots"}}}}, "spec.worker.resources.requests.cpu"),
    ({"aggregator": {"resources": {"requests": {"memory": "4GB"}}}}, "spec.aggregator.resources.requests.memory"),
    ({"worker": {"resources": {"limits": {"cpu": "-2"}}}}, "spec.worker.resources.limits.cpu"),
    ({"aggregator": {"resources": {"limits": {"nvidia.com/gpu": "one"}}}},
     "spec.aggregator.resources.limits.nvidia.com/gpu"),
])
def test_the_operator_refuses_a_role_quantity_naming_the_field(where, field):
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, **where})
    assert info.value.reason == "InvalidSpec"
    assert f"{field}: " in info.value.message and "Kubernetes quantity such as 500m, 2 or 4Gi" in info.value.message


@pytest.mark.parametrize("template,path", [
    ({"containers": [{"name": "grappa"}, {"name": "shipper", "resources": {"requests": {"cpu": "lots"}}}]},
     "containers[1].resources.requests.cpu"),
    ({"initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"limits": {"memory": "big"}}}]},
     "initContainers[0].resources.limits.memory"),
    ({"overhead": {"cpu": "x"}}, "overhead.cpu"),
    ({"resources": {"requests": {"cpu": "1 core"}}}, "resources.requests.cpu"),
])
@pytest.mark.parametrize("role", ["aggregator", "worker"])
def test_the_operator_refuses_a_template_quantity_naming_the_field(role, template, path):
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, role: {"template": {"spec": template}}})
    assert f"spec.{role}.template.spec: {path}: " in info.value.message, info.value.message


def test_good_quantities_are_kept_as_written():
    # (a template's pod-level resources: its overhead is refused, test_op_cel.py)
    spec = parse_spec({**BASE, "worker": {"resources": {"requests": {"cpu": 2, "memory": "1.5Gi"}},
                                          "template": {"spec": {"resources": {"requests": {"cpu": "250m"}}}}}})
    assert spec.worker.resources.requests == {"cpu": 2, "memory": "1.5Gi"}
    assert spec.worker.template.spec == {"resources": {"requests": {"cpu": "250m"}}}


def _quantity_nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("x-kubernetes-int-or-string"):
            yield path, node
        for key, sub in node.items():
            yield from _quantity_nodes(sub, f"{path}.{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _quantity_nodes(sub, f"{path}[{i}]")


def test_every_quantity_in_the_crd_carries_the_pattern():
    spec = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    nodes = dict(_quantity_nodes(spec))
    for role in ("aggregator", "worker"):
        base = f".properties.{role}.properties"
        expected = [f"{base}.resources.properties.{k}.additionalProperties" for k in ("requests", "limits")]
        tpl = f"{base}.template.properties.spec.properties"
        expected += [f"{tpl}.{c}.items.properties.resources.properties.{k}.additionalProperties"
                     for c in ("containers", "initContainers") for k in ("requests", "limits")]
        expected += [f"{tpl}.overhead.additionalProperties"]
        expected += [f"{tpl}.resources.properties.{k}.additionalProperties" for k in ("requests", "limits")]
        assert set(expected) <= set(nodes), sorted(nodes)
    assert nodes and all(n.get("pattern") == quantities.PATTERN for n in nodes.values())


def test_the_template_spec_stays_free_form_without_defaults():
    spec = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    tpl = spec["properties"]["worker"]["properties"]["template"]["properties"]["spec"]
    assert tpl["x-kubernetes-preserve-unknown-fields"] is True and "default" not in tpl

    def defaults(node: Any) -> list[Any]:
        if isinstance(node, dict):
            return ([node["default"]] if "default" in node else []) + [d for v in node.values() for d in defaults(v)]
        return [d for v in node for d in defaults(v)] if isinstance(node, list) else []
    assert defaults(tpl) == []  # nothing added to a user's containers or PodSpec


def _admits(node: dict[str, Any], value: Any) -> bool:
    """What the API server's OpenAPI validation checks of one quantity node: `pattern` applies to
    strings only, `minimum` to numbers only."""
    if isinstance(value, str):
        return re.search(node["pattern"], value) is not None
    return "minimum" not in node or value >= node["minimum"]


@pytest.mark.parametrize("value,ok", [(2, True), (0, True), (-1, False), ("-1", False), ("2", True)])
def test_a_negative_integer_quantity_is_refused_by_the_crd_like_the_string(value, ok):
    """`cpu: -1` written as an integer passed the CRD (the pattern sees strings only): every
    quantity node also carries `minimum: 0`, and the operator's twin agrees (issue 35)."""
    spec = crdgen.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    nodes = dict(_quantity_nodes(spec))
    assert nodes and all(_admits(n, value) == ok for n in nodes.values()), value
    assert (quantities.parse(value) is not None) == ok
