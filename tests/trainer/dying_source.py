"""Sources whose edge parts fail inside a prepare worker process (importable there: spawned
workers get the test's sys.path)."""
from __future__ import annotations

import os
import signal

import numpy as np

from grappa.data.sources.base import EdgeBlock, EdgePart
from grappa.data.sources.in_memory import MemorySource


class DyingEdges(EdgePart):
    """Kills its process, as the kernel's OOM killer would."""

    num_edges = 10

    def blocks(self, block_edges):
        os.kill(os.getpid(), signal.SIGKILL)
        yield  # pragma: no cover


class BadEdges(EdgePart):
    num_edges = 10

    def blocks(self, block_edges):
        yield EdgeBlock(np.arange(10), np.full(10, 99), "bad.npy", 40)


def source(part: EdgePart) -> MemorySource:
    rng = np.random.default_rng(0)
    src = MemorySource("test", np.zeros((2, 0), np.int64), rng.standard_normal((20, 2)).astype(np.float32),
                       np.zeros(20, np.int64), tuple(np.arange(20) == i for i in range(3)), 2)
    src.in_memory = False  # let it go to worker processes
    src.edge_parts = lambda parts: [part, part]
    src.num_edges = 2 * part.num_edges
    return src
