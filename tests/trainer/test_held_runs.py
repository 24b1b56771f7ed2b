"""data/held_runs.py: the rows a worker's folder holds, checked against a brute-force copy."""
import numpy as np
import pytest

from grappa.data import held_runs
from grappa.data.held_runs import HeldRuns


def write_halo(folder, store, runs):
    """A halo folder holding `runs` (chunk, first, end) of the store's rows, as a fetch writes it."""
    folder.mkdir()
    at = np.cumsum([e - f for _, f, e in runs]) - [e - f for _, f, e in runs]
    np.save(folder / "xruns.npy", np.array([[k, f, e, a] for (k, f, e), a in zip(runs, at)], dtype=np.int64))
    np.save(folder / "x.npy", np.concatenate([store[k][f:e] for k, f, e in runs]))


def test_mask_and_fill_give_the_rows_of_every_source_and_only_those(tmp_path, monkeypatch):
    monkeypatch.setattr(held_runs, "_SLICE_BYTES", 64)  # runs of 2 rows and more copied as slices
    monkeypatch.setattr(held_runs, "_BATCH_BYTES", 96)  # and in pieces of 3 rows
    rng = np.random.default_rng(0)
    store = {k: rng.standard_normal((40, 8)).astype(np.float32) for k in range(3)}  # 32-byte rows
    # chunk 1: short and long runs, two of them continuing one another (joined); chunk 2: one run
    write_halo(tmp_path / "a", store, [(1, 0, 1), (1, 3, 10), (1, 10, 12), (1, 20, 21), (2, 5, 39)])
    write_halo(tmp_path / "b", store, [(1, 11, 15), (1, 30, 40)])
    held = HeldRuns()
    held.add_halo(tmp_path / "a")
    held.add_halo(tmp_path / "b")
    held.add_chunk(0, store[0])
    want = {0: np.ones(40, bool), 1: np.zeros(40, bool), 2: np.zeros(40, bool)}
    for a, b in [(0, 1), (3, 15), (20, 21), (30, 40)]:
        want[1][a:b] = True
    want[2][5:39] = True
    for k in range(3):
        np.testing.assert_array_equal(held.mask(k, 40), want[k])
        out = np.full((40, 8), np.nan, dtype=np.float32)
        held.fill(k, out)
        np.testing.assert_array_equal(out[want[k]], store[k][want[k]])
        assert np.isnan(out[~want[k]]).all()  # nothing written where no source holds the row
    assert not held.mask(5, 10).any()  # a chunk no source holds


def test_take_rows_copies_each_row_a_source_holds_and_says_which(tmp_path, monkeypatch):
    monkeypatch.setattr(held_runs, "_BATCH_BYTES", 96)  # rows copied 3 at a time
    rng = np.random.default_rng(1)
    store = {k: rng.standard_normal((40, 8)).astype(np.float32) for k in range(2)}
    write_halo(tmp_path / "a", store, [(1, 2, 6), (1, 10, 12), (1, 30, 35)])
    held = HeldRuns()
    held.add_halo(tmp_path / "a")
    held.add_chunk(0, store[0])
    for k in range(2):
        rows = np.unique(rng.integers(0, 40, 25))
        at = rng.permutation(rows.size)  # out's rows in any order
        out = np.full((rows.size, 8), np.nan, dtype=np.float32)
        got = held.take_rows(k, rows, out, at)
        brute = held.mask(k, 40)[rows]
        np.testing.assert_array_equal(got, brute)
        assert 0 < got.sum() and (k == 0 or not got.all())
        np.testing.assert_array_equal(out[at[got]], store[k][rows[got]])
        assert np.isnan(out[at[~got]]).all()
    assert not held.take_rows(3, np.arange(5), np.zeros((5, 8), np.float32), np.arange(5)).any()


@pytest.mark.parametrize("kernel", ["copies", "refuses"])
def test_long_runs_between_files_are_copied_by_the_kernel_or_else_by_numpy(tmp_path, monkeypatch, kernel):
    import errno
    import os

    monkeypatch.setattr(held_runs, "_SLICE_BYTES", 64)  # runs of 2 rows and more: long
    rng = np.random.default_rng(2)
    store = {k: rng.standard_normal((40, 8)).astype(np.float32) for k in range(2)}
    write_halo(tmp_path / "a", store, [(1, 0, 1), (1, 3, 12), (1, 20, 40)])
    held = HeldRuns()
    held.add_halo(tmp_path / "a")  # a file's rows
    held.add_chunk(0, store[0])  # rows in memory: numpy's copy
    calls = []

    def copy_file_range(src, dst, count, offset_src, offset_dst):
        calls.append(count)
        if kernel == "refuses":
            raise OSError(errno.EXDEV, "cross-device")
        return real(src, dst, min(count, 40), offset_src, offset_dst)  # short copies: the loop resumes
    real = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    want = held.mask(1, 40)
    for k in range(2):
        out = np.lib.format.open_memmap(tmp_path / f"out-{k}.npy", mode="w+", dtype=np.float32, shape=(40, 8))
        out[:] = np.nan
        held.fill(k, out)
        mask = want if k == 1 else np.ones(40, bool)
        np.testing.assert_array_equal(out[mask], store[k][mask])
        assert np.isnan(out[~mask]).all()
        del out
        np.testing.assert_array_equal(np.load(tmp_path / f"out-{k}.npy")[mask], store[k][mask])
    # chunk 1's two long runs (9 and 20 rows of 32 bytes) went to the kernel, 40 bytes a call;
    # refused at the first, every run was copied by numpy
    assert calls == ([9 * 32 - 40 * i for i in range(8)] + [20 * 32 - 40 * i for i in range(16)]
                     if kernel == "copies" else [9 * 32])
    assert held_runs.file_rows(np.zeros((3, 2))) is None


def test_locate_finds_each_row_a_halos_runs_hold_and_only_those(tmp_path):
    rng = np.random.default_rng(1)
    store = {k: rng.standard_normal((40, 4)).astype(np.float32) for k in range(4)}
    write_halo(tmp_path / "a", store, [(1, 0, 1), (1, 3, 10), (1, 10, 12), (2, 5, 39), (3, 39, 40)])
    runs, x = np.load(tmp_path / "a" / "xruns.npy"), np.load(tmp_path / "a" / "x.npy")
    chunks = np.repeat(np.arange(5), 40)  # every row of chunks 0..4 (0 and 4: none held)
    rows = np.tile(np.arange(40), 5)
    pos = held_runs.locate(runs, chunks, rows)
    for c, r, p in zip(chunks.tolist(), rows.tolist(), pos.tolist()):
        held = any(k == c and f <= r < e for k, f, e, _ in runs.tolist())
        assert (p >= 0) == held, (c, r)
        if held:
            np.testing.assert_array_equal(x[p], store[c][r])


def test_run_rows_beside_a_stable_halo_read_each_row_from_its_part():
    rng = np.random.default_rng(2)
    stable, own = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    pos = np.array([6, 0, 4, 8, 2, 5])  # below 5: the stable halo's rows; the others own's (pos - 5)
    rows = held_runs.RunRows(own, pos, stable)
    whole = np.concatenate([stable, own])
    assert rows.shape == (6, 3) and len(rows) == 6
    for idx in (np.arange(6), np.array([1, 4]), np.array([0, 3]), np.zeros(0, int), slice(1, 5), 3, 1):
        np.testing.assert_array_equal(rows[idx], whole[pos[idx]])
    np.testing.assert_array_equal(held_runs.RunRows(whole, pos)[np.arange(6)], whole[pos])
