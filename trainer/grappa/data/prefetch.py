"""A worker's rounds fetched ahead: the next round's data comes while the current round trains.

The round schedule is known in advance (round t's variable chunk follows from t and the partition
seed: strategies/grappa/rounds.py), so once round t has its data, `ahead(owned of t + 1)` fetches
round t + 1's in one background thread (local_copy.LocalCopy.fetch), and round t + 1's `take`
only waits for what is left of it. The fetch ahead is paced (data/pace.py) to end about an epoch
before the next round: the worker gives the budget (`ahead(owned, seconds)`, again as its epochs
go), so the whole of the next round's chunks never crosses the link in the epoch that starts a
round (P workers' variable chunks through one store's link); `take` lifts the pace. The next
halo's rows, found only once its chunks are here, are budgeted from the start as many bytes as
the current halo's (rounds' halos are alike in size), so they do not crowd the budget's end.
With storage.haloRows reachable (rows otherwise fetched as read), the fetch ahead also builds the
next round's graph and brings the halo rows its seeds can reach (the strategy's `reach`), so its
steps read none from the store. Given `build`, the fetch ahead ends by building the next round's
local graph from its data (the strategy's `round_graph`), so the epoch that starts the round does
not: `hand_over` gives it after `take`; it is held beside the current round's until then, and
counted in prefetch_memory. A `take` for
anything else (a schedule that changed) fetches on demand, as `take` does when nothing was
fetched ahead (storage.fetch: on-demand).

Bounded: the folder holds at most two rounds' data, the current one's and the next one's (base
chunks, shared, once), everything else evicted at each `take`; the background fetch holds one
fetch's index arrays, one slab of rows read and a new file's rows of at most a slab in memory
(local_copy.Fetched.hold), then what `build` made (the next round's local graph) until the
round starts. `counts()` reports
per round (local_graph.FETCH_COUNTS): the store bytes fetched for the round, how many of them
ahead, of them the halo's feature rows and those fetched as the steps read them (a mini-batch
round's: data/halo_rows.py, never ahead), the store bytes the folder held already (halo rows, a chunk's index, a new variable chunk's
rows: local_copy.py), the folder's bytes, of them the next round's, and the
background fetch's peak buffers.
The last two are what is held when counts() is called, or what a fetch ahead held when it
completed since the call before, whichever is more: a fetch that starts and completes between
two epoch reports (or completes after the last report of the round before it) is still seen, by
the next report, however short the epochs.
"""
from __future__ import annotations

import logging
import shutil
import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np

from grappa.data.local_copy import Fetched, LocalCopy, LocalView
from grappa.data.pace import Pace

log = logging.getLogger("grappa.data.prefetch")
# a round's view -> the global ids whose rows its steps may read, or None (Strategy.reach)
Reach = Callable[[LocalView], Optional[np.ndarray]]
# a round's view -> what its steps start from (Strategy.round_graph: a LocalGraph), with nbytes()
Build = Callable[[LocalView], Any]


