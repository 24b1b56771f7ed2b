"""The sharded optimizer (runtime/sharded.py): the same training as the whole-model update, 1/M of
the state per rank, checkpoints that resume sharded or not, and a replica check that still sees
a corrupted slice.

In-process tests run M replicas as threads over a ring in memory (`ThreadRing`), which adds every
chunk in the order the real ring does; the multi-process tests run the real one (gloo, LocalJob).
"""
import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from grappa.config import TrainConfig
from grappa.models import GNN
from grappa.models.params import flat_state, num_params
from grappa.runtime.checkpoint import latest_checkpoint, load_checkpoint
from grappa.runtime.local_job import LocalJob
from grappa.runtime.replica import ReplicaDiverged, checksum, make_optimizer
from grappa.runtime.sharded import (AUTO_MIN_PARAMS, ShardedStepExchange, bounds, merge_states,
                                    optimizer_state_nbytes, shard_on, slice_state)
from grappa.runtime.transport import ByteCounter
from grappa.strategies.contribution import Contribution
from small_jobs import csbm_job
from test_exchange import launch

# Stated tolerance against the whole-model update, relative L2 of the parameters after 6 steps:
# the sums are added in another order (float32) and old + (new - old) may round the last bit.
# Measured: 0 at P = 2 (Adam), at most 3.7e-8 at P = 3 and 8 (Adam and SGD); Adam divides by
# sqrt(v), which can magnify a last-bit difference of a near-zero gradient, hence the headroom.
REL_TOL = 1e-6
# Real runs (gloo's ring against ours, several epochs, evaluation-driven rounds): as
# test_exchange.py states for the ring against the star.
RUN_TOL = 1e-4
FEATURES = 40  # the in-process models: 40 -> 32 -> 3, a few thousand parameters


class ThreadRing:
    """The Link calls the sharded exchange makes, for M threads in one process. Chunk j's sum is
    added in the real ring's order: it starts at rank j + 1 and ends at rank j."""

    def __init__(self, m: int):
        self.m = m
        self.barrier = threading.Barrier(m, timeout=60)
        self.slots: list = [None] * m

    def link(self, rank: int) -> "RingEnd":
        return RingEnd(self, rank)


class RingEnd:
    def __init__(self, ring: ThreadRing, rank: int):
        self.ring, self.rank, self.world_size = ring, rank, ring.m
        self.bytes = ByteCounter()

    def _share(self, mine):
        self.ring.barrier.wait()
        self.ring.slots[self.rank] = mine
        self.ring.barrier.wait()
        everyone = list(self.ring.slots)
        self.ring.barrier.wait()
        return everyone

    def ring_reduce_scatter(self, chunks, kind, what, meanwhile=None):
        everyone = self._share(chunks)
        m, j = self.m, self.rank
        acc = everyone[(j + 1) % m][j].clone()
        for k in range(2, m + 1):
            acc += everyone[(j + k) % m][j]
        return acc, (meanwhile() if meanwhile else None)

    @property
    def m(self):
        return self.world_size

    def ring_all_gather(self, parts, kind, what):
        everyone = self._share(parts[self.rank])
        for i in range(self.m):
            parts[i].copy_(everyone[i])
        return parts


def config(**training) -> TrainConfig:
    return TrainConfig.model_validate({"partitions": 2, "dataset": {"name": "csbm"},
                                       "model": {"hidden": 32, "layers": 2},
                                       "training": {"shardOptimizer": "on", **training}})


def contributions(model: torch.nn.Module, steps: int, workers: int) -> list[list[Contribution]]:
    """Seeded gradient sums of the model's size, per step and worker, some of them near zero."""
    gen = torch.Generator().manual_seed(7)
    n = num_params(model)
    out = []
    for _ in range(steps):
        row = []
        for _ in range(workers):
            g = torch.randn(n, generator=gen) * torch.rand(n, generator=gen) ** 4
            row.append(Contribution(g, float(torch.rand(1, generator=gen)) + 0.5, 1.0, 3, 10, 1.0))
        out.append(row)
    return out


