"""Where a Grappa worker's training step spends its CPU: the peer benchmark's RMAT-17 job at P = 8.

One worker (rank 1) of the peer run's configuration (bench/peer.py: SAGE, 3 layers, hidden 128,
mini-batch of 1,000, fanouts per depth, one thread as each peer machine has), in this process:
its round is built from the same chunk store, then `--steps` steps are run phase by phase:
sampling, feature rows from the memory maps, forward, backward, packing the step message, the
optimizer step that follows the all-reduce (exchange.apply_sum) and the worker's PSS reading.
The all-reduce itself is not in the profile (it needs the other ranks; peer.md measures the
whole machine's CPU per step with the probe). Each phase's CPU time is measured with
time.process_time, and the loop is also run under cProfile (CPU clock), whose top functions by
own time are written beside. Both designs run side by side in one invocation:

- previous: torch's dropout, SAGE projecting before it aggregates in every layer, a PSS reading
  after every step (what the worker did before);
- current: models/dropout.py, SAGE in the cheaper order (models/sage.py), PSS read in the
  background every runtime.worker.PSS_SAMPLE_S
  (charged here as one reading per that many seconds of the loop's wall time).

    python bench/profile_step.py                  # -> docs/results/profile-step.json
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]

import torch  # noqa: E402

from grappa.data.store.chunk_store import ChunkStore  # noqa: E402
from grappa.data.store.preparation import prepare_store  # noqa: E402
from grappa.models import GNN  # noqa: E402
from grappa.runtime.exchange import apply_sum, pack  # noqa: E402
from grappa.runtime.replica import make_optimizer  # noqa: E402
from grappa.strategies import make_strategy  # noqa: E402
from grappa.strategies.contribution import contribution_from  # noqa: E402
from grappa.strategies.grappa.rounds import RoundDecision, round_seed  # noqa: E402
from peer import grappa_config  # noqa: E402

RESULTS = ROOT / "docs" / "results"
PHASES = ("sample", "features", "forward", "backward", "pack", "optimizer", "memory")


class PhaseClock:
    def __init__(self) -> None:
        self.cpu = {p: 0.0 for p in PHASES}
        self._mark = time.process_time()

    def lap(self, phase: str) -> None:
        now = time.process_time()
        self.cpu[phase] += now - self._mark
        self._mark = now


def _project_first(self, h, block):
    """SAGELayer.forward as it was: project every source row, then aggregate."""
    from grappa.models.ops import block_matmul, mean_operator, rows
    p = torch.nn.functional.linear(h, self.lin_l.weight)
    mean = block_matmul(mean_operator(block, p.dtype), p)
    return mean + self.lin_l.bias + self.lin_r(rows(h, block.num_dst))


_CURRENT = {}


def use_design(design: str) -> None:
    """Swap in the previous step's dropout and SAGE order, or today's."""
    import torch.nn.functional as F

    from grappa.models import dropout as ours
    from grappa.models.sage import SAGELayer
    _CURRENT.setdefault("sage", SAGELayer.forward)
    gnn = sys.modules["grappa.models.gnn"]
    previous = design == "previous"
    gnn.dropout = (lambda h, p, training: F.dropout(h, p, training)) if previous else ours.dropout
    SAGELayer.forward = _project_first if previous else _CURRENT["sage"]


def profile(work: Path, steps: int, design: str = "current", partitions: int = 8, layers: int = 3) -> dict:
    from grappa.runtime.worker import PSS_SAMPLE_S
    from grappa.util.process_memory import PeakMemory
    use_design(design)
    torch.set_num_threads(1)
    cfg = grappa_config("rmat", "grappa", partitions, layers, 1, 1, work)
    prepare_store(cfg, progress=False)
    store = ChunkStore(cfg.store_path)
    man = store.manifest
    torch.manual_seed(cfg.training.seed)
    model = GNN(cfg.model, man["num_features"], man["num_classes"])
    optimizer = make_optimizer(cfg, model)
    shard = make_strategy(cfg, 1, store, model)
    stats = shard.setup_round(RoundDecision(0, round_seed(cfg.grappa.partition_seed, 0), 0))
    wbar = stats.coverage_sum / max(1, stats.seeds)
    batches = []
    epoch = 0
    while len(batches) < steps:
        batches += shard.start_epoch(epoch)
        epoch += 1
    g, gc = shard.graph, cfg.grappa
    memory = PeakMemory()
    clock = PhaseClock()
    seeds = 0
    t0 = time.perf_counter()
    for batch in batches[:steps]:
        clock.lap("pack")  # nothing between steps: start the sampling clock here
        sub = shard.sampler.sample(batch, shard.gen)
        blocks = sub.blocks(g.deg.index_select(0, sub.n_id))
        clock.lap("sample")
        x = g.features.gather(sub.n_id)
        clock.lap("features")
        model.train()
        model.zero_grad(set_to_none=True)
        out = model(x, blocks)
        clock.lap("forward")
        c = contribution_from(model, lambda: out, torch.arange(batch.numel()), shard.cov[batch],
                              g.y[batch], gc.correction, gc.shrinkage, wbar)  # loss + backward
        clock.lap("backward")
        total = pack(c, model)
        clock.lap("pack")
        apply_sum(model, optimizer, total)
        clock.lap("optimizer")
        if design == "previous":
            memory.sample()
        else:
            memory.sample_every(PSS_SAMPLE_S)  # what the background thread costs, on this clock
        clock.lap("memory")
        seeds += batch.numel()
    wall = time.perf_counter() - t0
    cpu = sum(clock.cpu.values())
    return {"design": design, "dataset": "rmat", "partitions": partitions, "layers": layers, "steps": steps,
            "seeds_per_step": seeds / steps, "local_nodes": g.num_nodes, "local_edges": g.num_edges,
            "cpu_per_step": cpu / steps, "wall_per_step": wall / steps,
            "phases_per_step": {p: v / steps for p, v in clock.cpu.items()}}


def top_functions(work: Path, steps: int, design: str, limit: int = 15) -> list[dict]:
    prof = cProfile.Profile(time.process_time)  # CPU, not wall: the machine may be busy
    prof.enable()
    profile(work, steps, design)
    prof.disable()
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:limit]  # own time
    return [{"function": f"{Path(f).name}:{line}({name})", "calls": nc, "own_s": tt, "cum_s": ct}
            for (f, line, name), (_, nc, tt, ct, _) in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", type=Path, default=RESULTS / "profile-step.json")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="grappa-profile-") as tmp:
        work = Path(tmp)
        profile(work, 4)  # warm-up: store, page cache, allocator
        for design in ("previous", "current", "previous", "current"):  # interleaved: same conditions
            run = profile(work, args.steps, design)
            results.setdefault(design, []).append(run)
        out = {}
        for design, runs in results.items():
            best = min(runs, key=lambda r: r["cpu_per_step"])  # the least disturbed of two
            best["top_functions"] = top_functions(work, max(4, args.steps // 4), design)
            out[design] = best
    out["command"] = f"python bench/profile_step.py --steps {args.steps}"
    args.out.write_text(json.dumps(out, indent=1))
    for design in ("previous", "current"):
        r = out[design]
        print(design, f"{r['cpu_per_step']:.4f} CPU-s/step",
              {k: round(v, 4) for k, v in r["phases_per_step"].items()})


if __name__ == "__main__":
    main()
