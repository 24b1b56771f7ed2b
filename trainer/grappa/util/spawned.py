"""Whether this process is a spawned worker still importing the script that started it.

Spawned worker processes (multiprocessing's "spawn", which prepare's pool uses) begin by importing
the parent's main script. A script that calls grappa at its top level, with no
`if __name__ == "__main__":` guard, would then run that call again in every worker: a second
prepare or training beside the first, sharing its folders. Grappa's entry points refuse at once
instead, before they touch anything; the parent reports the worker's failure with the fix.
"""
from __future__ import annotations

import multiprocessing

GUARD = 'if __name__ == "__main__":'


def importing_main() -> bool:
    """True in a spawned worker while it imports the parent's main script (the flag
    multiprocessing's own check for this case reads)."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def unguarded(what: str) -> str:
    """The error a refused entry point raises in such a worker."""
    return (f"{what} was called while a worker process imported the script that started it: put "
            f"the script's call under `{GUARD}`")
