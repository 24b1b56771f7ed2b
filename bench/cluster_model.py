"""Cluster-time model: what an epoch would take if every machine had cores of its own.

On this 2-core machine the P + 1 (Grappa) or 2P (DistDGL) processes share the cores, which hides
what a cluster would show. From a measured epoch we take, per machine, the CPU seconds of its
processes and the bytes its link carried (bench/probe.py), and model

    T = compute  +  max_m link_m / rate  +  steps * round_trips * latency

where link_m is max(sent, received) for systems whose machines send and receive at once (Grappa's
ring all-reduce: every member passes a segment left while it takes one from the right; DistDGL:
every machine serves features while it pulls its own) and sent + received where the phases take
turns on a link (`grappa-star`, the previous design: gradients up, then parameters down through
the aggregator's link). compute is max_m cpu_m where the machines work side by side (the ring's
members all reduce and step at once, DistDGL's trainers), and for the star the busiest worker's
plus the aggregator's, which reduced and stepped while every worker waited (in series).

Projections to P' machines scale the per-step quantities of the largest measured run. A step's
CPU has a part that grows with the seeds a machine gets and a fixed part that does not: the
all-reduce and the optimizer step over the whole model, the same model for both systems. In
mini-batch training a worker's step handles `seeds(P) = min(batch, n_train / P)` seeds, so the
first part (and, for DistDGL, the neighbourhood it samples and pulls) is taken proportional to
seeds(P) and the fixed part is kept, for both systems alike. The fixed part is measured on
Grappa's aggregator machine, which does exactly that and nothing else each step (it sums the
message and applies the optimizer, never a forward or a backward); DistDGL's trainers all-reduce
and step the same model, so the same figure is charged to them. Bytes split the same way:
DistDGL's machines carry their gradient all-reduce, a ring over P trainers, 2(P-1)/P of a message
each way per step whatever the seeds, plus the pulls, which scale with seeds(P) and with the remote
share of a sampled neighbourhood, (P - 1) / P; Grappa's messages are the model's size: with the ring
each member's share is 2(M-1)/M of a message each way, M = P + 1 (scaled by that factor from the
measured P); with the star the aggregator reduced and served P of them per step.

With a sharded optimizer (`training.shardOptimizer`, runtime/sharded.py) the optimizer's share of
the fixed part (`optimizer_cpu`, measured by bench/shard.py) is divided by the ring's M members
(`fixed_at`, when a profile sets `shard`); the all-reduce's share and the bytes stay. Profiles
built without it keep the fixed part whole, as measured.

Machines are charged too: Grappa runs on P + 1 machines (its aggregator is one), DistDGL on P, so
besides the epoch time the projections give machine-seconds per epoch (`machine_seconds`). All of it
is a model: everything computed here is labelled a projection where it is shown.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DUPLEX = {"distdgl": True, "distdgl-random": True, "grappa": True, "grappa-star": False}


def round_trips(system: str, machines: int, layers: int) -> int:
    """Sequential message exchanges per step: DistDGL samples one hop per layer, pulls features,
    then all-reduces (a ring of 2(P-1) hops); Grappa's ring over P + 1 members has 2P hops
    (`machines` counts the aggregator); the star pushed a gradient and got parameters back."""
    if system.startswith("distdgl"):
        return layers + 1 + 2 * (machines - 1)
    if system == "grappa":
        return 2 * (machines - 1)
    return 2


def link_bytes(machine: dict, duplex: bool) -> int:
    s, r = machine["sent_bytes"], machine["received_bytes"]
    return max(s, r) if duplex else s + r


def modelled_epoch(machines: list[dict], system: str, rate_bytes_s: float, steps: int = 0,
               layers: int = 0, latency_s: float = 0.0) -> float:
    duplex = DUPLEX[system]
    if system == "grappa-star":  # machine 0, the aggregator, worked while the workers waited
        compute = machines[0]["cpu_seconds"] + max(m["cpu_seconds"] for m in machines[1:])
    else:
        compute = max(m["cpu_seconds"] for m in machines)
    transfer = max(link_bytes(m, duplex) for m in machines) / rate_bytes_s
    return compute + transfer + steps * round_trips(system, len(machines), layers) * latency_s


def modelled_epoch_behind(machines: list[dict], system: str, rate_bytes_s: float, background: int) -> float:
    """`modelled_epoch` with machine `background` (the storage machine) working beside the others
    rather than before or after them, as a prefetch from it does: the epoch is the longer of the
    others' modelled epoch and that machine's own CPU plus its link's bytes at the rate. The
    workers' side of its traffic stays on their links."""
    return max(*split_behind(machines, system, rate_bytes_s, background))


