"""Streaming prepare: every source gives the store an in-memory reference gives; memory stays
flat as the input grows; a failed prepare leaves nothing behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from fake_ogb import make_arrays, write_dataset
from grappa.config import DatasetConfig, SyntheticConfig
from grappa.data.datasets import load_dataset
from grappa.data.errors import ChunkStoreError
from grappa.data.sources import open_source
from grappa.data.store import is_prepared, prepare
from store_reference import assert_same_store, read_store, reference_store, split_codes

REPO = Path(__file__).resolve().parents[2]
K, SEED = 4, 5


def write_arrays(folder: Path, n: int = 500, e: int = 4000, f: int = 6, seed: int = 1,
                 parts: int = 2, masks: bool = False, classes: int = 4) -> dict:
    """The arrays format with edges in `parts` int32 part files, some duplicates and self-loops."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ei = rng.integers(0, n, (2, e))
    ei[:, :3] = [[0, 1, 2], [0, 1, 2]]
    ei[:, 3:6] = ei[:, 6:9]
    for i, cols in enumerate(np.array_split(np.arange(e), parts)):
        np.save(folder / f"edges-{i}.npy", ei[:, cols].astype(np.int32))
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, classes, n)
    y[rng.random(n) < 0.1] = -1
    labelled = rng.permutation(np.flatnonzero(y >= 0))
    train, val, test = np.sort(labelled[:100]), np.sort(labelled[100:150]), np.sort(labelled[150:])
    np.save(folder / "features.npy", x)
    np.save(folder / "labels.npy", y)
    for name, ids in (("train", train), ("val", val), ("test", test)):
        if masks:
            m = np.zeros(n, bool)
            m[ids] = True
            np.save(folder / f"{name}.npy", m)
        else:
            np.save(folder / f"{name}.npy", ids)
    return {"edge_index": ei, "x": x, "y": y, "split": split_codes(n, train, val, test)}


def arrays_config(folder: Path, **kw) -> DatasetConfig:
    return DatasetConfig.model_validate({"name": "arrays", "path": str(folder),
                                         "arrays": {"edges": ["edges-*.npy"]}, **kw})


@pytest.mark.parametrize("workers,block", [(1, 1 << 20), (2, 1024)])
def test_arrays_format_matches_the_in_memory_reference(tmp_path, workers, block):
    want = write_arrays(tmp_path / "g")
    source = open_source(arrays_config(tmp_path / "g", addInverseEdges=True))
    manifest = prepare(source, tmp_path / "store", K, SEED, {"t": 1}, block_edges=block,
                       workers=workers, progress=False)
    ref = reference_store(want["edge_index"], want["x"], want["y"], want["split"], K, SEED, add_inverse=True)
    assert_same_store(read_store(tmp_path / "store"), ref)
    assert manifest["prepare"]["workers"] == workers and manifest["num_classes"] == 4
    assert sum(c["train"] for c in manifest["chunks"]) == 100
    assert not any(p.name.startswith(".staging") for p in (tmp_path / "store").iterdir())


def test_arrays_src_dst_pairs_masks_and_float16(tmp_path):
    want = write_arrays(tmp_path / "g", masks=True)
    for i, cols in enumerate(np.array_split(np.arange(want["edge_index"].shape[1]), 3)):
        np.save(tmp_path / "g" / f"s{i}.npy", want["edge_index"][0, cols])
        np.save(tmp_path / "g" / f"d{i}.npy", want["edge_index"][1, cols].astype(np.int32))
    cfg = DatasetConfig.model_validate({
        "name": "arrays", "path": str(tmp_path / "g"), "featureDtype": "float16",
        "arrays": {"src": ["s0.npy", "s1.npy", "s2.npy"], "dst": ["d0.npy", "d1.npy", "d2.npy"]}})
    prepare(open_source(cfg), tmp_path / "store", K, SEED, {"t": 2}, feature_dtype="float16", progress=False)
    ref = reference_store(want["edge_index"], want["x"], want["y"], want["split"], K, SEED,
                          feature_dtype=np.float16)
    assert_same_store(read_store(tmp_path / "store"), ref)


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
def test_fake_ogb_layouts_match_the_in_memory_reference(tmp_path, name):
    arrays = make_arrays(name)
    write_dataset(tmp_path / "data", name, arrays)
    cfg = DatasetConfig(name=name, root=str(tmp_path / "data"))
    source = open_source(cfg)
    prepare(source, tmp_path / "store", K, SEED, {"t": 3}, block_edges=2048, workers=2, progress=False)
    n = arrays["x"].shape[0]
    y = np.where(np.isnan(arrays["y"]), -1, arrays["y"]).astype(np.int64)
    split = split_codes(n, arrays["train"], arrays["valid"], arrays["test"])
    inverse = name == "ogbn-products"  # OGB's own semantics: only products adds inverse edges
    ref = reference_store(arrays["edge_index"], arrays["x"], y, split, K, SEED, add_inverse=inverse)
    assert_same_store(read_store(tmp_path / "store"), ref)
    data = load_dataset(cfg)  # the in-memory path for `grappa single` reads the same graph
    assert data.num_nodes == n and data.edge_index.size(1) == ref["num_edges"]
    assert data.num_classes == arrays["num_classes"] and int(data.train_mask.sum()) == arrays["train"].size
    if name == "ogbn-papers100M":
        assert int((data.y == -1).sum()) == int(np.isnan(arrays["y"]).sum()) > 0


