"""Link prediction (task: link-prediction): the split, the gradient at P = 1 against a single
process, the edges' assignment to workers, the ranking metrics against straightforward loops, the
refusals, and a real local run whose reported test metrics a single process reproduces."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from grappa.config import ConfigError, TrainConfig, config_with
from grappa.data.blocks import full_blocks
from grappa.data.datasets import load_dataset
from grappa.data.errors import DatasetError
from grappa.data.link_split import LinkEdges, check_edges, split_edges, supervision_in
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.models.params import flat_grads
from grappa.strategies.base import epoch_seed
from grappa.strategies.grappa.reducer import combine
from grappa.strategies.grappa.rounds import RoundDecision, round_seed
from grappa.strategies.grappa.strategy import GrappaStrategy
from grappa.tasks import build_task_model
from grappa.tasks import link_prediction as lp

LINK = "link-prediction"


def link_cfg(tmp_path: Path, partitions: int = 1, **over) -> TrainConfig:
    data = {"partitions": partitions, "task": LINK, "dataset": {"name": "cora"},
            "model": {"hidden": 16, "dropout": 0.0}, "training": {"epochs": 3},
            "link": {"negatives": 3, "evalNegatives": 50, "sharedNegatives": 500},
            "runDir": str(tmp_path / "run"), "storeDir": str(tmp_path / "store")}
    return config_with(data, over)


def keys(e: np.ndarray, n: int) -> set[int]:
    return set((np.asarray(e[0], np.int64) * n + np.asarray(e[1], np.int64)).tolist())


def store_edges(store: ChunkStore) -> np.ndarray:
    """Every (src, dst) the store's CSR holds: what message passing sees."""
    return torch.cat([store.load_chunk(k).edge_index for k in range(store.num_chunks)], 1).numpy()


# -- the split ---------------------------------------------------------------------------------

def test_the_store_never_passes_messages_over_a_val_or_test_edge(data_root, tmp_path):
    cfg = link_cfg(tmp_path, partitions=2, **{"grappa.chunks": 3})
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    link = LinkEdges(cfg.store_path, man)
    data = load_dataset(cfg.dataset)
    n = data.num_nodes
    held = keys(store_edges(store), n)
    assert link.undirected
    for split in ("val", "test"):
        e = np.asarray(link[split])
        assert not keys(e, n) & held and not keys(e[::-1], n) & held, split  # neither direction
    train = np.asarray(link["train"])
    assert keys(train, n) | keys(train[::-1], n) == held  # both directions of every training edge
    # train + val + test is every undirected edge of Cora once, cut as RandomLinkSplit cuts
    e = data.edge_index.numpy()
    canon = keys(np.stack([e.min(0), e.max(0)]), n)
    parts = [keys(np.asarray(link[s]), n) for s in ("train", "val", "test")]
    assert set().union(*parts) == canon and sum(map(len, parts)) == len(canon)
    m = len(canon)
    assert [len(p) for p in parts] == [m - int(0.1 * m) - int(0.2 * m), int(0.1 * m), int(0.2 * m)]
    assert man["num_edges"] == 2 * len(parts[0])


def test_a_split_is_seeded_and_a_directed_graph_stays_directed():
    rng = np.random.default_rng(3)
    e = rng.integers(0, 40, size=(2, 300))
    a = split_edges(e, 40, 0.1, 0.2, seed=1)
    b = split_edges(e, 40, 0.1, 0.2, seed=1)
    c = split_edges(e, 40, 0.1, 0.2, seed=2)
    assert not a.undirected
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("train", "val", "test"))
    assert not np.array_equal(a.test, c.test)
    assert np.array_equal(a.message, a.train)  # directed: only the training edges, as given
    assert not keys(a.val, 40) & keys(a.message, 40) and not keys(a.test, 40) & keys(a.message, 40)


# -- the gradient ------------------------------------------------------------------------------