def split_behind(machines: list[dict], system: str, rate_bytes_s: float, background: int) -> tuple[float, float]:
    """The two sides of `modelled_epoch_behind`: (the others' modelled epoch, machine
    `background`'s CPU plus its link's bytes at the rate)."""
    rest = [m for i, m in enumerate(machines) if i != background]
    own = machines[background]
    return (modelled_epoch(rest, system, rate_bytes_s),
            own["cpu_seconds"] + link_bytes(own, DUPLEX[system]) / rate_bytes_s)


def seeds_per_step(n_train: int, machines: int, batch: int) -> float:
    return min(batch, n_train / machines)


def steps_per_epoch(n_train: int, machines: int, batch: int) -> int:
    return max(1, math.ceil(n_train / (machines * batch)))


@dataclass
class StepProfile:
    """Per-step figures of one measured epoch, split by role."""
    system: str
    machines: int  # workers (Grappa) or machines (DistDGL)
    steps: int
    worker_cpu: float  # the busiest worker machine's CPU seconds per step
    worker_sent: float
    worker_received: float
    agg_cpu: float = 0.0  # Grappa's aggregator machine, per step
    agg_sent: float = 0.0
    agg_received: float = 0.0
    fixed_cpu: float = 0.0  # of worker_cpu: the step's all-reduce and optimizer, whatever the seeds
    # of fixed_cpu: the optimizer over the whole model (bench/shard.py measures it), and whether the
    # projection shards it over the ring's M members (training.shardOptimizer); 0 / False: kept
    optimizer_cpu: float = 0.0
    shard: bool = False
    message_bytes: float = 0.0  # DistDGL: its gradient all-reduce's message (4 B a parameter)


def machines_charged(system: str, p: int) -> int:
    """Machines a job of `p` workers occupies: Grappa's aggregator is one more."""
    return p if system.startswith("distdgl") else p + 1


def machine_seconds(epoch_seconds: float, system: str, p: int) -> float:
    return epoch_seconds * machines_charged(system, p)


def ring_share(members: int) -> float:
    """Bytes each member of a ring all-reduce passes each way, in messages: 2(M-1)/M."""
    return 2 * (members - 1) / members if members > 1 else 0.0


def profile(system: str, machines: list[dict], steps: int, fixed_cpu: float | None = None,
            message_bytes: float = 0.0) -> StepProfile:
    """Grappa's machine 0 is the aggregator, whose per-step CPU is the fixed part of a member's
    step; DistDGL's machines are all alike, and their fixed part (`fixed_cpu`, per step) and
    all-reduce message (`message_bytes`) come from the same model's Grappa run."""
    workers = machines if system.startswith("distdgl") else machines[1:]
    busiest = max(workers, key=lambda m: m["cpu_seconds"])
    prof = StepProfile(system, len(workers), steps, busiest["cpu_seconds"] / steps,
                       max(m["sent_bytes"] for m in workers) / steps,
                       max(m["received_bytes"] for m in workers) / steps)
    if not system.startswith("distdgl"):
        agg = machines[0]
        prof.agg_cpu, prof.agg_sent, prof.agg_received = (
            agg["cpu_seconds"] / steps, agg["sent_bytes"] / steps, agg["received_bytes"] / steps)
        if system == "grappa":  # the ring's aggregator does a member's fixed work and no more
            prof.fixed_cpu = min(prof.agg_cpu, prof.worker_cpu)
    else:
        prof.fixed_cpu = min(fixed_cpu or 0.0, prof.worker_cpu)
        prof.message_bytes = message_bytes
    return prof