@pytest.mark.parametrize("workers,block", [(1, 1 << 20), (2, 2048)])
def test_streaming_rmat_equals_the_in_memory_generator(tmp_path, workers, block):
    cfg = DatasetConfig(name="rmat", synthetic=SyntheticConfig(scale=11, num_features=8, num_classes=5))
    data = load_dataset(cfg)
    prepare(open_source(cfg), tmp_path / "store", K, SEED, {"t": 4}, block_edges=block,
            workers=workers, progress=False)
    codes = np.zeros(data.num_nodes, np.uint8)
    for code, m in ((1, data.train_mask), (2, data.val_mask), (3, data.test_mask)):
        codes[m.numpy()] = code
    ref = reference_store(data.edge_index.numpy(), data.x.numpy(), data.y.numpy(), codes, K, SEED)
    assert_same_store(read_store(tmp_path / "store"), ref)
    counts = torch.bincount(data.y, minlength=5)
    assert int(counts.min()) > 0.05 * data.num_nodes  # planted labels use every class


def test_skewed_ranges_are_split_again_with_the_same_result(tmp_path, monkeypatch):
    """A range far over the block (as a skewed in-degree makes one) is re-spilled into narrower
    ranges, recursively; the store is the same."""
    from grappa.data.sources.in_memory import from_data
    from grappa.data.store import finalise, writer

    data = load_dataset(DatasetConfig(name="csbm", synthetic=SyntheticConfig(num_nodes=1500)))
    codes = np.zeros(1500, np.uint8)
    for code, m in ((1, data.train_mask), (2, data.val_mask), (3, data.test_mask)):
        codes[m.numpy()] = code
    ref = reference_store(data.edge_index.numpy(), data.x.numpy(), data.y.numpy(), codes, K, SEED)
    splits = []
    real = finalise._finalise_split

    def counted(task):
        splits.append((task.lo, task.hi))
        return real(task)
    monkeypatch.setattr(finalise, "_finalise_split", counted)
    monkeypatch.setattr(writer, "plan_range_bits", lambda *a: 11)  # one range: the whole graph
    prepare(from_data("csbm", data), tmp_path / "store", K, SEED, {"t": 5}, block_edges=1024, progress=False)
    assert_same_store(read_store(tmp_path / "store"), ref)
    assert splits[0] == (0, 1500) and len(splits) > 1  # ~15k edges: split, and split again


PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    from grappa.config import DatasetConfig
    from grappa.data.sources import open_source
    from grappa.data.store import prepare
    cfg = DatasetConfig.model_validate({"name": "arrays", "path": sys.argv[1]})
    m = prepare(open_source(cfg), sys.argv[2], 4, 0, {"t": 6}, block_edges=1 << 16, workers=1,
                progress=False)
    assert "torch" not in sys.modules, "prepare must not import torch"
    # VmHWM, not ru_maxrss: ru_maxrss carries the parent's peak across exec.
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print(json.dumps({"peak_kib": hwm, "edges": m["num_edges"]}))
""")


def _write_scaled(folder: Path, n: int, e: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    np.save(folder / "edges.npy", rng.integers(0, n, (2, e), dtype=np.int32))
    np.save(folder / "features.npy", rng.standard_normal((n, 4), dtype=np.float32))
    np.save(folder / "labels.npy", rng.integers(0, 3, n, dtype=np.int64))
    split = rng.integers(0, 3, n)
    for i, name in enumerate(("train", "val", "test")):
        np.save(folder / f"{name}.npy", split == i)  # masks: read block by block like the rest


def _peak(folder: Path, out: Path) -> dict:
    env = {"PYTHONPATH": f"{REPO / 'trainer'}:{REPO / 'operator'}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(folder), str(out)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_peak_memory_is_flat_when_the_input_grows_16x(tmp_path):
    small_n, small_e = 1 << 16, 1 << 20
    _write_scaled(tmp_path / "small", small_n, small_e)
    _write_scaled(tmp_path / "big", 16 * small_n, 16 * small_e)  # 128 MiB of edges vs 8 MiB
    small = _peak(tmp_path / "small", tmp_path / "s-store")
    big = _peak(tmp_path / "big", tmp_path / "b-store")
    assert big["edges"] > 15 * small["edges"]
    # Loading the input whole would add >= 128 MiB (edges) + 16 MiB (features); the same block
    # size must keep the peak within a few MiB of the small run's.
    assert big["peak_kib"] - small["peak_kib"] < 24 * 1024, (small, big)


def test_failed_prepare_leaves_nothing_and_a_rerun_completes(tmp_path, monkeypatch):
    write_arrays(tmp_path / "g")
    cfg = arrays_config(tmp_path / "g")
    out = tmp_path / "store"
    from grappa.data.store import writer

    def boom(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(writer, "_manifest", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare(open_source(cfg), out, K, 1, {"t": 7}, progress=False)
    assert list(out.iterdir()) == []  # no chunk folder, no staging, no manifest
    monkeypatch.undo()
    prepare(open_source(cfg), out, K, 1, {"t": 7}, progress=False)
    assert is_prepared(out, {"t": 7}, K, 1)


def test_bad_edge_in_a_late_block_leaves_an_existing_store_untouched(tmp_path):
    want = write_arrays(tmp_path / "g", n=500, e=4000, parts=1)
    cfg = arrays_config(tmp_path / "g")
    prepare(open_source(cfg), tmp_path / "store", K, 1, {"t": 8}, progress=False)
    before = {p: p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()}
    ei = want["edge_index"].copy()
    ei[1, 3999] = 500
    np.save(tmp_path / "g" / "edges-0.npy", ei.astype(np.int32))
    with pytest.raises(ChunkStoreError, match="different job"):  # another seed: refused, kept
        prepare(open_source(cfg), tmp_path / "store", K, 2, {"t": 8}, progress=False)
    from grappa.data.errors import DatasetError
    with pytest.raises(DatasetError, match=r"edges-0.npy edge 3999: destination id 500 is outside \[0, 500\)"):
        prepare(open_source(cfg), tmp_path / "other", K, 1, {"t": 8}, block_edges=1024, progress=False)
    assert not (tmp_path / "other" / "manifest.json").exists()
    assert not [p for p in (tmp_path / "other").iterdir()]
    assert {p: p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()} == before


def live_descendants() -> dict[int, str]:
    """pid -> command line of this process's descendants that are not zombies (from /proc)."""
    out, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            if pid != os.getpid() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out[pid] = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
        except OSError:
            continue
    return out


@pytest.mark.parametrize("part,error", [("bad", r"bad\.npy edge 40: destination id 99 is outside \[0, 20\)"),
                                        ("dying", r"worker process was killed \(SIGKILL: out of memory\?\) .*prepare\.blockEdges")])
def test_a_failing_worker_process_fails_the_prepare_cleanly(tmp_path, part, error):
    import dying_source
    from grappa.data.errors import DatasetError

    before = set(live_descendants())
    src = dying_source.source(dying_source.BadEdges() if part == "bad" else dying_source.DyingEdges())
    with pytest.raises((DatasetError, ChunkStoreError), match=error):
        prepare(src, tmp_path / "store", 2, 0, {"t": 9}, workers=2, progress=False)
    assert not list((tmp_path / "store").iterdir())
    # spawned pool workers run spawn_main (the resource tracker, by design, lives on; other
    # children, e.g. the e2e session's kubectl, are not ours)
    workers = {pid: cmd for pid, cmd in live_descendants().items()
               if pid not in before and "spawn_main" in cmd}
    assert not workers, f"worker processes outlived the failed prepare: {workers}"


@pytest.mark.parametrize("entry", ["prepare", "grappa.train"])
def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path, entry):
    """Prepare's spawned workers import the script that called it: unguarded, each would run its
    call again (a prepare clearing the caller's staging folder, a training claiming its run
    folder); they stop at once and the caller names the fix."""
    write_arrays(tmp_path / "g")
    dataset = {"name": "arrays", "path": str(tmp_path / "g"), "arrays": {"edges": ["edges-*.npy"]}}
    store = tmp_path / "store"
    script = tmp_path / "unguarded.py"
    if entry == "prepare":
        script.write_text(
            "from grappa.config import DatasetConfig\n"
            "from grappa.data.sources import open_source\n"
            "from grappa.data.store.writer import prepare\n"
            f"prepare(open_source(DatasetConfig.model_validate({dataset!r})), {str(store)!r}, 4, 0, "
            "{'t': 1}, workers=2, block_edges=1024, progress=False)\n")
    else:
        config = {"dataset": dataset, "partitions": 2, "storeDir": str(store), "runDir": str(tmp_path / "run"),
                  "prepare": {"workers": 2, "blockEdges": 1024}, "training": {"epochs": 1}}
        script.write_text(f"import grappa\ngrappa.train({config!r}, progress=False)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "exited with code 1" in last and 'if __name__ == "__main__":' in last and "prepare.workers: 1" in last
    assert f"{entry} was called while a worker process imported the script" in done.stderr  # each worker's
    assert not store.exists() or not list(store.iterdir())
