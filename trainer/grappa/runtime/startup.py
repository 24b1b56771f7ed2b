"""What a local run's processes do before epoch 1, for the launcher to show instead of silence.

Where the time goes (P = 2, 2,000 nodes, a 2-core machine shared with other work): spawning the
three processes to the end of epoch 1 took 5.6-13.2 s, nearly all of it imports. Alone, one
process imports torch in 3-5 s and torch._dynamo in 3-4 s more (PyG pulled it in at import;
torch.optim pulls it in at the first optimizer anyway), PyG itself ~1 s more; three processes do
it at once on two cores. The rendezvous took ~1 s, the round's local graphs 0.01-0.04 s, epoch 1
0.1-0.2 s. The ranks no longer import PyG; the rest is torch's, so the launcher says what is under
way: the aggregator appends a line per phase to the file named by $GRAPPA_PHASES_FILE (set by the
launcher only: pods log instead), which the launcher prints once each.
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
