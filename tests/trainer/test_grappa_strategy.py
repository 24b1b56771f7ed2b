"""GrappaStrategy across a round boundary: the new variable chunk, nothing of the old round kept."""
import gc
import weakref

import torch

from grappa.config import TrainConfig
from grappa.data.local_graph import build_local_graph
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models import GNN
from grappa.strategies import base, make_strategy
from grappa.strategies.grappa.rounds import RoundDecision, round_seed


def test_round_switch_frees_the_old_round(tmp_path, monkeypatch):
    cfg = TrainConfig.model_validate({
        "partitions": 2, "grappa": {"chunks": 4}, "dataset": {"name": "csbm", "synthetic": {"numNodes": 800, "numFeatures": 8}},
        "model": {"arch": "sage", "layers": 2, "hidden": 8}, "training": {"mode": "mini-batch", "fanouts": [3, 3]},
        "storeDir": str(tmp_path / "store")})
    prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    model = GNN(cfg.model, 8, int(store.manifest["num_classes"]))
    strategy = make_strategy(cfg, 1, store, model)
    strategy.setup_round(RoundDecision(0, round_seed(cfg.grappa.partition_seed, 0), 0))
    old_graph, old_sampler = weakref.ref(strategy.graph), weakref.ref(strategy.sampler)
    old_nodes = set(strategy.graph.global_ids[:strategy.graph.num_owned].tolist())
    alive_at_build = []

    def build(*args):
        gc.collect()
        alive_at_build.append(old_graph() is not None or old_sampler() is not None)
        return build_local_graph(*args)
    monkeypatch.setattr(base, "build_local_graph", build)
    strategy.setup_round(RoundDecision(1, round_seed(cfg.grappa.partition_seed, 1), 3))
    # Gone before the new graph is built: the peak never holds two rounds.
    assert alive_at_build == [False]
    new_nodes = set(strategy.graph.global_ids[:strategy.graph.num_owned].tolist())
    assert new_nodes != old_nodes  # the variable chunk moved
    assert torch.isfinite(strategy.cov).all()
