"""The aggregator <-> worker message layouts (shared so both ends agree on every byte).

Control (aggregator -> worker), float64[8]: cmd, epoch, round, pairing_seed, steps, do_eval, wbar, 0.
An epoch with do_eval: once every report is in, CMD_EVAL (the epoch field set) starts the workers'
evaluation, so none of it overlaps the epoch (its bounds, `started_at`/`ended_at`, are the
aggregator's).
Round stats (worker -> aggregator), float64[6]: sum of seed coverage, seeds, local nodes, halo
nodes, local edges, seconds to build.
Step: one all-reduce over every rank, layout in exchange.py (no parameters travel per step).
Replica (aggregator -> worker, after a start, a resume or a RETEXO stage): float32 parameters |
float buffers, then the optimizer state as a variable-size uint8 message (replica.py); with a
sharded optimizer (sharded.py), only the receiving rank's slice of it.
Evaluation stats (worker -> aggregator), float64[9]: loss sum, correct, count for train/val/test.
Epoch report (worker -> aggregator, after each epoch's steps), float64[EPOCH_REPORT_LEN]: this epoch's train bytes
sent, received, fetch bytes sent, received; peak RSS and peak PSS in bytes (memory.py); the
round's local nodes and local edges (for bytes per local edge); the CRC-32 of its parameters
(replica.check_replicas); then the bytes read from the chunk store in the round so far, in the
order of STORE_READS (LocalGraph.store_reads: the build's checksum reads and structure, owned and halo
feature rows, each every read and distinct; then a fetched round's FETCH_COUNTS: the store bytes
fetched for it, of them ahead, of them the halo's rows, of those fetched as read, the halo's rows taken from the worker-local folder instead, that folder's bytes, of them the next round's, and the
background fetch's peak buffers); last, the worker's memory cgroup in the order of CGROUP_PEAKS
(util/cgroup_memory.py: peak usage, peak working set, peak page cache; zeros without a cgroup).
With a sharded optimizer each report is followed by the
worker's optimizer slice (variable-size uint8), which the aggregator merges for its checkpoint.
"""
from __future__ import annotations

import os

import torch

from grappa.data.local_graph import FETCH_COUNTS
from grappa.util.cgroup_memory import CGROUP_PEAKS

CMD_ROUND, CMD_EPOCH, CMD_STOP = 1, 2, 3
CMD_STAGE, CMD_STAGE_END = 4, 5  # RETEXO: set up stage (round field = stage), end it
CMD_EVAL = 6  # after an epoch's reports: evaluate now
CONTROL_LEN = 8
ROUND_STATS_LEN = 6
EVAL_STATS_LEN = 9
STORE_READS = ("verify", "verify_distinct", "structure", "structure_distinct", "own_features", "own_features_distinct",
               "halo_features", "halo_features_distinct") + FETCH_COUNTS
CGROUP_AT = 9 + len(STORE_READS)  # where they start in an epoch report
EPOCH_REPORT_LEN = CGROUP_AT + len(CGROUP_PEAKS)
SPLITS = ("train", "val", "test")


def control(cmd: int, epoch: int = 0, round_: int = 0, pairing_seed: int = 0, steps: int = 0,
            do_eval: bool = False, wbar: float = 1.0) -> torch.Tensor:
    return torch.tensor([cmd, epoch, round_, pairing_seed, steps, float(do_eval), wbar, 0.0],
                        dtype=torch.float64)


EVAL_QUIET = "GRAPPA_EVAL_QUIET_SECONDS"


def eval_quiet_seconds() -> float:
    """How long the aggregator waits between an epoch's end and CMD_EVAL (default 0). For the
    benchmarks (bench/peer.py): their probe reads counters every 0.05 s and splits a reading
    between two times linearly, so evaluation starting at once would be partly counted in the
    last epoch."""
    raw = os.environ.get(EVAL_QUIET, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 60.0:
        raise ValueError(f"{EVAL_QUIET}={raw!r}: give seconds from 0 to 60, or leave it unset")
    return value
