"""P shards as threads in one process, each with its own model replica, exchanging rows through
memory (ThreadPeers): the full-communication paths without gloo."""
import threading

from grappa.config import TrainConfig
from grappa.data.store.chunk_store import ChunkStore
from grappa.models import GNN
from grappa.strategies import make_strategy
from grappa.strategies.full.halo_exchange import ThreadPeers
from grappa.strategies.grappa.rounds import RoundDecision


def run_shards(cfg: TrainConfig, state: dict, num_features: int, num_classes: int):
    """One full-graph step per shard; returns (shards, contributions, hub)."""
    store = ChunkStore(cfg.store_path)
    hub = ThreadPeers(cfg.partitions)
    shards, results, errors = [None] * cfg.partitions, [None] * cfg.partitions, []

    def work(i: int) -> None:
        try:
            model = GNN(cfg.model, num_features, num_classes)
            model.load_state_dict(state)
            s = shards[i] = make_strategy(cfg, i + 1, store, model, hub.bind(i))
            s.setup_round(RoundDecision(0, 0, 0))
            (batch,) = s.start_epoch(0)
            results[i] = s.contribute(batch, 1.0)
        except Exception as e:  # noqa: BLE001 - surfaced below; a hung peer would time out instead
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(cfg.partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return shards, results, hub
