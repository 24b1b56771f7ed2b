"""One rank's optimizer work per step, sharded (`training.shardOptimizer`) or not, and its memory.

The model is the peer benchmark's Coauthor-Physics one (bench/peer.py: SAGE, 3 layers, hidden 128,
8,415 features, 5 classes: 2.19 M parameters), built without the dataset; smaller hidden widths
give the points `auto`'s threshold is read from. Each configuration runs in a fresh process with
one thread (as each peer machine has), and runs the trainer's own code on a summed step message
of random values, as one rank of M receives it:

- whole: `exchange.apply_sum` on the whole message (the reducer, then Adam on every parameter);
- sharded, M ranks: `ShardedStepExchange.apply` on this rank's chunk after the reduce-scatter (the
  reducer and Adam on its 1/M slice, the deltas of every slice added to the whole model), with
  the all-gather's transfer replaced by zeros written into the other slices' buffers, and the
  chunking of the message before the reduce-scatter counted too.

Both are charged with what precedes the transfer (packing the message) and exclude the transfer
itself and its summation (gloo's ring, or the sharded ring's passes: the same adds, in C++ or in
torch called from Python), which need the other ranks. CPU is time.process_time per step after
--warmup steps; memory is the process's peak RSS above what it held before the optimizer existed,
and the optimizer state's exact bytes.

    python bench/shard.py                 # -> docs/results/shard.json, then the section in shard.md
    python bench/shard.py --render        # the markdown again from the JSON
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
FEATURES, CLASSES = 8415, 5  # Coauthor-Physics
QUIET_FILES = (Path("/work/benching"), Path("/work/measuring"))


def one(hidden: int, members: int, steps: int, warmup: int) -> dict:
    """In this process: `members` = 0 for the whole update, else one rank of M = members."""
    sys.path[:0] = [str(ROOT / "trainer")]
    import torch

    from grappa.config import TrainConfig
    from grappa.models import GNN
    from grappa.models.params import num_params
    from grappa.runtime.exchange import SCALARS, apply_sum, pack
    from grappa.runtime.replica import make_optimizer
    from grappa.runtime.sharded import ShardedStepExchange, optimizer_state_nbytes
    from grappa.runtime.transport import ByteCounter
    from grappa.strategies.contribution import Contribution

    torch.set_num_threads(1)
    cfg = TrainConfig.model_validate({
        "partitions": max(members - 1, 1), "dataset": {"name": "coauthor-physics"},
        "model": {"arch": "sage", "layers": 3, "hidden": hidden, "dropout": 0.5},
        "training": {"shardOptimizer": "on" if members else "off"}})
    torch.manual_seed(0)
    model = GNN(cfg.model, FEATURES, CLASSES)
    n = num_params(model)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(n, generator=gen) * 1e-3 for _ in range(2)]
    contribs = [Contribution(g, 100.0, 1.0, 50, 100, 1.0) for g in grads]

    class Gathered:  # the all-gather's result without the transfer: the other slices' deltas
        def __init__(self, rank: int, world: int):
            self.rank, self.world_size, self.bytes = rank, world, ByteCounter()

        def ring_all_gather(self, parts, kind, what):
            for i, p in enumerate(parts):  # what receiving writes into them: here, zeros
                if i != self.rank:
                    p.zero_()
            return parts

    # torch.optim imports the rest of torch at its first step (~160 MB): done on a scalar first,
    # so the growth measured below is this configuration's own
    warm = torch.nn.Parameter(torch.zeros(1))
    warm.grad = torch.zeros(1)
    make_optimizer(cfg, [warm]).step()
    base_rss = _peak_rss()
    if members:
        ex = ShardedStepExchange(Gathered(1, members), model, cfg)  # a worker's slice

        def step(i: int) -> None:
            msg = pack(contribs[i % 2], model)
            body, scalars = msg[:-SCALARS], msg[-SCALARS:]
            chunks = [torch.cat([body[lo:hi], scalars]) for lo, hi in ex.bounds]
            own = chunks[1] * members  # stands for the sum the reduce-scatter leaves here
            ex.apply(own, 0)
        optimizer = lambda: ex.optimizer  # noqa: E731
    else:
        opt = make_optimizer(cfg, model)

        def step(i: int) -> None:
            apply_sum(model, opt, pack(contribs[i % 2], model) * (cfg.partitions + 1))
        optimizer = lambda: opt  # noqa: E731
    for i in range(warmup):
        step(i)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(steps):
        step(i)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"hidden": hidden, "params": n, "members": members, "sharded": bool(members),
            "steps": steps, "cpu_per_step": cpu / steps, "wall_per_step": wall / steps,
            "optimizer_state_bytes": optimizer_state_nbytes(optimizer()),
            "peak_rss_bytes": _peak_rss(), "rss_growth_bytes": _peak_rss() - base_rss}


def ring_rank(rank: int, members: int, n: int, steps: int, port: int) -> dict:
    """One rank of a real ring (gloo on 127.0.0.1): CPU and wall per step of gloo's all-reduce of
    n floats against the sharded step's reduce-scatter then all-gather of the same n (transport.py)."""
    sys.path[:0] = [str(ROOT / "trainer")]
    import torch
    import torch.distributed as dist

    from grappa.runtime.sharded import bounds
    from grappa.runtime.transport import Link
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=members)
    link = Link(rank, members)
    msg = torch.ones(n)
    cuts = bounds(n, members)

    def allreduce() -> None:
        link.all_reduce(msg.clone(), "train", "bench")

    def sharded() -> None:
        link.ring_reduce_scatter([msg[lo:hi].clone() for lo, hi in cuts], "train", "bench")
        deltas = torch.empty(n)
        link.ring_all_gather([deltas[lo:hi] for lo, hi in cuts], "train", "bench")
    out = {}
    for name, fn in (("allreduce", allreduce), ("sharded", sharded)) * 2:  # the second round is kept
        dist.barrier()
        fn()  # warm-up
        dist.barrier()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            fn()
        out[name] = {"cpu_per_step": (time.process_time() - cpu0) / steps,
                     "wall_per_step": (time.perf_counter() - wall0) / steps}
    dist.destroy_process_group()
    return out


