"""Preparation from tables at scale: `dataset.name: tables` (Parquet, string ids) against the
arrays format on the same graph.

Per size E (edges): a graph of E uniform random edges over n = E / 10 nodes, 16 float32 features
and 4 classes, written twice by a streaming generator (bounded memory): as Parquet tables with
string ids ("u" + 12 digits, the ids a scrambled permutation, so the nodes table is in no id
order) and as the arrays format's .npy files (dense ids). Each is prepared by a real
`python -m grappa prepare` in a subprocess (8 chunks, the default prepare settings) whose
process tree's resident memory is sampled every 0.1 s (bench/scale.py's harness). Results go to
docs/results/scale-tables-runs.json (delete an entry to measure it again) and the "prepare from
tables" section of docs/results/scale.md, rewritten after every run. The tables, the arrays and
the stores are deleted once measured; the free disk is checked first.

    python bench/tables_scale.py --edges 10M,100M
    python bench/tables_scale.py --render-only
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import run_args, run_with_peak  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RUNS = RESULTS / "scale-tables-runs.json"
PAGE = RESULTS / "scale.md"
START, END = "<!-- tables:start -->", "<!-- tables:end -->"
SKIPPED = "not_measured"  # sizes the disk could not hold, with why
FEATURES, CLASSES, CHUNKS, BLOCK = 16, 4, 8, 1 << 22
MARGIN = 8 << 30
TARGET_EDGES, TARGET_RSS, TARGET_RATE = 100_000_000, 1 << 30, 1e6


def parse_count(text: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def need_bytes(e: int) -> int:
    """Disk at the peak: both inputs (~30 B per edge), the id map's runs and dense edges
    (~60 B per edge), the spill and the store (~20 B per edge), features."""
    n = e // 10
    return e * 110 + n * (FEATURES * 4 * 3 + 64)


def write_graph(folder: Path, e: int, seed: int = 0) -> dict:
    """The same graph as Parquet tables (string ids) and as arrays (dense ids), streamed."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from grappa.data.store.npywriter import NpyWriter
    n = e // 10
    rng = np.random.default_rng(seed)
    scramble = rng.permutation(n)  # 8 B per node: the generator's only O(n) array
    tables, arrays = folder / "tables", folder / "arrays"
    tables.mkdir(parents=True)
    arrays.mkdir(parents=True)

    def ids_of(dense: np.ndarray) -> pa.Array:
        return pc.binary_join_element_wise("u", pc.utf8_lpad(pc.cast(pa.array(scramble[dense] * 7 + 3), pa.string()),
                                                              12, "0"), "")
    block = 1 << 20
    x_out = NpyWriter(arrays / "features.npy", np.float32, (FEATURES,), n)
    y_out = NpyWriter(arrays / "labels.npy", np.int64, (), n)
    masks = {s: NpyWriter(arrays / f"{s}.npy", np.bool_, (), n) for s in ("train", "val", "test")}
    schema = pa.schema([("id", pa.string()), ("features", pa.list_(pa.float32(), FEATURES)), ("label", pa.int64()),
                        ("split", pa.string())])
    with pq.ParquetWriter(str(tables / "nodes.parquet"), schema) as w:
        for lo in range(0, n, block):
            hi = min(n, lo + block)
            y = rng.integers(0, CLASSES, hi - lo)
            x = (rng.normal(size=(hi - lo, FEATURES)) + y[:, None]).astype(np.float32)
            split = rng.choice(np.array(["train", "val", "test"]), hi - lo, p=[0.6, 0.2, 0.2])
            w.write_table(pa.table({"id": ids_of(np.arange(lo, hi)),
                                    "features": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), FEATURES),
                                    "label": pa.array(y), "split": pa.array(split)}, schema=schema))
            x_out.append(x)
            y_out.append(y)
            for s, m in masks.items():
                m.append(split == s)
    for wr in (x_out, y_out, *masks.values()):
        wr.close()
    src_out, dst_out = NpyWriter(arrays / "src.npy", np.int64), NpyWriter(arrays / "dst.npy", np.int64)
    eschema = pa.schema([("src", pa.string()), ("dst", pa.string())])
    with pq.ParquetWriter(str(tables / "edges.parquet"), eschema) as w:
        for lo in range(0, e, block):
            m = min(e, lo + block) - lo
            s, d = rng.integers(0, n, m), rng.integers(0, n, m)
            w.write_table(pa.table({"src": ids_of(s), "dst": ids_of(d)}, schema=eschema))
            src_out.append(s)
            dst_out.append(d)
    src_out.close()
    dst_out.close()
    size = {k: sum(p.stat().st_size for p in d.iterdir()) for k, d in (("tables", tables), ("arrays", arrays))}
    return {"num_nodes": n, "input_bytes": size}