def fixed_at(prof: StepProfile, members: int) -> float:
    """The fixed part of a member's step in a ring of `members`: with a sharded optimizer each
    member updates 1/M of the model, so the optimizer's share falls by M (bytes do not change:
    a reduce-scatter and an all-gather are the all-reduce's two halves)."""
    if not prof.shard or members < 2:
        return prof.fixed_cpu
    opt = min(prof.optimizer_cpu, prof.fixed_cpu)
    return prof.fixed_cpu - opt + opt / members


def scaled_cpu(prof: StepProfile, seeds: float, members: int = 0) -> float:
    """A worker's CPU per step with `seeds` times the measured seeds: the fixed part kept (and its
    optimizer share divided by the ring's `members` when the profile shards it)."""
    return fixed_at(prof, members) + (prof.worker_cpu - prof.fixed_cpu) * seeds


def project(prof: StepProfile, machines: int, n_train: int, batch: int) -> tuple[list[dict], int]:
    """Per-machine epoch figures at `machines` workers, scaled from `prof` (see the module doc)."""
    steps = steps_per_epoch(n_train, machines, batch)
    seeds = seeds_per_step(n_train, machines, batch) / seeds_per_step(n_train, prof.machines, batch)
    if prof.system.startswith("distdgl"):
        remote = ((machines - 1) / machines) / max((prof.machines - 1) / prof.machines, 1e-9)
        ring_then, ring_now = (ring_share(prof.machines) * prof.message_bytes,
                               ring_share(machines) * prof.message_bytes)

        def pulls(measured: float) -> float:  # the all-reduce's fixed bytes, then the seeds' pulls
            return ring_now + max(measured - ring_then, 0.0) * seeds * remote
        one = {"cpu_seconds": steps * scaled_cpu(prof, seeds),
               "sent_bytes": int(steps * pulls(prof.worker_sent)),
               "received_bytes": int(steps * pulls(prof.worker_received))}
        return [one] * machines, steps
    if prof.system == "grappa":  # ring: every member's share is 2(M-1)/M of a message, M = P + 1
        share = (machines / (machines + 1)) / (prof.machines / (prof.machines + 1))
        # the aggregator's step is fixed work only: with a sharded optimizer, its 1/M share too
        agg_cpu = prof.agg_cpu - prof.fixed_cpu + fixed_at(prof, machines + 1)
        agg = {"cpu_seconds": steps * agg_cpu, "sent_bytes": int(steps * prof.agg_sent * share),
               "received_bytes": int(steps * prof.agg_received * share)}
        worker = {"cpu_seconds": steps * scaled_cpu(prof, seeds, machines + 1),
                  "sent_bytes": int(steps * prof.worker_sent * share),
                  "received_bytes": int(steps * prof.worker_received * share)}
        return [agg] + [worker] * machines, steps
    fan = machines / prof.machines  # the star's aggregator served every worker each step
    agg = {"cpu_seconds": steps * prof.agg_cpu * fan, "sent_bytes": int(steps * prof.agg_sent * fan),
           "received_bytes": int(steps * prof.agg_received * fan)}
    worker = {"cpu_seconds": steps * prof.worker_cpu * seeds, "sent_bytes": int(steps * prof.worker_sent),
              "received_bytes": int(steps * prof.worker_received)}
    return [agg] + [worker] * machines, steps


def storage_round_seconds(per_worker_bytes: float, workers: int, rate_bytes_s: float) -> float:
    """The storage machine's link at a round: one machine's link carries every worker's fetch of
    the round's data (`per_worker_bytes` each), so it takes workers x bytes / rate. With prefetch
    the fetch runs during the round before, and costs an epoch only what it takes beyond it
    (`exposed_store_seconds`)."""
    return workers * per_worker_bytes / rate_bytes_s


def exposed_store_seconds(link_seconds: float, round_train_seconds: float, every: int) -> float:
    """Per epoch, the storage link's time a prefetched round leaves uncovered by the round before's
    training, spread over the round's `every` epochs."""
    return max(0.0, link_seconds - round_train_seconds) / max(every, 1)
