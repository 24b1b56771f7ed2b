"""The lean block layers (models/) against the PyG layers they replaced, per architecture: time
and peak memory of one training step (forward and backward) on the whole graph.

Each case runs in its own process, so peaks do not mix: the graph, features and model are built
first, the kernel's peak-RSS counter is reset, then the step runs `--repeats` times. *Step peak* is
the peak RSS during the steps minus the RSS before them: what a step holds on top of the graph.
The previous layers are the test suite's copy (tests/trainer/previous_layers.py, PyG convs on a
MessageGraph, as of commit 939df5c). Results go to docs/results/layers.json and layers.md.

    python bench/layers.py                       # 2^17 nodes, 16 edges per node, width 128
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
ARCHS = ["gcn", "sage", "gin", "gat"]
MIB = 2 ** 20


def _status_kib(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def one_case(arch: str, design: str, nodes: int, per_node: int, width: int, repeats: int) -> dict:
    """Runs in the child process."""
    import torch
    sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "tests" / "trainer")]
    from grappa.config import ModelConfig
    from grappa.data.blocks import full_block
    from grappa.models import GNN
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, nodes, (2, nodes * per_node), generator=gen)
    ei = torch.unique(ei[:, ei[0] != ei[1]], dim=1)
    deg = torch.bincount(ei[1], minlength=nodes)
    x = torch.randn(nodes, width, generator=gen)
    y = torch.randint(0, 16, (nodes,), generator=gen)
    cfg = ModelConfig(arch=arch, layers=2, hidden=width, dropout=0.0, heads=4)
    torch.manual_seed(0)
    if design == "lean":
        model = GNN(cfg, width, 16)
        blocks = [full_block(ei, nodes, deg)] * 2
        step = lambda: model(x, blocks)  # noqa: E731
    else:
        from previous_layers import PrevGNN, build_message_graph
        model = PrevGNN(cfg, width, 16)
        g = build_message_graph(ei, nodes, deg)
        step = lambda: model(x, g)  # noqa: E731
    model.train()

    def run() -> None:
        model.zero_grad()
        torch.nn.functional.cross_entropy(step(), y).backward()
    run()  # warm-up: builds the blocks' cached operators, as the first step of a round does
    from grappa.util.process_memory import release_free_memory
    release_free_memory()  # so the steps cannot reuse the warm-up's freed heap unseen
    before = _status_kib("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    peak = _status_kib("VmHWM:")
    return {"arch": arch, "design": design, "edges": int(ei.shape[1]), "nodes": nodes, "width": width,
            "step_seconds": statistics.median(times), "step_peak_bytes": (peak - before) * 1024,
            "rss_before_bytes": before * 1024, "repeats": repeats, "torch": torch.__version__}


def render(runs: list[dict], command: str) -> Path:
    by = {(r["arch"], r["design"]): r for r in runs}
    e = runs[0]["edges"]
    lines = ["# Lean layers vs the previous PyG layers", "",
             f"Regenerate with `{command}` (writes `layers.json` and this page).", "",
             f"One training step (forward and backward, 2 layers, width {runs[0]['width']}, one thread) on a "
             f"random graph of {runs[0]['nodes']:,} nodes and {e:,} edges, both designs side by side in one "
             f"run, each case in its own process (torch {runs[0]['torch']}, this project's 2-core CI machine "
             "kind). *Step peak*: peak RSS during the steps minus the RSS before "
             "them (graph, features and model already built; the lean blocks' cached operators built by a "
             "warm-up step, whose freed memory is handed back first). *RSS before*: the process at that point "
             "(torch, PyG for the previous layers, the graph in its design's form).", "",
             "| arch | step s (previous) | step s (lean) | speed-up | step peak (previous) | step peak (lean) | "
             "peak ratio | RSS before (previous / lean) |",
             "|---|---|---|---|---|---|---|---|"]
    for arch in ARCHS:
        old, new = by.get((arch, "previous")), by.get((arch, "lean"))
        if not old or not new:
            continue
        lines.append(
            f"| {arch} | {old['step_seconds']:.2f} | {new['step_seconds']:.2f} | "
            f"{old['step_seconds'] / new['step_seconds']:.1f}x | {old['step_peak_bytes'] / MIB:.0f} MiB | "
            f"{new['step_peak_bytes'] / MIB:.0f} MiB | {old['step_peak_bytes'] / max(new['step_peak_bytes'], 1):.1f}x | "
            f"{old['rss_before_bytes'] / MIB:.0f} / {new['rss_before_bytes'] / MIB:.0f} MiB |")
    lines += ["", "A step's peak is mostly per-row activations (every row computes `width` columns in each "
              "layer), which both designs keep; what the lean layers drop is the per-edge message tensors of "
              "the PyG convolutions. GAT keeps one float per edge and head for backward (its attention coefficients; "
              "tests/trainer/test_lean_layers.py checks the saved bytes) and computes the rest in edge chunks "
              "of bounded size; GCN, SAGE and GIN keep nothing per edge beyond the block's cached "
              "transpose (12 B per edge, built once per block).", ""]
    page = RESULTS / "layers.md"
    page.write_text("\n".join(lines))
    return page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1 << 17)
    ap.add_argument("--per-node", type=int, default=16)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    if args.render_only:
        print("wrote", render(json.loads((RESULTS / "layers.json").read_text()), "python bench/layers.py"))
        return
    if args.case:
        arch, design = args.case.split(":")
        print(json.dumps(one_case(arch, design, args.nodes, args.per_node, args.width, args.repeats)))
        return
    runs = []
    for arch in ARCHS:
        for design in ("previous", "lean"):
            out = subprocess.run([sys.executable, __file__, "--case", f"{arch}:{design}", "--nodes", str(args.nodes),
                                  "--per-node", str(args.per_node), "--width", str(args.width),
                                  "--repeats", str(args.repeats)],
                                 capture_output=True, text=True, check=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    (RESULTS / "layers.json").write_text(json.dumps(runs, indent=1))
    print("wrote", render(runs, "python bench/layers.py"))


if __name__ == "__main__":
    main()
