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


def test_a_round_fetched_ahead_parses_headers_under_the_lock(tmp_path):
    """The background fetch reads the last halo's runs and maps the next round's files while the
    steps (and their own maps) go on in the main thread."""
    from grappa.data.local_copy import LocalCopy
    from grappa.data.local_graph import build_local_graph
    from grappa.data.prefetch import RoundFetcher
    cfg = small_store(tmp_path, chunks=4)
    fetcher = RoundFetcher(LocalCopy(cfg.store_path, tmp_path / "local"))
    fetcher.take([0, 1])  # a halo in chunks 2 and 3, its runs kept in the folder
    _watch.update(on=True, parses=0, unlocked=[])
    try:
        fetcher.ahead([0, 2], build=lambda view: build_local_graph(view, [0], 2))
        fetcher.close()
    finally:
        _watch["on"] = False
    assert fetcher.take([0, 2]) is not None and fetcher.hand_over() is not None  # fetched and built ahead
    assert _watch["parses"] > 0, _watch
    assert _watch["unlocked"] == [], f"headers parsed outside grappa.util.npy's lock by {_watch['unlocked']}"
    fetcher.close(remove=True)
