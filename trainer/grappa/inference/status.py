"""A worker's progress and measurements, as a small JSON file in the scratch folder.

The launcher's progress bar sums the files; rank 0 copies them into the output manifest. Written
by rename, so a reader never sees half a file.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from grappa.util.cgroup_memory import CGROUP_PEAKS
from grappa.util.process_memory import PeakMemory

_PAGE = os.sysconf("SC_PAGE_SIZE")


def anon_rss_bytes() -> int:
    """Resident memory this process allocated itself (heap, tensors): RSS without the mapped
    files, whose pages the kernel maps ahead in 64 KiB runs (fault-around) and reclaims at will.
    From /proc/self/statm (resident - shared), a tenth of the cost of parsing .../status."""
    try:
        with open("/proc/self/statm") as fh:
            fields = fh.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def status_file(scratch: Path, rank: int) -> Path:
    return scratch / f"status-{rank}.json"


def read_status(scratch: Path, rank: int) -> dict:
    try:
        return json.loads(status_file(scratch, rank).read_text())
    except (OSError, ValueError):
        return {}


class Status:
    def __init__(self, scratch: Path, rank: int, interval: float = 1.0) -> None:
        self.path = status_file(scratch, rank)
        # PSS has no kernel peak: sampled, once a second (reading smaps_rollup costs ~10-40 ms)
        self.memory = PeakMemory(interval=1.0)
        self.interval, self._written = interval, 0.0
        self.state = {"rank": rank, "phase": "start", "layer": 0, "rows": 0, "rows_total": 0,
                      "skipped_layers": [], "assembled_rows": 0, "started_at": time.time(),
                      "bytes_read": 0, "bytes_written": 0}
        self.peak_anon = 0

    def sample(self) -> None:
        """Called where a block's arrays are alive (the kernel keeps no peak of anonymous RSS)."""
        self.peak_anon = max(self.peak_anon, anon_rss_bytes())

    def update(self, force: bool = False, **fields) -> None:
        self.state.update(fields)
        self.sample()
        now = time.monotonic()
        if force or now - self._written >= self.interval:
            self._written = now
            self.memory.sample()
            self.state.update(peak_rss_bytes=self.memory.peak_rss, peak_pss_bytes=self.memory.peak_pss,
                              peak_anon_bytes=self.peak_anon,
                              **{f"{k}_bytes": v for k, v in zip(CGROUP_PEAKS, self.memory.cgroup.values())},
                              seconds=time.time() - self.state["started_at"])
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.state))
            os.replace(tmp, self.path)

    def add(self, key: str, n: int) -> None:
        self.update(**{key: self.state[key] + n})