def pyg_gcn_embeddings(model, x, edge_index):
    """The same parameters in PyG's GCNConv (symmetric normalisation with self-loops)."""
    from torch_geometric.nn import GCNConv
    convs = []
    for layer in model.layers:
        conv = GCNConv(layer.in_dim, layer.out_dim)
        with torch.no_grad():
            conv.lin.weight.copy_(layer.weight)
            conv.bias.copy_(layer.bias)
        convs.append(conv)
    h = x
    for i, conv in enumerate(convs):
        h = conv(h, edge_index)
        if i < len(convs) - 1:
            h = F.relu(h)
    return h, convs


@pytest.mark.parametrize("arch,decoder", [("gcn", "dot"), ("gcn", "distmult"), ("gcn", "mlp"),
                                          ("sage", "dot")])
def test_p1_link_gradient_equals_a_single_process_on_the_same_batch_and_negatives(
        data_root, tmp_path, arch, decoder):
    cfg = link_cfg(tmp_path, **{"model.arch": arch, "link.decoder": decoder})
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    torch.manual_seed(0)
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    shard = GrappaStrategy(cfg, 1, store, model)
    stats = shard.setup_round(RoundDecision(0, round_seed(0, 0), 0))
    assert stats.coverage_sum == stats.seeds  # one worker: every node complete, c_e = 1
    (batch,) = shard.start_epoch(0)
    c = shard.contribute(batch, wbar=stats.coverage_sum / stats.seeds)
    grappa = combine([c.grad_sum], [c.weight_sum])

    # The single process: the dataset itself, minus the held-out edges, the same positives and
    # negatives in global ids, BCE over all labelled pairs.
    g = shard.graph
    ids = g.global_ids
    link = LinkEdges(cfg.store_path, man)
    pos = torch.from_numpy(np.asarray(link["train"]))
    assert torch.equal(ids[shard.pos], pos)  # P = 1: every training edge, in the file's order
    neg = ids[shard.negatives]
    gen = torch.Generator().manual_seed(epoch_seed(cfg.training.seed, 1, 0))  # the epoch's stream
    assert torch.equal(shard.negatives, torch.randint(0, g.num_owned, neg.shape, generator=gen))
    data = load_dataset(cfg.dataset)
    e = data.edge_index
    held = keys(np.concatenate([np.asarray(link["val"]), np.asarray(link["test"])], 1), data.num_nodes)
    fwd = (e[0] * data.num_nodes + e[1]).tolist()
    rev = (e[1] * data.num_nodes + e[0]).tolist()
    keep = torch.tensor([a not in held and b not in held for a, b in zip(fwd, rev)])
    mp = e[:, keep]

    if arch == "gcn":
        emb, convs = pyg_gcn_embeddings(model, data.x, mp)
        params = [(conv.lin.weight, conv.bias) for conv in convs]
    else:
        ref = build_task_model(cfg, man["num_features"], man["num_classes"])
        ref.load_state_dict(model.state_dict())
        emb = ref(data.x, full_blocks(mp, data.num_nodes, ref.num_layers))
    dec = lp.Decoder(decoder, cfg.model.hidden)
    dec.load_state_dict(model.decoder.state_dict())
    h_src = emb[pos[0]]
    scores = torch.cat([dec(h_src, emb[pos[1]]), dec(h_src.unsqueeze(1), emb[neg]).reshape(-1)])
    labels = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.numel())])
    F.binary_cross_entropy_with_logits(scores, labels).backward()
    if arch == "gcn":
        grads = [t.grad.reshape(-1) for w, b in params for t in (w, b)]
        grads += [p.grad.reshape(-1) for p in dec.parameters()]
        expected = torch.cat(grads)
    else:
        ref_params = [p for name, p in ref.named_parameters() if not name.startswith("decoder.")]
        expected = torch.cat([p.grad.reshape(-1) for p in ref_params] + [p.grad.reshape(-1) for p in dec.parameters()])
    assert grappa.shape == expected.shape
    assert torch.allclose(grappa, expected, rtol=1e-4, atol=1e-6), \
        f"max abs diff {float((grappa - expected).abs().max())} of {float(expected.abs().max())}"
    assert c.loss_sum / c.seeds == pytest.approx(float(F.binary_cross_entropy_with_logits(scores, labels)), rel=1e-5)