def ring(members: int, n: int, steps: int, port: int) -> dict:
    """Every rank of a real ring of `members`: the busiest rank's CPU per step and the wall."""
    procs = [subprocess.Popen([sys.executable, __file__, "--ring-rank", f"{r},{members},{n},{steps},{port}"],
                              stdout=subprocess.PIPE, text=True) for r in range(members)]
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a ring rank failed (M = {members}, n = {n})")
    rec = {"members": members, "params": n, "steps": steps}
    for name in ("allreduce", "sharded"):
        rec[name] = {"cpu_per_step_max": max(o[name]["cpu_per_step"] for o in outs),
                     "cpu_per_step_mean": sum(o[name]["cpu_per_step"] for o in outs) / members,
                     "wall_per_step": max(o[name]["wall_per_step"] for o in outs)}
    return rec


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def wait_quiet(poll_s: float = 30.0) -> None:
    """QUIET.md: no benchmark while another is measuring on this machine."""
    while any(p.exists() for p in QUIET_FILES):
        print("waiting: " + ", ".join(str(p) for p in QUIET_FILES if p.exists()), flush=True)
        time.sleep(poll_s)


def measure(args) -> dict:
    wait_quiet()
    runs, load_before = [], [round(x, 3) for x in os.getloadavg()]
    cells = [(h, 0) for h in args.hidden] + [(h, m) for h in args.hidden for m in args.members]
    for hidden, members in cells:
        out = subprocess.run([sys.executable, __file__, "--one", f"{hidden},{members}",
                              "--steps", str(args.steps), "--warmup", str(args.warmup)],
                             check=True, capture_output=True, text=True)
        rec = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(rec), flush=True)
        runs.append(rec)
    rings = []
    for n in sorted({r["params"] for r in runs}, reverse=True)[:1] + [min(r["params"] for r in runs)]:
        for m in args.members:
            rings.append(ring(m, n, args.ring_steps, args.port))
            print(json.dumps(rings[-1]), flush=True)
    return {"what": "one rank's optimizer work per step (bench/shard.py)", "features": FEATURES,
            "classes": CLASSES, "threads": 1, "steps": args.steps, "warmup": args.warmup,
            "load_before": load_before, "load_after": [round(x, 3) for x in os.getloadavg()],
            "cpu_count": os.cpu_count(), "runs": runs, "ring_steps": args.ring_steps, "rings": rings}


