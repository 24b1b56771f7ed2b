"""A user's own files through `grappa prepare` / `single` (issue 27, items 3, 4 and 5): a store
made from files that changed since is refused (or prepared anew on request), folders that cannot
be written and labels with gaps are one line each, with the exit code of docs/troubleshooting.md."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from grappa.app.cli import main


def write_graph(folder: Path, n: int = 200, edges: int = 800, features: int = 8, labels=None) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "edges.npy", rng.integers(0, n, (2, edges)).astype(np.int64))
    np.save(folder / "features.npy", rng.standard_normal((n, features)).astype(np.float32))
    np.save(folder / "labels.npy", labels if labels is not None else np.arange(n) % 4)
    order = rng.permutation(n)
    for name, part in zip(("train", "val", "test"), np.array_split(order, 3)):
        np.save(folder / f"{name}.npy", np.sort(part))


def prepare(graph: Path, store: Path, *extra: str) -> int:
    return main(["prepare", "--dataset", "arrays", "--set", f"dataset.path={graph}", "--partitions", "2",
                 "--store-dir", str(store), *extra])


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("grappa: error:")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.fixture
def prepared(tmp_path, capsys):
    graph, store = tmp_path / "graph", tmp_path / "store"
    write_graph(graph)
    assert prepare(graph, store) == 0
    capsys.readouterr()
    return graph, store, (store / "manifest.json").read_bytes()


def test_fewer_edges_in_place_are_refused_then_reprepared_on_request(prepared, capsys):
    graph, store, manifest = prepared
    before = json.loads(manifest)["num_edges"]
    write_graph(graph, edges=300)  # the user's edit, in place
    assert prepare(graph, store) == 3
    line = one_error_line(capsys.readouterr().err)
    assert f"{graph / 'edges.npy'} changed size" in line and "--reprepare" in line
    assert (store / "manifest.json").read_bytes() == manifest  # the old store is untouched
    assert prepare(graph, store, "--reprepare") == 0
    out = capsys.readouterr().out
    after = json.loads((store / "manifest.json").read_text())
    assert after["num_edges"] < before and f"{after['num_edges']:,} edges" in out
    assert not [p for p in store.parent.iterdir() if p.name.startswith(".store.")]  # no leftovers
    assert prepare(graph, store) == 0  # and it is current now


def test_wider_features_are_refused_naming_the_file(prepared, capsys):
    graph, store, _ = prepared
    np.save(graph / "features.npy", np.ones((200, 12), dtype=np.float32))
    assert prepare(graph, store) == 3
    assert f"{graph / 'features.npy'} changed size" in one_error_line(capsys.readouterr().err)
    assert prepare(graph, store, "--reprepare") == 0
    assert json.loads((store / "manifest.json").read_text())["num_features"] == 12


def test_same_size_edit_is_refused_and_a_touch_is_not(prepared, capsys):
    graph, store, _ = prepared
    labels = graph / "labels.npy"
    os.utime(labels)  # a newer time, the same bytes (a copy, a checkout): still the same data
    assert prepare(graph, store) == 0
    y = np.load(labels)
    y[:10] = (y[:10] + 1) % 4
    np.save(labels, y)
    assert prepare(graph, store) == 3
    assert f"{labels} changed content" in one_error_line(capsys.readouterr().err)


def test_a_failed_reprepare_keeps_the_old_store(prepared, capsys):
    graph, store, manifest = prepared
    e = np.load(graph / "edges.npy")
    e[0, 5] = 10_000  # out of range: the new prepare stops
    np.save(graph / "edges.npy", e)
    assert prepare(graph, store, "--reprepare") == 3
    assert "edge 5: source id 10000" in one_error_line(capsys.readouterr().err)
    assert (store / "manifest.json").read_bytes() == manifest


def test_large_files_are_hashed_by_samples_and_judged_by_time(tmp_path):
    from grappa.data.store.fingerprint import FULL_HASH_BYTES, changes, fingerprint
    f = tmp_path / "big.npy"
    f.write_bytes(b"\0" * (FULL_HASH_BYTES + 4096))
    first = fingerprint(tmp_path, [f])
    assert first["big.npy"]["sampled"]
    with open(f, "r+b") as fh:  # a byte between the samples, in place
        fh.seek(FULL_HASH_BYTES // 40)
        fh.write(b"\1")
    os.utime(f, ns=(first["big.npy"]["mtime_ns"] + 10**9,) * 2)
    assert changes(first, fingerprint(tmp_path, [f]), tmp_path) == [f"{f} was modified (newer modification time)"]


def test_label_gaps_are_named_with_num_classes_as_the_fix(tmp_path, capsys):
    labels = np.arange(200) % 5
    labels[17] = 9  # a stray label among classes 0-4
    write_graph(tmp_path / "g", labels=labels)
    assert prepare(tmp_path / "g", tmp_path / "store") == 3
    line = one_error_line(capsys.readouterr().err)
    assert "class ids 0-4, 9 but never 5-8" in line and "10 classes" in line
    assert "dataset.arrays.numClasses: 10" in line
    assert not (tmp_path / "store" / "manifest.json").exists()
    # The single-process baseline reads the same files the same way.
    assert main(["single", "--dataset", "arrays", "--set", f"dataset.path={tmp_path / 'g'}",
                 "--run-dir", str(tmp_path / "single")]) == 3
    assert "class ids 0-4, 9" in one_error_line(capsys.readouterr().err)
    # Said so explicitly, ten classes it is.
    assert prepare(tmp_path / "g", tmp_path / "store", "--set", "dataset.arrays.numClasses=10") == 0
    assert json.loads((tmp_path / "store" / "manifest.json").read_text())["num_classes"] == 10


@pytest.mark.parametrize("command,flag,field", [("prepare", "--store-dir", "storeDir"),
                                                ("train", "--run-dir", "runDir"),
                                                ("train", "--store-dir", "storeDir"),
                                                ("single", "--run-dir", "runDir"),
                                                ("aggregator", "--run-dir", "runDir")])
def test_a_folder_that_cannot_be_written_is_one_line_and_exit_3(tmp_path, capsys, command, flag, field):
    """A path under a file (the same OSError as a read-only mount: tests run as root, which
    ignores permission bits) exits 3, which the operator turns into CannotRun."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "sub"
    argv = [command, "--dataset", "csbm", "--set", "dataset.synthetic.numNodes=300", "--partitions", "2",
            "--run-dir", str(tmp_path / "run"), flag, str(bad)]
    assert main(argv) == 3
    line = one_error_line(capsys.readouterr().err)
    assert f"{field} {bad}: cannot write there ({blocker} is a file)" in line and flag in line


@pytest.mark.parametrize("command", ["train", "prepare"])
def test_refused_data_leaves_no_empty_folders(tmp_path, capsys, command):
    """A dataset refused before anything is written leaves neither an empty store folder nor an
    empty run directory behind (issue 35); a folder that existed before is kept."""
    graph = tmp_path / "graph"
    write_graph(graph)
    (graph / "test.npy").unlink()
    argv = [command, "--dataset", "arrays", "--set", f"dataset.path={graph}", "--partitions", "2",
            "--run-dir", str(tmp_path / "runs" / "r")]
    assert main(argv) == 3
    assert "test.npy does not exist" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists(), sorted(p.name for p in tmp_path.rglob("*"))
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main([*argv[:-1], str(kept)]) == 3
    assert kept.is_dir() and not list(kept.iterdir())