def test_p1_mini_batch_with_every_neighbour_is_the_single_process_gradient_of_its_batch(data_root, tmp_path):
    cfg = link_cfg(tmp_path, **{"training.mode": "mini-batch", "training.evalMode": "exact",
                                "training.batchSize": 500, "training.fanouts": [1000, 1000]})
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    torch.manual_seed(0)
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    shard = GrappaStrategy(cfg, 1, store, model)
    shard.setup_round(RoundDecision(0, round_seed(0, 0), 0))
    batches = shard.start_epoch(0)
    assert len(batches) == -(-shard.pos.shape[1] // 500)
    c = shard.contribute(batches[1], 1.0, shard.prepare(batches[1]))
    got = combine([c.grad_sum], [c.weight_sum])
    ids = shard.graph.global_ids
    pos, neg = ids[shard.pos[:, batches[1]]], ids[shard.negatives]
    assert pos.shape[1] == 500 and neg.shape == (500, 3)
    data = load_dataset(cfg.dataset)
    emb, convs = pyg_gcn_embeddings(_loaded(cfg, man, model.state_dict()), data.x,
                                    torch.from_numpy(store_edges(store)))
    h_src = emb[pos[0]]
    scores = torch.cat([(h_src * emb[pos[1]]).sum(-1), (h_src.unsqueeze(1) * emb[neg]).sum(-1).reshape(-1)])
    labels = torch.cat([torch.ones(500), torch.zeros(neg.numel())])
    F.binary_cross_entropy_with_logits(scores, labels).backward()
    expected = torch.cat([t.grad.reshape(-1) for conv in convs for t in (conv.lin.weight, conv.bias)])
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6), \
        f"max abs diff {float((got - expected).abs().max())} of {float(expected.abs().max())}"


@pytest.mark.parametrize("partitions", [2, 3])
def test_full_communication_link_gradient_is_the_full_graph_gradient_at_any_p(data_root, tmp_path, partitions):
    import threading

    from grappa.strategies.full.halo_exchange import ThreadPeers
    from grappa.strategies.full.strategy import FullStrategy
    cfg = link_cfg(tmp_path, partitions=partitions, strategy="full")
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    torch.manual_seed(0)
    state = build_task_model(cfg, man["num_features"], man["num_classes"]).state_dict()
    hub = ThreadPeers(partitions)
    shards, results, errors = [None] * partitions, [None] * partitions, []

    def work(i: int) -> None:
        try:
            model = build_task_model(cfg, man["num_features"], man["num_classes"])
            model.load_state_dict(state)
            s = shards[i] = FullStrategy(cfg, i + 1, store, model, hub.bind(i))
            s.setup_round(RoundDecision(0, 0, 0))
            (batch,) = s.start_epoch(0)
            results[i] = s.contribute(batch, 1.0)
        except Exception as e:  # noqa: BLE001 - surfaced below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    got = combine([c.grad_sum for c in results], [c.weight_sum for c in results])

    # every training edge once, on the worker that owns its destination
    pos = torch.cat([s.graph.global_ids[s.pos] for s in shards], 1)
    neg = torch.cat([s.graph.global_ids[s.negatives] for s in shards], 0)
    train = np.asarray(LinkEdges(cfg.store_path, man)["train"])
    assert pos.shape[1] == train.shape[1] and keys(pos.numpy(), man["num_nodes"]) == keys(train, man["num_nodes"])
    assert all(s.fetch_log.get((cfg.model.layers - 1, "forward"), 0) > 0 for s in shards)  # embeddings fetched

    data = load_dataset(cfg.dataset)
    emb, convs = pyg_gcn_embeddings(_loaded(cfg, man, state), data.x, torch.from_numpy(store_edges(store)))
    h_src = emb[pos[0]]
    scores = torch.cat([(h_src * emb[pos[1]]).sum(-1), (h_src.unsqueeze(1) * emb[neg]).sum(-1).reshape(-1)])
    labels = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.numel())])
    F.binary_cross_entropy_with_logits(scores, labels).backward()
    expected = torch.cat([t.grad.reshape(-1) for conv in convs for t in (conv.lin.weight, conv.bias)])
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6), \
        f"max abs diff {float((got - expected).abs().max())} of {float(expected.abs().max())}"


