"""What a local run's processes do before epoch 1, for the launcher to show instead of silence.

Measured on a 2-core machine (P = 2, 2,000 nodes): 12.8 s from spawning the three processes to
the end of epoch 1, of which 11 s went to imports (torch, and PyG with torch._dynamo, three
processes at once on two cores), 1 s to the rendezvous, 0.1 s to the round's local graphs and
0.2 s to the epoch. The ranks no longer import PyG (9.3 s then); the rest is torch's and the
group's, so the launcher says what is under way: the aggregator appends a line per phase to the
file named by $GRAPPA_PHASES_FILE (set by the launcher only: pods log instead), which the launcher
prints once each.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV = "GRAPPA_PHASES_FILE"
JOINED, ROUND_BUILT, STAGE_STARTED = "joined", "round built", "stage started"


def say(phase: str, **fields) -> None:
    """Record that `phase` is reached (a no-op outside a local run)."""
    path = os.environ.get(ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"phase": phase, "at": time.time(), **fields}) + "\n")


class PhaseLines:
    """The launcher's reader: the phases recorded since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self) -> list[dict]:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        complete = chunk[:chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines()]
