"""Schema tests: malformed GrappaJobs are rejected with a message naming the field."""
from __future__ import annotations

import pytest

from grappa_operator.api import GrappaJobSpec, parse_spec
from grappa_operator.errors import SpecError

OK = {"storage": {"hostPath": "/srv"}}


def _with(path: str, value):
    raw = {"storage": {"hostPath": "/srv"}}
    node = raw
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return raw


MALFORMED = [
    ("partitions", 0),
    ("partitions", 5000),
    ("partitions", "four"),
    ("dataset.name", "imagenet"),
    ("dataset.synthetic.numNodes", 1),
    ("dataset.synthetic.homophily", 1.5),
    ("model.arch", "transformer"),
    ("model.layers", 0),
    ("model.dropout", 1.0),
    ("training.mode", "online"),
    ("training.epochs", 0),
    ("training.lr", 0),
    ("training.optimizer", "lbfgs"),
    ("training.evalEvery", 0),
    ("grappa.correction", "edge"),
    ("grappa.shrinkage", 2),
    ("grappa.rounds.every", -1),
    ("grappa.rounds.pairing", "greedy"),
    ("grappa.rounds.plateau.patience", 0),
    ("checkpoint.interval", -5),
    ("metricsPort", 70000),
    ("masterPort", 0),
    ("runPolicy.backoffLimit", -1),
    ("runPolicy.cleanPodPolicy", "Some"),
    ("runPolicy.activeDeadlineSeconds", 0),
    ("schedulingPolicy.provider", "kueue"),
    ("worker.imagePullPolicy", "Sometimes"),
    ("aggregator.tolerations", [{"operator": "Maybe"}]),
    ("worker.env", [{"value": "x"}]),
    ("storage.hostPath", "relative/path"),
    ("storage.mountPath", "no-slash"),
    ("unknownField", 1),
    ("dataset.colour", "red"),
]


@pytest.mark.parametrize("path,value", MALFORMED, ids=[f"{p}={v!r}" for p, v in MALFORMED])
def test_malformed_spec_names_the_field(path, value):
    with pytest.raises(SpecError) as info:
        parse_spec(_with(path, value))
    leaf_parent = path.split(".")[0]
    assert f"spec.{leaf_parent}" in info.value.message
    assert path.split(".")[-1] in info.value.message or path.split(".")[-2] in info.value.message
    assert info.value.reason == "InvalidSpec"


@pytest.mark.parametrize("raw,field", [
    ({}, "spec.storage"),
    ({"storage": {}}, "spec.storage"),
    ({"storage": {"hostPath": "/a", "claimName": "c"}}, "spec.storage"),
    ({**OK, "partitions": 4, "grappa": {"chunks": 2}}, "grappa.chunks"),
    ({**OK, "model": {"layers": 2}, "training": {"fanouts": [5]}}, "training.fanouts"),
    ({**OK, "dataset": {"name": "file"}}, "dataset.path"),
    ("not a mapping", "spec"),
])
def test_cross_field_errors(raw, field):
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert field in info.value.message


def test_malformed_table_is_big_enough():
    assert len(MALFORMED) >= 20


def test_defaults_and_camel_case():
    spec = parse_spec({"storage": {"claimName": "data"}, "runPolicy": {"backoffLimit": 1}})
    assert spec.run_policy.backoff_limit == 1
    assert spec.partitions == 4 and spec.storage.mount_path == "/grappa"
    wire = spec.model_dump(by_alias=True)
    assert "runPolicy" in wire and "metricsPort" in wire


def test_sections_are_the_trainer_models():
    # single source of truth: the spec embeds grappa.config's classes, not copies
    from grappa import config
    fields = GrappaJobSpec.model_fields
    assert fields["dataset"].annotation is config.DatasetConfig
    assert fields["grappa"].annotation is config.GrappaConfig
    assert fields["training"].annotation is config.TrainingConfig
