"""Threads that open a chunk store at once parse .npy headers (numpy's ast.literal_eval) one at a
time: CPython 3.11's AST builder keeps its recursion depth per interpreter, so two parses at once
can fail one with SystemError (grappa/util/npy.py)."""
import sys
import threading

from inference_helpers import small_store

from grappa.data.store.chunk_store import ChunkStore
from grappa.util.npy import HEADER_LOCK

_watch: dict = {"on": False, "parses": 0, "unlocked": []}


def _hook(event: str, args: tuple) -> None:
    # Audit hooks cannot be removed: this one stays for the process, so it only looks when asked.
    if _watch["on"] and event == "compile" and threading.current_thread() is not threading.main_thread():
        _watch["parses"] += 1
        if not HEADER_LOCK.locked():
            _watch["unlocked"].append(threading.current_thread().name)


sys.addaudithook(_hook)


def test_shards_opening_one_store_at_once_parse_headers_under_the_lock(tmp_path):
    cfg = small_store(tmp_path, chunks=4)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_all(i: int) -> None:
        try:
            store = ChunkStore(cfg.store_path)  # a store object of its own: every file opened anew
            start.wait()
            for k in range(store.num_chunks):
                store.load_chunk((k + i) % store.num_chunks)
        except BaseException as err:  # noqa: BLE001 - surfaced below
            errors.append(err)

    threads = [threading.Thread(target=open_all, args=(i,), name=f"shard-{i}") for i in range(4)]
    _watch.update(on=True, parses=0, unlocked=[])
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        _watch["on"] = False
    assert not errors, errors
    assert _watch["parses"] >= 4 * 4, _watch  # every shard parsed headers of every chunk
    assert _watch["unlocked"] == [], f"headers parsed outside grappa.util.npy's lock by {_watch['unlocked']}"