def _loaded(cfg, man, state):
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    model.load_state_dict(state)
    return model


def test_each_training_edge_belongs_to_one_worker_and_is_weighed_by_both_endpoints(data_root, tmp_path):
    cfg = link_cfg(tmp_path, partitions=2, **{"grappa.chunks": 4, "model.layers": 3})
    man = prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    torch.manual_seed(0)
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    shards = [GrappaStrategy(cfg, r, store, model) for r in (1, 2)]
    train = np.asarray(LinkEdges(cfg.store_path, man)["train"])
    n = man["num_nodes"]
    chunk_of = store.assignment.chunk_of
    for t in range(2):
        seen: set[int] = set()
        for s in shards:
            st = s.setup_round(RoundDecision(t, round_seed(0, t), 0))
            g = s.graph
            glob = g.global_ids[s.pos].numpy()
            k = keys(glob, n)
            assert not k & seen  # never on two workers in a round
            seen |= k
            # exactly the edges whose destination is in a base chunk and whose source is owned
            var = s.variable_chunk(RoundDecision(t, round_seed(0, t), 0))
            owned = list(s.base) + ([var] if var is not None else [])
            mine = np.isin(chunk_of(train[1]), s.base) & np.isin(chunk_of(train[0]), owned)
            assert sorted(map(tuple, glob.T.tolist())) == sorted(map(tuple, train[:, mine].T.tolist()))
            ce = (s.cov[s.pos[0]] + s.cov[s.pos[1]]) / 2
            assert torch.allclose(s.cov_e, ce) and st.coverage_sum == pytest.approx(float(ce.sum()), rel=1e-5)
            assert 0 < float(ce.min()) and float(ce.max()) <= 1.0 + 1e-6
        assert len(seen) < train.shape[1]  # cross-chunk edges wait for their round


def test_supervision_in_maps_global_to_local_ids():
    gids = np.array([7, 3, 9, 1, 5])  # 2 base, 1 variable, 2 halo
    edges = np.array([[3, 9, 1, 7, 9], [7, 3, 7, 9, 7]])
    local = supervision_in(edges, gids, num_base=2, num_owned=3)
    # (3->7): src base, dst base; (9->3): src variable, dst base; (1->7): src halo; (7->9): dst variable
    assert local.tolist() == [[1, 2, 2], [0, 1, 0]]


# -- the metrics -------------------------------------------------------------------------------

def straightforward(pos, neg, shared):
    """MRR, Hits@K and AUC with loops, from OGB's definitions."""
    rr = []
    for p, ns in zip(pos, neg):
        greater = sum(1 for x in ns if x > p)
        equal = sum(1 for x in ns if x == p)
        rr.append(1.0 / (1 + greater + 0.5 * equal))  # (optimistic + pessimistic) / 2 + 1
    ranked = sorted(shared, reverse=True)
    hits = {k: (1.0 if len(ranked) < k else sum(1 for p in pos if p > ranked[k - 1]) / len(pos))
            for k in lp.HITS_AT}
    auc = sum((1.0 if p > s else 0.5 if p == s else 0.0) for p in pos for s in shared) / (len(pos) * len(shared))
    return sum(rr) / len(rr), hits, auc