def render(data: dict) -> str:
    from grappa.runtime.sharded import AUTO_MAX_RANKS, AUTO_MIN_PARAMS, AUTO_MIN_RANKS
    whole = {r["hidden"]: r for r in data["runs"] if not r["sharded"]}
    mib = 2 ** 20
    lines = ["<!-- generated by bench/shard.py from docs/results/shard.json: edit the script, not this -->",
             "## Measured: one rank's optimizer step, whole and sharded", "",
             f"One thread, {data['steps']} steps after {data['warmup']} of warm-up, per configuration in a "
             "fresh process; the trainer's own code on a random summed message (the transfer and its "
             "summation excluded: they need the other ranks). Load average before "
             f"{data['load_before'][0]:.2f}, after {data['load_after'][0]:.2f} "
             f"({data['cpu_count']} CPUs, shared).", "",
             "| parameters | M | CPU ms / step | whole | saved ms / step | x | optimizer state MiB | whole MiB | "
             "peak RSS growth MiB | whole MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in data["runs"] if r["sharded"]), key=lambda r: (r["params"], r["members"])):
        w = whole[r["hidden"]]
        lines.append(
            f"| {r['params']:,} | {r['members']} | {1e3 * r['cpu_per_step']:.2f} | {1e3 * w['cpu_per_step']:.2f} | "
            f"{1e3 * (w['cpu_per_step'] - r['cpu_per_step']):.2f} | {w['cpu_per_step'] / r['cpu_per_step']:.1f}x | "
            f"{r['optimizer_state_bytes'] / mib:.2f} | {w['optimizer_state_bytes'] / mib:.2f} | "
            f"{r['rss_growth_bytes'] / mib:.1f} | {w['rss_growth_bytes'] / mib:.1f} |")
    if data.get("rings"):
        lines += ["", f"The transfer, measured apart on real rings of M processes (gloo on 127.0.0.1, one "
                  f"thread each, {data['ring_steps']} steps after one of warm-up): CPU per step of the busiest "
                  "rank for gloo's all-reduce of the message against the sharded step's reduce-scatter then "
                  "all-gather of the same floats (`Link.ring_reduce_scatter`, `Link.ring_all_gather`: "
                  "point-to-point passes driven from Python). Wall time is shown but means little: the M "
                  f"processes share {data['cpu_count']} CPUs.", "",
                  "| parameters | M | all-reduce CPU ms / step | sharded ring CPU ms / step | extra ms | "
                  "all-reduce wall ms | sharded wall ms |", "|---|---|---|---|---|---|---|"]
        for g in sorted(data["rings"], key=lambda g: (-g["params"], g["members"])):
            a, sh = g["allreduce"], g["sharded"]
            lines.append(f"| {g['params']:,} | {g['members']} | {1e3 * a['cpu_per_step_max']:.2f} | "
                         f"{1e3 * sh['cpu_per_step_max']:.2f} | "
                         f"{1e3 * (sh['cpu_per_step_max'] - a['cpu_per_step_max']):+.2f} | "
                         f"{1e3 * a['wall_per_step']:.1f} | {1e3 * sh['wall_per_step']:.1f} |")
    nets = net_saving(data)
    if nets:
        lines += ["", "Net: the optimizer's saving (first table) less the ring's extra CPU (second table), "
                  "CPU-ms per step of one rank, positive where sharding pays:", "",
                  "| parameters | " + " | ".join(f"M = {m}" for m in sorted({m for _, m in nets})) + " |",
                  "|---|" + "---|" * len({m for _, m in nets})]
        for n in sorted({n for n, _ in nets}, reverse=True):
            lines.append(f"| {n:,} | " + " | ".join(f"{1e3 * nets[(n, m)]:+.1f}" if (n, m) in nets else ""
                                                     for m in sorted({m for _, m in nets})) + " |")
    lines += ["", f"`auto` shards from {AUTO_MIN_PARAMS:,} parameters at {AUTO_MIN_RANKS} <= M <= "
              f"{AUTO_MAX_RANKS} (runtime/sharded.py says why)."]
    return "\n".join(lines) + "\n"


def net_saving(data: dict) -> dict:
    """(parameters, M) -> seconds a step one rank saves: the update's saving less the ring's extra."""
    whole = {r["params"]: r["cpu_per_step"] for r in data["runs"] if not r["sharded"]}
    upd = {(r["params"], r["members"]): whole[r["params"]] - r["cpu_per_step"]
           for r in data["runs"] if r["sharded"]}
    return {(g["params"], g["members"]): upd[(g["params"], g["members"])]
            - (g["sharded"]["cpu_per_step_max"] - g["allreduce"]["cpu_per_step_max"])
            for g in data.get("rings", []) if (g["params"], g["members"]) in upd}


def write_section(md: str) -> None:
    """Replace the generated section of docs/results/shard.md (everything from its marker on)."""
    path = RESULTS / "shard.md"
    head = path.read_text().split("<!-- generated by bench/shard.py")[0] if path.exists() else ""
    path.write_text(head + md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", default="128,32,8", help="SAGE widths (128: Physics' 2.19 M parameters)")
    ap.add_argument("--members", default="3,5,9", help="ring sizes M = P + 1")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "shard.json")
    ap.add_argument("--render", action="store_true", help="only re-render the markdown from --out")
    ap.add_argument("--ring-steps", type=int, default=10, help="steps of each real ring's collectives")
    ap.add_argument("--port", type=int, default=29611, help="the real rings' rendezvous port")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # hidden,members: one configuration, here
    ap.add_argument("--ring-rank", help=argparse.SUPPRESS)  # rank,members,n,steps,port
    args = ap.parse_args()
    if args.ring_rank:
        r, m, n, steps, port = (int(x) for x in args.ring_rank.split(","))
        print(json.dumps(ring_rank(r, m, n, steps, port)))
        return
    if args.one:
        hidden, members = (int(x) for x in args.one.split(","))
        print(json.dumps(one(hidden, members, args.steps, args.warmup)))
        return
    sys.path[:0] = [str(ROOT / "trainer")]
    args.hidden = [int(x) for x in args.hidden.split(",")]
    args.members = [int(x) for x in args.members.split(",")]
    if not args.render:
        args.out.write_text(json.dumps(measure(args), indent=1) + "\n")
    write_section(render(json.loads(args.out.read_text())))


if __name__ == "__main__":
    main()
