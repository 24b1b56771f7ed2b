"""Progress of a prepare across processes: shared counters, one bar per phase in the parent."""
from __future__ import annotations

import multiprocessing
import threading
from typing import Optional


class Counters:
    """Edges read, node rows read and edges finalised; safe to share with spawned workers."""

    def __init__(self, ctx=multiprocessing) -> None:
        self.edges = ctx.Value("q", 0)
        self.nodes = ctx.Value("q", 0)
        self.final = ctx.Value("q", 0)

    def add(self, edges: int = 0, nodes: int = 0, final: int = 0) -> None:
        for value, inc in ((self.edges, edges), (self.nodes, nodes), (self.final, final)):
            if inc:
                with value.get_lock():
                    value.value += inc


class PhaseBar:
    """A tqdm bar over one counter, refreshed by a thread while the phase runs (edges/s shows as
    the rate); `extra` adds a postfix such as the node pass's share done."""

    def __init__(self, desc: str, total: int, counter, enabled: bool,
                 extra: Optional[callable] = None) -> None:
        self.desc, self.total, self.counter, self.enabled, self.extra = desc, total, counter, enabled, extra
        self._stop = threading.Event()

    def __enter__(self) -> "PhaseBar":
        if self.enabled:
            from grappa.util.progress_bar import progress_bar
            self._bar = progress_bar(self.total, self.desc, "edge", unit_scale=True, smoothing=0.1)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _refresh(self) -> None:
        self._bar.n = self.counter.value
        if self.extra:
            self._bar.set_postfix_str(self.extra(), refresh=False)
        self._bar.refresh()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._refresh()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._refresh()
            self._bar.close()