class RoundFetcher:
    def __init__(self, copy: LocalCopy) -> None:
        self.copy = copy
        self.current: Optional[list[int]] = None
        self._round = Fetched()
        self._round_ahead = 0
        self._next: Optional[list[int]] = None
        self._next_fetched = Fetched()
        self._next_view: Optional[LocalView] = None  # the next round's, its reachable rows warmed
        self._next_built = None  # what `build` made of the next round's view
        self._built = None  # ... kept by `take` for the round it starts, until `hand_over`
        self._warmed = 0  # bytes of rows the current round's view had warmed ahead
        self._thread: Optional[threading.Thread] = None
        self._pace: Optional[Pace] = None
        self._error: Optional[BaseException] = None
        # (prefetch_disk, prefetch_memory) of fetches ahead that completed since the last counts()
        self._completed = (0, 0)
        self._lock = threading.Lock()

    def take(self, owned: Sequence[int], reach: Optional[Reach] = None) -> LocalView:
        """The round of `owned` starts: its data local (fetched ahead, or now), the rest evicted;
        `reach` as for `ahead`: a round not fetched ahead brings its reachable rows now."""
        owned = list(owned)
        self._join()  # at full speed: the round starts now
        view, self._built = None, None
        if self._next == owned and self._error is None:
            self._round, self._round_ahead = self._next_fetched, self._next_fetched.total
            view, self._built = self._next_view, self._next_built
        else:
            if self._error is not None:  # fetching now raises it again if it was about this round
                if self._next == owned:
                    log.warning("fetching this round's data (chunks %s) ahead failed (%s); fetching it now",
                                owned, self._error)
                else:
                    log.warning("fetching round data ahead (chunks %s) failed (%s); this round needs chunks "
                                "%s instead: fetching them now", self._next, self._error, owned)
            self._round, self._round_ahead = self.copy.fetch(owned), 0
        self._next, self._next_fetched, self._next_view, self._next_built, self._error = \
            None, Fetched(), None, None, None
        self.current = owned
        self.copy.evict(self.copy.entries(owned))
        if view is None:
            view = self.copy.view(owned, self._round)  # an as-read round's rows add to its counts
            if reach is not None and self.copy.as_read and (ids := reach(view)) is not None:
                view.warm(ids)
        self._warmed = self._round.halo_rows if reach is not None else 0  # what the next round expects
        return view

    def hand_over(self):
        """What the fetch ahead built for the round `take` started (None: nothing; build it from
        the view), given once: the fetcher keeps no reference to it."""
        built, self._built = self._built, None
        return built

    def ahead(self, owned: Sequence[int], seconds: Optional[float] = None, reach: Optional[Reach] = None,
              build: Optional[Build] = None) -> None:
        """Fetch the next round's data in the background, its chunk files spread over `seconds`
        from now (None: at once); called again for the same data, the budget is set anew.
        `reach(view)`: the global ids whose rows the round's steps may read, fetched ahead too
        when its halo rows come as read (storage.haloRows: reachable). `build(view)`: made once
        the data is here, given by `hand_over` after the round's `take`."""
        owned = list(owned)
        if self._thread is not None:
            if owned == self._next and self._pace is not None:
                self._pace.retarget(seconds)
            return
        if owned == self.current:
            return
        self._next, self._next_fetched = owned, Fetched()
        fetched = self._next_fetched
        current = self.copy.entries(self.current) if self.current is not None else set()
        self._pace = pace = Pace(seconds)
        # the next halo's rows, known once its chunks are here, expected as many as this one's
        warm = reach is not None and self.copy.as_read
        expect = (self._warmed if warm else 0) if self.copy.as_read else \
            self.copy.halo_row_bytes(self.current) if self.current is not None else 0

        def run() -> None:
            try:
                self.copy.fetch(owned, fetched, pace, expect)
                view = self.copy.view(owned, fetched) if warm or build is not None else None
                if warm:
                    ids = reach(view)
                    if ids is not None:
                        view.warm(ids, pace)
                pace.settle(0)
                built = build(view) if build is not None else None
                self._next_view, self._next_built = view, built
            except BaseException as err:  # noqa: BLE001 - reported by the next take
                self._error = err
                return
            # the next round's, whole: its folder, and the more of the fetch's buffers and what it built
            held = (self.copy.disk_bytes(exclude=current),
                    max(fetched.memory_peak, built.nbytes() if built is not None else 0))
            with self._lock:
                self._completed = tuple(map(max, self._completed, held))
        self._thread = threading.Thread(target=run, name="grappa-prefetch", daemon=True)
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._pace.release()
            self._thread.join()
            if self._pace.waited:
                log.info("the fetch ahead of chunks %s waited %.1f s in all to keep to its budget",
                         self._next, self._pace.waited)
            self._thread, self._pace = None, None

    def counts(self) -> dict[str, int]:
        """The current round's local_graph.FETCH_COUNTS, live (the background fetch goes on);
        prefetch_disk and prefetch_memory at least what a fetch ahead held when it completed
        since the last call (module docstring)."""
        current = self.copy.entries(self.current) if self.current is not None else set()
        with self._lock:
            (disk, memory), self._completed = self._completed, (0, 0)
        return {"fetched": self._round.total, "fetched_ahead": self._round_ahead,
                "fetched_rows": self._round.halo_rows, "fetched_on_demand": self._round.on_demand,
                "fetched_reused": self._round.reused + self._round.reused_files,
                "local_disk": self.copy.disk_bytes(),
                "prefetch_disk": max(disk, self.copy.disk_bytes(exclude=current)),
                "prefetch_memory": max(memory, self._next_fetched.memory_peak)}

    def close(self, remove: bool = False) -> None:
        """Wait for the background fetch; `remove`: delete the folder (the job is done)."""
        self._join()
        if remove:
            shutil.rmtree(self.copy.folder, ignore_errors=True)
