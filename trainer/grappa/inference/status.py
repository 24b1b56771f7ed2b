"""A worker's progress and measurements, as a small JSON file in the scratch folder.

The launcher's progress bar sums the files; rank 0 copies them into the output manifest. Written
by rename, so a reader never sees half a file.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..memory import PeakMemory


def status_file(scratch: Path, rank: int) -> Path:
    return scratch / f"status-{rank}.json"


def read_status(scratch: Path, rank: int) -> dict:
    try:
        return json.loads(status_file(scratch, rank).read_text())
    except (OSError, ValueError):
        return {}


class Status:
    def __init__(self, scratch: Path, rank: int, interval: float = 0.5) -> None:
        self.path = status_file(scratch, rank)
        self.memory = PeakMemory(interval=0.2)  # PSS has no kernel peak: sampled
        self.interval, self._written = interval, 0.0
        self.state = {"rank": rank, "phase": "start", "layer": 0, "rows": 0, "rows_total": 0,
                      "skipped_layers": [], "assembled_rows": 0, "started_at": time.time(),
                      "bytes_read": 0, "bytes_written": 0}

    def update(self, force: bool = False, **fields) -> None:
        self.state.update(fields)
        now = time.monotonic()
        if force or now - self._written >= self.interval:
            self._written = now
            self.memory.sample()
            self.state.update(peak_rss_bytes=self.memory.peak_rss, peak_pss_bytes=self.memory.peak_pss,
                              seconds=time.time() - self.state["started_at"])
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.state))
            os.replace(tmp, self.path)

    def add(self, key: str, n: int) -> None:
        self.update(**{key: self.state[key] + n})