def run_sharded(cfg: TrainConfig, m: int, steps: list, init: dict = None, corrupt_rank: int = -1):
    """M ranks (rank 0 the aggregator, contributing zeros) step through `steps` sharded; returns
    their models and exchanges. `corrupt_rank` nudges its own slice after the second step."""
    ring = ThreadRing(m)
    models = [GNN(cfg.model, FEATURES, 3) for _ in range(m)]
    for mod in models:
        mod.load_state_dict(init if init is not None else models[0].state_dict())
    exchanges = [ShardedStepExchange(ring.link(r), models[r], cfg) for r in range(m)]

    def rank(r: int) -> None:
        for s, row in enumerate(steps):
            exchanges[r].step(row[r - 1] if r > 0 else None, 0)
            if r == corrupt_rank and s == 1:
                lo = exchanges[r].param_bounds[r][0]
                with torch.no_grad():
                    torch.nn.utils.vector_to_parameters(
                        torch.nn.utils.parameters_to_vector(models[r].parameters()).index_add(
                            0, torch.tensor([lo]), torch.tensor([1e-3])), models[r].parameters())

    with ThreadPoolExecutor(m) as pool:  # a rank's error surfaces here (the others' barrier breaks)
        list(pool.map(rank, range(m)))
    return models, exchanges


def run_whole(cfg: TrainConfig, model: torch.nn.Module, steps: list) -> torch.optim.Optimizer:
    """The unsharded update of the same sums (exchange.apply_sum) on one replica."""
    from grappa.runtime.exchange import apply_sum, pack
    opt = make_optimizer(cfg, model)
    for row in steps:
        total = torch.stack([pack(c, model) for c in [None] + row]).sum(0)
        apply_sum(model, opt, total)
    return opt


def test_slices_tile_the_model_and_the_auto_rule():
    for n, m in [(10, 3), (2, 5), (2_190_000, 9)]:
        b = bounds(n, m)
        assert b[0][0] == 0 and b[-1][1] == n and all(b[i][1] == b[i + 1][0] for i in range(m - 1))
        assert max(hi - lo for lo, hi in b) - min(hi - lo for lo, hi in b) <= 1
    auto = config(shardOptimizer="auto")
    assert shard_on(auto, AUTO_MIN_PARAMS, 3) and not shard_on(auto, AUTO_MIN_PARAMS - 1, 9)
    assert not shard_on(auto, 10 * AUTO_MIN_PARAMS, 2) and shard_on(auto, 10 * AUTO_MIN_PARAMS, 9)
    assert not shard_on(auto, 10 * AUTO_MIN_PARAMS, 10)  # unmeasured beyond M = 9 (sharded.py)
    assert shard_on(config(), 10, 2) and not shard_on(config(shardOptimizer="off"), 10**9, 9)
    with pytest.raises(ValueError, match="shardOptimizer"):
        TrainConfig.model_validate({"strategy": "retexo", "training": {"shardOptimizer": "on"}})


@pytest.mark.parametrize("arch,optimizer", [("gcn", "adam"), ("gcn", "sgd"), ("gin", "adam")])
@pytest.mark.parametrize("partitions", [2, 3])
def test_sharded_steps_train_the_parameters_of_the_whole_update(partitions, arch, optimizer):
    """GIN has BatchNorm: its running statistics travel (and are sharded) with the gradient."""
    cfg = config(optimizer=optimizer)
    cfg.model.arch = arch
    m = partitions + 1
    init = GNN(cfg.model, FEATURES, 3).state_dict()
    steps = contributions(GNN(cfg.model, FEATURES, 3), 6, partitions)
    models, exchanges = run_sharded(cfg, m, steps, init)
    crcs = {checksum(mod) for mod in models}
    assert len(crcs) == 1  # every rank holds the same bits after each all-gather
    whole = GNN(cfg.model, FEATURES, 3)
    whole.load_state_dict(init)
    opt = run_whole(cfg, whole, steps)
    a, b = flat_state(models[0]), flat_state(whole)
    rel = float((a - b).norm() / b.norm())
    assert rel <= REL_TOL, f"relative L2 difference {rel:.2e} over {REL_TOL:.0e}"
    # the gathered slices are the whole update's optimizer state, to the same tolerance
    merged = exchanges[0].merge([e.optimizer.state_dict() for e in exchanges])
    ref = opt.state_dict()
    assert merged["param_groups"][0]["params"] == ref["param_groups"][0]["params"]
    for i, st in ref["state"].items():
        for key, v in st.items():
            got = merged["state"][i][key]
            assert got.shape == v.shape
            assert float((got - v).norm()) <= REL_TOL * max(float(v.norm()), 1e-12) + 1e-12, key


