"""Memory accounting: PSS counts a page shared by k processes as 1/k in each, RSS in full."""
import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np

from grappa.util.process_memory import PeakMemory, peak_rss_bytes, pss_bytes

MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def test_pss_is_positive_and_at_most_rss():
    p = PeakMemory()
    p.sample()
    assert 0 < pss_bytes() <= rss_bytes() <= peak_rss_bytes()
    assert 0 < p.peak_pss <= p.peak_rss


def test_a_mapped_file_shared_with_another_process_counts_half_in_pss(tmp_path):
    path = tmp_path / "store.bin"
    np.ones(64 * MIB // 8, dtype=np.float64).tofile(path)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import numpy as np, sys, time
        m = np.memmap({str(path)!r}, dtype=np.float64, mode="r")
        float(m.sum())                      # touch every page
        print("mapped", flush=True)
        sys.stdin.read()                    # hold the mapping until the parent is done
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "mapped"
        rss0, pss0 = rss_bytes(), pss_bytes()
        m = np.memmap(path, dtype=np.float64, mode="r")
        assert float(m.sum()) == 64 * MIB // 8
        rss_growth, pss_growth = rss_bytes() - rss0, pss_bytes() - pss0
        assert rss_growth > 60 * MIB  # the whole file is resident in this process...
        assert 24 * MIB < pss_growth < 40 * MIB  # ...but it is shared: half of it is ours
        del m
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def _samplers() -> list:
    return [t for t in threading.enumerate() if t.name == "grappa-pss"]


def _wait_gone(threads: list) -> list:
    for t in threads:
        t.join(timeout=10)
    return [t for t in threads if t.is_alive()]


def test_a_background_sampler_ends_when_stopped_or_dropped():
    """A process that runs many workers in-process (a unit-test lane) must not keep one reading
    thread per finished worker: each walks every mapping of the process once an interval."""
    before = set(_samplers())
    stopped, dropped = PeakMemory(interval=0.01), PeakMemory(interval=0.01)
    new = [t for t in _samplers() if t not in before]
    assert len(new) == 2
    stopped.stop()
    del dropped
    gc.collect()
    assert _wait_gone(new) == []
    assert stopped.peak_pss >= 0


def test_the_c_librarys_trim_is_looked_up_once(monkeypatch):
    """find_library runs `ldconfig -p` in a child process: a worker pays for it once, not every
    round it trims its heap."""
    import ctypes.util

    from grappa.util import process_memory
    calls = []
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: calls.append(name) or real(name))
    process_memory._malloc_trim.cache_clear()
    try:
        first, second = process_memory.release_free_memory(), process_memory.release_free_memory()
    finally:
        process_memory._malloc_trim.cache_clear()
    assert calls == ["c"]
    assert isinstance(first, bool) and isinstance(second, bool)