@pytest.mark.parametrize("workers", [1, 3])
def test_mrr_hits_and_auc_equal_a_straightforward_computation(workers):
    gen = torch.Generator().manual_seed(5)
    pos = torch.randint(0, 40, (37,), generator=gen).float() / 4  # coarse values: many ties
    neg = torch.randint(0, 40, (37, 20), generator=gen).float() / 4
    shared = torch.randint(0, 40, (150,), generator=gen).float() / 4
    mrr, hits, auc = straightforward(pos.tolist(), neg.tolist(), shared.tolist())
    # as the workers do it: every P-th positive each, sums added, shared scores sorted once
    s_sorted = torch.sort(shared).values
    th = lp.hits_thresholds(s_sorted)
    total = torch.zeros(lp.EVAL_STATS_LEN, dtype=torch.float64)
    for w in range(workers):
        i = torch.arange(w, pos.numel(), workers)
        total[:lp.STATS_PER_SPLIT] += lp.split_stats(pos[i], neg[i], s_sorted, th)
    m = lp.metrics_of(total)
    assert m["val_mrr"] == pytest.approx(mrr, rel=1e-12)
    for k in lp.HITS_AT[:2]:
        assert m[f"val_hits@{k}"] == pytest.approx(hits[k], rel=1e-12)
    assert m["val_hits@100"] == pytest.approx(hits[100], rel=1e-12)
    assert m["val_auc"] == pytest.approx(auc, rel=1e-12)
    assert m["test_mrr"] is None  # no test positives given
    loss = sum(float(lp.example_losses(pos[j:j + 1], neg[j:j + 1])) for j in range(pos.numel()))
    assert m["val_loss"] == pytest.approx(loss / pos.numel(), rel=1e-6)


def test_hits_with_fewer_negatives_than_k_counts_every_positive():
    th = lp.hits_thresholds(torch.tensor([0.1, 0.2, 0.3]))
    assert th == {10: None, 50: None, 100: None}
    assert lp.hits(torch.tensor([-5.0, 0.0]), th) == {10: 2, 50: 2, 100: 2}


