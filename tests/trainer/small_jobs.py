"""A small real job for multi-process tests: CSBM, 600 nodes, P = 2, hidden 16, 3 epochs, its
store prepared; overrides by dotted camelCase path ("training.mode": "mini-batch")."""
from pathlib import Path

from grappa.config import TrainConfig
from grappa.data.store.preparation import prepare_store


def csbm_job(tmp_path: Path, **overrides) -> TrainConfig:
    base = {"partitions": 2, "dataset": {"name": "csbm", "synthetic": {"numNodes": 600}},
            "model": {"hidden": 16}, "training": {"epochs": 3},
            "runDir": str(tmp_path / "run"), "storeDir": str(tmp_path / "store")}
    for k, v in overrides.items():
        node = base
        *parents, leaf = k.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    cfg = TrainConfig.model_validate(base)
    prepare_store(cfg, progress=False)
    return cfg