def prepare(folder: Path, design: str, work: Path) -> dict:
    store = work / f"store-{design}"
    if design == "tables":
        sets = ["dataset.name=tables", f"dataset.path={folder / 'tables'}",
                "dataset.tables.nodes.files=[nodes.parquet]", "dataset.tables.nodes.label=label",
                "dataset.tables.nodes.split=split", "dataset.tables.edges.files=[edges.parquet]"]
    else:
        sets = ["dataset.name=arrays", f"dataset.path={folder / 'arrays'}",
                "dataset.arrays.src=[src.npy]", "dataset.arrays.dst=[dst.npy]"]
    args = [sys.executable, "-m", "grappa", "prepare", "--partitions", str(CHUNKS), "--store-dir", str(store),
            "--run-dir", str(work / f"run-{design}")]
    for s in sets:
        args += ["--set", s]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}:{os.environ.get('PYTHONPATH', '')}",
           "GRAPPA_LOG_LEVEL": "WARNING"}
    wall, peak, _, err, code = run_with_peak(args, env, interval=0.1)
    if code != 0:
        raise RuntimeError(f"prepare ({design}) failed ({code}):\n{err[-3000:]}")
    manifest = json.loads((store / "manifest.json").read_text())
    disk = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    shutil.rmtree(store)
    return {"wall_seconds": round(wall, 2), "peak_rss_bytes": peak, "store_bytes": disk,
            "stored_edges": manifest["num_edges"], "manifest_prepare": manifest.get("prepare")}


def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def render(runs: dict) -> None:
    lines = [START, "## prepare from tables", "",
             "Generated by `bench/tables_scale.py` from `scale-tables-runs.json`; regenerate with "
             "`make bench-tables`. `grappa prepare` of a graph of E uniform random edges over E / 10 nodes "
             f"({FEATURES} float32 features, {CLASSES} classes, {CHUNKS} chunks) given two ways: **tables**, Parquet "
             "with string ids (`dataset.name: tables`: the id map out of core, then the store's passes) and "
             "**arrays**, the same graph as .npy files with dense ids. Peak RSS is the largest sum of resident "
             "memory over the prepare's process tree, sampled every 0.1 s; edges/s is E over the wall time "
             "(process start included); inputs and store are bytes on disk.", ""]
    if not runs:
        lines += ["Not measured yet: `make bench-tables` measures 10M and 100M edges (500M where the disk allows).", END]
    else:
        big = runs.get(str(TARGET_EDGES), {}).get("tables")
        if big:
            rate = TARGET_EDGES / big["wall_seconds"]
            lines += [f"**Target (100M edges, string ids, ≤ 1 GiB peak RSS, ≥ 1M edges/s): peak RSS "
                      f"{gib(big['peak_rss_bytes'])} ({'met' if big['peak_rss_bytes'] <= TARGET_RSS else 'missed'}), "
                      f"{rate / 1e6:.2f} M edges/s ({'met' if rate >= TARGET_RATE else 'missed'}).**", ""]
        lines += ["| edges | nodes | design | input on disk | peak RSS | wall | edges/s | store on disk | measured |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for key in sorted((k for k in runs if k != SKIPPED), key=int):
            r = runs[key]
            for design in ("tables", "arrays"):
                d = r.get(design)
                if not d:
                    continue
                lines.append(f"| {int(key):,} | {r['num_nodes']:,} | {design} | {gib(r['input_bytes'][design])} | "
                             f"{gib(d['peak_rss_bytes'])} | {d['wall_seconds']:.1f} s | "
                             f"{int(key) / d['wall_seconds'] / 1e6:.2f} M | {gib(d['store_bytes'])} | {r['measured']} |")
        for key, why in sorted(runs.get(SKIPPED, {}).items(), key=lambda kv: int(kv[0])):
            lines += ["", f"{int(key):,} edges: not measured, {why}."]
        lines.append(END)
    text = PAGE.read_text()
    block = "\n".join(lines) + "\n"
    if START in text:
        text = text[:text.index(START)] + block + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    PAGE.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", default="10M,100M")
    args, runs = run_args(ap, RUNS)
    if not args.render_only:
        for e in (parse_count(t) for t in args.edges.split(",")):
            if str(e) in runs:
                continue
            work = Path(args.scratch) / f"grappa-tables-{e}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            free = shutil.disk_usage(work).free
            if free < need_bytes(e) + MARGIN:
                why = (f"needs ~{gib(need_bytes(e))} of disk and {gib(MARGIN)} of margin, "
                       f"{gib(free)} free on {time.strftime('%Y-%m-%d')}")
                print(f"{e:,} edges: {why}: not measured")
                runs.setdefault(SKIPPED, {})[str(e)] = why
                RUNS.write_text(json.dumps(runs, indent=1))
                continue
            runs.get(SKIPPED, {}).pop(str(e), None)
            try:
                record = write_graph(work / "graph", e)
                for design in ("tables", "arrays"):
                    record[design] = prepare(work / "graph", design, work)
                    print(f"{e:,} edges, {design}: {record[design]['wall_seconds']} s, "
                          f"peak {gib(record[design]['peak_rss_bytes'])}", flush=True)
                record["measured"] = time.strftime("%Y-%m-%d")
                runs[str(e)] = record
                RUNS.write_text(json.dumps(runs, indent=1))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    render(runs)


if __name__ == "__main__":
    main()