# -- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("over,words", [
    ({"strategy": "varco"}, ["strategy 'varco' cannot serve task link-prediction", "set strategy: grappa or full"]),
    ({"strategy": "retexo"}, ["strategy 'retexo' cannot serve task link-prediction"]),
    ({"link.valFraction": 0.5, "link.testFraction": 0.5}, ["link.valFraction", "lower them"]),
    ({"training.mode": "mini-batch"}, ["evaluated exactly", "set training.evalMode: exact"]),
    ({"training.evalMode": "sampled"}, ["set training.evalMode: exact"]),
    ({"task": "node-classification"}, ["link settings apply to task link-prediction only",
                                       "set task: link-prediction"]),
    ({"task": "edge-regression"}, ["task", "node-classification", "link-prediction"]),
    ({"link.decoder": "cosine"}, ["link.decoder", "dot", "distmult", "mlp"]),
    ({"link.negatives": 0}, ["link.negatives", "greater than or equal to 1"]),
])
def test_bad_settings_are_refused_naming_the_field_and_the_fix(tmp_path, over, words):
    with pytest.raises(ConfigError) as err:
        link_cfg(tmp_path, **over)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_bad_edge_files_are_refused_naming_file_edge_and_fix():
    train = np.array([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(DatasetError, match=r"link/val\.npy: edge 1 \(column 1\) is \(4, 10\), a node "
                                           r"id outside \[0, 10\); fix or remove"):
        check_edges({"train": train, "val": np.array([[0, 4], [2, 10]])}, 10, True, "link")
    # (3, 2) is training edge 2 reversed: in an undirected graph, the same edge
    with pytest.raises(DatasetError, match=r"link/test\.npy: edge 1 \(column 1\), \(3, 2\), is also "
                                           r"edge 2 of link/train\.npy; .* remove it from one"):
        check_edges({"train": train, "test": np.array([[0, 3], [5, 2]])}, 10, True, "link")
    check_edges({"train": train, "test": np.array([[0, 3], [5, 2]])}, 10, False, "link")  # directed: another edge
    with pytest.raises(DatasetError, match=r"link/val\.npy: expected a \[2, E\] array .* found shape \[3, 2\]"):
        check_edges({"val": np.zeros((3, 2), np.int64)}, 10, True, "link")


def test_a_node_classification_store_is_refused_for_link_prediction(data_root, tmp_path):
    cfg = TrainConfig.model_validate({"partitions": 1, "dataset": {"name": "cora"},
                                      "storeDir": str(tmp_path / "store")})
    man = prepare_store(cfg, progress=False)
    from grappa.data.errors import ChunkStoreError
    with pytest.raises(ChunkStoreError, match="prepared for node classification .* its own storeDir"):
        LinkEdges(cfg.store_path, man)
    # and the store of a node-classification job is not taken for a link job's
    with pytest.raises(ChunkStoreError, match="source.link_split"):
        prepare_store(link_cfg(tmp_path), progress=False)


# -- a real run --------------------------------------------------------------------------------

def test_a_local_run_reports_link_metrics_that_a_single_process_reproduces(data_root, tmp_path):
    from grappa.runtime.local_job import LocalJob
    cfg = link_cfg(tmp_path, partitions=2, **{"training.epochs": 4, "grappa.rounds.every": 2})
    prepare_store(cfg, progress=False)
    report = LocalJob(cfg, progress=False).run()
    result = report["result"]
    for key in ("test_mrr", "test_hits@10", "test_hits@50", "test_hits@100", "test_auc"):
        assert result[key] is not None and 0.0 <= result[key] <= 1.0, key
    hist = report["history"]
    assert len(hist) == 4 and all(h["val_mrr"] is not None for h in hist)
    assert report["rounds"] == [0, 1]
    assert all(h["train_bytes"] > 0 and h["worker_fetch_bytes"] == [0, 0] for h in hist)
    lines = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [x["test_mrr"] for x in lines if "epoch" in x and "event" not in x] == [h["test_mrr"] for h in hist]

    # model.pt (the best epoch's parameters) in one process, on the store's graph: the same figures
    rec = torch.load(Path(cfg.run_dir) / "model.pt", map_location="cpu", weights_only=False)
    man = json.loads((Path(cfg.store_dir) / "manifest.json").read_text())
    model = build_task_model(cfg, man["num_features"], man["num_classes"])
    model.load_state_dict(rec["state_dict"])
    model.eval()
    store = ChunkStore(cfg.store_path)
    data = load_dataset(cfg.dataset)
    with torch.no_grad():
        emb = model(data.x, full_blocks(torch.from_numpy(store_edges(store)), data.num_nodes, model.num_layers))
        link = LinkEdges(cfg.store_path, man)
        pos = torch.from_numpy(np.asarray(link["test"]))
        neg = torch.from_numpy(np.asarray(link["test_neg"]))
        sh = torch.from_numpy(np.asarray(link["test_shared_neg"]))
        p = model.decoder(emb[pos[0]], emb[pos[1]])
        n = model.decoder(emb[pos[0]].unsqueeze(1), emb[neg])
        s = model.decoder(emb[sh[0]], emb[sh[1]])
    mrr, hits, auc = straightforward(p.tolist(), n.tolist(), s.tolist())
    assert result["test_mrr"] == pytest.approx(mrr, abs=2e-3)
    for k in lp.HITS_AT:
        assert result[f"test_hits@{k}"] == pytest.approx(hits[k], abs=2e-3)
    assert result["test_auc"] == pytest.approx(auc, abs=1e-3)
