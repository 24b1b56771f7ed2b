"""Progress bars: tqdm on a terminal; elsewhere (a file, a pipe, a pod's log) one plain line each
time another `STEP` of the work is done, instead of a stream of carriage returns that a log
shows as one endless line."""
from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

STEP = 0.05  # a line per 5 %


class LineProgress:
    """The part of tqdm's interface Grappa uses, printing whole lines."""

    def __init__(self, total: Optional[int], desc: str, unit: str, file: TextIO) -> None:
        self.total, self.desc, self.unit, self.file = total, desc, unit, file
        self.n = 0
        self.postfix = ""
        self._printed = -1  # the last STEP multiple printed
        self._started = time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        self.refresh()

    def set_postfix(self, ordered_dict: Optional[dict] = None, refresh: bool = True, **kw: Any) -> None:
        items = {**(ordered_dict or {}), **kw}
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in items.items()), refresh)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s
        if refresh:
            self.refresh()

    def refresh(self) -> None:
        if not self.total:
            return
        step = int(min(self.n, self.total) / self.total / STEP + 1e-9)
        if step > self._printed:
            self._printed = step
            self._line()

    def _line(self) -> None:
        done = f"{self.n:,}/{self.total:,} {self.unit}" if self.total else f"{self.n:,} {self.unit}"
        pct = f" ({self.n / self.total:.0%})" if self.total else ""
        post = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {done}{pct}{post} [{time.monotonic() - self._started:.0f} s]",
              file=self.file, flush=True)

    def close(self) -> None:
        if self.total and self._printed * STEP < 1 - 1e-9 and self.n >= self.total:
            self._line()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: Optional[int], desc: str, unit: str, file: Optional[TextIO] = None, **tqdm_kw: Any):
    """A tqdm bar when `file` (default stderr) is a terminal, else a LineProgress (a silent one
    with `disable=True`, or when the total is unknown)."""
    file = file or sys.stderr
    if tqdm_kw.get("disable"):
        return LineProgress(None, desc, unit, file)
    if file.isatty():
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit=unit, file=file, **tqdm_kw)
    return LineProgress(total, desc, unit, file)