@pytest.mark.parametrize("partitions", [2, 3, 8])
def test_optimizer_state_per_rank_is_one_mth(partitions):
    cfg = config()
    m = partitions + 1
    steps = contributions(GNN(cfg.model, FEATURES, 3), 1, partitions)
    models, exchanges = run_sharded(cfg, m, steps)
    whole = GNN(cfg.model, FEATURES, 3)
    full = optimizer_state_nbytes(run_whole(cfg, whole, steps))
    n = num_params(whole)
    per_rank = [optimizer_state_nbytes(e.optimizer) for e in exchanges]
    for r, nbytes in enumerate(per_rank):
        lo, hi = exchanges[r].param_bounds[r]
        assert nbytes == 2 * 4 * (hi - lo) + 4  # Adam's two moments of its slice, and one step count
        assert nbytes <= full / m + 2 * 4 + 4  # 1/M of the whole, up to one element of rounding
    assert sum(per_rank) == full - 4 * (len(list(whole.parameters())) - m)  # one step count per slice
    assert n > 1000  # big enough for the ratio to mean something


def test_slicing_and_merging_a_state_round_trips_exactly():
    cfg = config()
    model = GNN(cfg.model, FEATURES, 3)
    opt = run_whole(cfg, model, contributions(model, 3, 2))
    full = opt.state_dict()
    shapes = [p.shape for p in model.parameters()]
    for m in (2, 3, 7):
        parts = [slice_state(full, shapes, lo, hi) for lo, hi in bounds(num_params(model), m)]
        back = merge_states(parts, shapes)
        for i, st in full["state"].items():
            for key, v in st.items():
                assert torch.equal(back["state"][i][key], v), (m, i, key)
    assert slice_state({"state": {}, "param_groups": full["param_groups"]}, shapes, 0, 5) is None


def test_a_slice_that_missed_a_step_is_named():
    cfg = config()
    steps = contributions(GNN(cfg.model, FEATURES, 3), 2, 2)
    _, exchanges = run_sharded(cfg, 3, steps)
    slices = [e.optimizer.state_dict() for e in exchanges]
    slices[2]["state"][0]["step"] = slices[2]["state"][0]["step"] - 1
    with pytest.raises(ReplicaDiverged, match=r"worker 1 \(rank 2\) \(1\)"):
        merge_states(slices, exchanges[0].shapes)


def test_a_corrupted_slice_on_its_owner_stays_visible_to_the_replica_check():
    """The owner's copy of its own slice is nudged between steps: since the all-gather carries
    updates, not values, its copy keeps differing and the checksum names it after later steps."""
    cfg = config()
    steps = contributions(GNN(cfg.model, FEATURES, 3), 5, 3)
    models, _ = run_sharded(cfg, 4, steps, corrupt_rank=2)  # its nudge after step 2 of 5
    crcs = [checksum(mod) for mod in models]
    assert crcs[2] != crcs[0] and crcs[0] == crcs[1] == crcs[3]


# -- real runs: gloo between processes --------------------------------------------------------
def job(tmp_path: Path, **overrides) -> TrainConfig:
    return csbm_job(tmp_path, **{"training.epochs": 4, "checkpoint.interval": 1,
                                 "training.mode": "mini-batch", "training.batchSize": 60,
                                 "training.evalMode": "exact", **overrides})


def params_of(cfg: TrainConfig) -> torch.Tensor:
    state = load_checkpoint(latest_checkpoint(Path(cfg.run_dir)))["model"]
    return torch.cat([v.reshape(-1).float() for v in state.values() if v.is_floating_point()])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module")
def p3(tmp_path_factory):
    """P = 3, four epochs, unsharded and sharded, on one store: what the sharded run must equal,
    and what both resumes below must replay. (P = 2 is the in-process tests' and the ring's
    smallest case; one real pair keeps this file's CPU down.)"""
    root = tmp_path_factory.mktemp("p3")
    runs = {}
    for mode in ("off", "on"):
        cfg = job(root / mode, **{"partitions": 3, "training.shardOptimizer": mode, "storeDir": str(root / "store")})
        runs[mode] = (cfg, LocalJob(cfg, progress=False).run())
    return runs


def test_a_sharded_job_trains_what_an_unsharded_one_does(p3):
    partitions = 3
    runs = p3
    for mode, (cfg, _) in runs.items():  # the switch did what it says
        logged = "sharded optimizer: " in (Path(cfg.run_dir) / "logs" / "rank-0.log").read_text()
        assert logged == (mode == "on")
    assert rel(params_of(runs["on"][0]), params_of(runs["off"][0])) <= RUN_TOL
    on, off = runs["on"][1]["history"], runs["off"][1]["history"]
    for a, b in zip(on, off):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
        # the step's bytes: the all-reduce's, to the scalars copied into every chunk
        assert abs(a["train_bytes"] - b["train_bytes"]) <= a["steps"] * 2 * 4 * 5 * (partitions + 1)
    # the checkpoint's optimizer state is whole, in the unsharded layout
    ck = load_checkpoint(latest_checkpoint(Path(runs["on"][0].run_dir)))["optimizer"]
    ref = load_checkpoint(latest_checkpoint(Path(runs["off"][0].run_dir)))["optimizer"]
    assert ck["state"].keys() == ref["state"].keys()
    assert all(ck["state"][i]["exp_avg"].shape == ref["state"][i]["exp_avg"].shape for i in ref["state"])


@pytest.fixture(scope="module")
def half(tmp_path_factory, p3):
    """The sharded P = 3 job stopped after 2 of its 4 epochs (run once; each resume gets a copy)."""
    store = p3["on"][0].store_path
    part = job(tmp_path_factory.mktemp("half"), **{"partitions": 3, "training.shardOptimizer": "on",
                                                  "training.epochs": 2, "storeDir": str(store)})
    LocalJob(part, progress=False).run()
    return Path(part.run_dir), str(store)


@pytest.mark.parametrize("then", ["on", "off"])
def test_a_sharded_checkpoint_resumes_sharded_or_not_on_the_same_trajectory(tmp_path, then, p3, half):
    (whole, ref), (part_run, store) = p3["on"], half
    shutil.copytree(part_run, tmp_path / "run")
    resumed_cfg = job(tmp_path, **{"partitions": 3, "training.shardOptimizer": then, "storeDir": store})
    resumed = LocalJob(resumed_cfg, progress=False).run()
    lines = [json.loads(x) for x in (Path(resumed_cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines if x.get("event") == "resume"] == [2]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4]
    for a, b in zip(ref["history"], resumed["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    # sharded again: bit for bit (the state is sliced and merged exactly, the ring's order is the
    # same); unsharded: gloo's ring adds in another order from epoch 3 on
    assert rel(params_of(resumed_cfg), params_of(whole)) <= (0.0 if then == "on" else RUN_TOL)


def test_a_corrupted_slice_fails_a_real_job_naming_its_owner(tmp_path):
    """Worker 1 (rank 2) nudges the first parameter of its own slice after its second step of
    several in epoch 1; later steps' all-gathers do not hide it (they carry updates)."""
    cfg = job(tmp_path, **{"partitions": 3, "training.shardOptimizer": "on", "training.batchSize": 20})
    out, _ = launch(cfg, tmp_path, {"GRAPPA_TEST_DIVERGE_RANK": "2", "GRAPPA_TEST_DIVERGE_STEP": "2"}
                    ).communicate(timeout=300)
    agg_log = (Path(cfg.run_dir) / "logs" / "rank-0.log").read_text()
    assert "sharded optimizer: " in agg_log
    line = agg_log.split("replica check after epoch 1:")[1].splitlines()[0]
    assert "worker 1 (rank 2)" in line and "worker 0" not in line and "worker 2" not in line, out + agg_log
    metrics = Path(cfg.run_dir) / "metrics.jsonl"  # nothing trained on the diverged replica recorded
    assert not metrics.exists() or not any("loss" in json.loads(x) for x in metrics.read_text().splitlines())
