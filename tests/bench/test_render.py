"""The benchmark pages compute their ratios and medians from the JSON runs they are given."""

from bench_modules import load


def cell(seconds: float, nbytes: int, params: int = 100) -> dict:
    return {"epoch_seconds": seconds, "bytes_per_worker_epoch": nbytes, "parameters": params,
            "reducer_share": 0.01, "peak_rss_bytes": 2**30}


def test_grid_row_medians_floor_and_ratios(tmp_path):
    render = load("render_network")
    floor = 8 * 100 + 16
    runs = {f"rmat|8|3|grappa|1gbit|{r}": cell(s, floor) for r, s in enumerate([2.0, 9.0, 3.0])}
    runs |= {f"rmat|8|3|full|1gbit|{r}": cell(s, 200 * floor) for r, s in enumerate([12.0, 6.0, 15.0])}
    runs["rmat|1|3|single|none|0"] = {"epoch_seconds": 1.5}
    runs["rmat|4|3|grappa|1gbit|0"] = {"error": "out of memory"}
    page = render.render(runs, tmp_path).read_text()
    row = next(line for line in page.splitlines() if line.startswith("| 8 | 3 | 1gbit"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    # P, layers, link, runs, Grappa bytes, ÷ floor, full bytes, full ÷ Grappa, s Grappa, s full, single, ratio, share
    assert cols[3] == "3 / 3"
    assert cols[5] == "1.00x" and cols[7] == "200x"
    assert cols[8] == "3.00" and cols[9] == "12.00" and cols[10] == "1.50" and cols[11] == "4.0x"
    assert "`rmat|4|3|grappa|1gbit|0`: out of memory" in page
    assert (tmp_path / "bench-bytes-rmat.png").exists()


def test_strategy_table_bytes_ratio_and_time_per_preset(tmp_path):
    render = load("render_strategies")

    def run(acc: float, nbytes: int, seconds: float) -> dict:
        return {"test_acc": acc, "total_bytes": nbytes, "cum_seconds": [seconds / 2, seconds]}
    runs = {"g|4|2|full|1gbit": run(0.70, 4_000_000_000, 30.0),
            "g|4|2|full|100mbit": run(0.70, 4_000_000_000, 240.0),
            "g|4|2|grappa|1gbit": run(0.69, 1_000_000_000, 10.0),
            "g|1|2|single|none": {"test_acc": 0.71, "seconds": 2.0}}
    page = render.render(runs, tmp_path).read_text()
    lines = page.splitlines()
    assert "| strategy | P | test acc % | training bytes | bytes vs full | training s, 1gbit | training s, 100mbit |" in lines
    assert "| full | 4 | 70.0 | 4,000.0 MB | 1x | 30.0 | 240.0 |" in lines
    assert "| grappa | 4 | 69.0 | 1,000.0 MB | 0.25x | 10.0 | - |" in lines
    assert any(line.startswith("| single process | 1 | 71.0 |") for line in lines)
    assert (tmp_path / "strategies-accuracy-bytes.png").exists()


def test_accuracy_target_judges_complete_settings_only(tmp_path):
    render = load("render_accuracy")
    accs = {"single": [0.80, 0.82, 0.81], "Grappa": [0.78, 0.79, 0.80], "UW": [0.81], "FP": []}
    runs = {f"g|gcn|2|{m}|{s}": {"test_acc": a, "best_epoch": 5 + 10 * s}
            for m, xs in accs.items() for s, a in enumerate(xs)}
    runs |= {f"g|sage|2|{m}|{s}": {"test_acc": 0.7, "best_epoch": 50} for m in ("single", "Grappa") for s in range(3)}
    runs["g|gcn|3|single|0"] = {"test_acc": 0.9, "best_epoch": 3}
    page = render.render(runs, {}, epochs=100, seeds=3, datasets=["g"], out=tmp_path).read_text()
    lines = page.splitlines()
    assert "Grappa within 1 point of single-process (mean over 3 seeds): **1 of 2** fully measured settings." in page
    assert "- Miss: g GCN-2, -2.0 points (single 81.0 ± 1.0, Grappa 79.0 ± 1.0, UW 81.0)." in lines
    assert "- Not judged yet (seeds missing): g GCN-3, g SAGE-3." in lines
    assert "| g | GCN | 2 | 81.0 ± 1.0 | 79.0 ± 1.0 | 81.0 | - | -2.0 | 5 / 15 / 25 |" in lines
    assert "| g | GCN | 3 | 90.0 | - | - | - | - | - |" in lines
    # epochs 5 and 15 / 25 and 50, 50, 50 against rounds every 10
    assert "In 1 of 6 Grappa runs the best-validation epoch comes before the first repartition round" in page
    assert "Grid status: 14 of 48 (dataset, model, depth, method, seed) runs measured; cells with" in page
    assert (tmp_path / "accuracy.png").exists()


def test_accuracy_contrasts_use_settings_complete_for_both_methods(tmp_path):
    render = load("render_accuracy")
    per_setting = {  # (arch, layers): Grappa, UW, FP per seed; UW short of seeds in SAGE-3
        ("gcn", 2): ([0.80] * 3, [0.79] * 3, [0.70] * 3),
        ("gcn", 3): ([0.80] * 3, [0.82] * 3, [0.79] * 3),
        ("sage", 2): ([0.80] * 3, [0.78] * 3, [0.81] * 3),
        ("sage", 3): ([0.80] * 3, [0.50], [0.80] * 3)}
    runs = {f"g|{arch}|{layers}|{m}|{s}": {"test_acc": a, "best_epoch": 20}
            for (arch, layers), accs in per_setting.items()
            for m, xs in zip(("Grappa", "UW", "FP"), accs) for s, a in enumerate(xs)}
    page = render.render(runs, {}, epochs=100, seeds=3, datasets=["g"], out=tmp_path).read_text()
    lines = page.splitlines()
    uw = next(line for line in lines if line.startswith("| UW |"))
    fp = next(line for line in lines if line.startswith("| FP |"))
    # UW: +1, -2, +2 over 3 complete settings; FP: +10, +1, -1, 0 over 4
    assert uw.endswith("| 3 | 2 | +0.3 | +1.0 | -2.0 to +2.0 |")
    assert fp.endswith("| 4 | 2 | +2.5 | +0.5 | -1.0 to +10.0 |")
    assert "Grid status: 34 of 48 (dataset, model, depth, method, seed) runs measured; cells" in page


def train_run(scale: int, mode: str, pss: float, rss: float, edges: int, design: str = "streaming") -> dict:
    gib = 2 ** 30
    return {"design": design, "mode": mode, "arch": "sage", "scale": scale, "partitions": 2,
            "worker_peak_pss_bytes": [int(pss * gib)] * 2, "worker_peak_rss_bytes": [int(rss * gib)] * 2,
            "worker_local_edges": [edges] * 2, "aggregator_peak_pss_bytes": gib // 4,
            "tree_peak_rss_bytes": 3 * gib, "train_seconds": [10.0], "steps_per_epoch": 100, "test_acc": 0.5}


def test_training_section_bytes_per_edge_above_the_floor_and_verdicts(tmp_path):
    render = load("render_train_scale")
    runs = {"streaming/mini-batch/sage/rmat-10": train_run(10, "mini-batch", 0.25, 0.5, 1000),
            "streaming/mini-batch/sage/rmat-24": train_run(24, "mini-batch", 0.25 + 2.0, 0.5 + 4.0, 2 ** 26),
            "streaming/full-graph/sage/rmat-10": train_run(10, "full-graph", 0.25, 0.5, 1000),
            "streaming/full-graph/sage/rmat-19": train_run(19, "full-graph", 1.25, 1.5, 2 ** 22)}
    page = "\n".join(render.training_section(runs, tmp_path))
    # 2 GiB above the floor over 2^26 edges = 32 B (PSS); 4 GiB = 64 B (RSS); 100 ms per step.
    row = next(line for line in page.splitlines() if "| mini-batch | sage | 24 |" in line)
    assert "| 32 B / 64 B |" in row and "100 ms / step (100 steps)" in row
    assert "RMAT-24 at P = 8 mini-batch: met" in page
    assert "mini-batch: ≤ 128 B per local edge above a floor ≤ 0.5 GiB: met on PSS" in page
    # full-graph: 1 GiB over 2^22 edges = 256 B; 1.5 GiB peak RSS > 1 GiB
    assert "full-graph: ≤ 128 B per local edge above a floor ≤ 0.5 GiB: missed on PSS" in page
    assert "RMAT-19 full-graph at P = 8 within 1 GiB per worker: missed" in page
    assert (tmp_path / "scale-train.png").exists()


def test_launcher_and_cgroup_columns_and_not_measured_before_them(tmp_path):
    render = load("render_train_scale")
    gib = 2 ** 30
    new = {**train_run(19, "mini-batch", 1.0, 1.5, 2 ** 20), "launcher_peak_rss_bytes": gib // 2,
           "launcher_cgroup_peak_bytes": 6 * gib, "launcher_cgroup_working_set_peak_bytes": 5 * gib}
    runs = {"streaming/mini-batch/sage/rmat-10": train_run(10, "mini-batch", 0.25, 0.5, 1000),
            "streaming/mini-batch/sage/rmat-19": new}
    page = "\n".join(render.table(runs))
    header = page.splitlines()[0].split(" | ")
    old, measured = (line.split(" | ") for line in page.splitlines()[2:4])
    at = header.index("launcher peak RSS")
    assert len(old) == len(measured) == len(header)
    assert old[at:at + 2] == ["not measured", "not measured"]
    assert measured[at:at + 2] == ["0.50 GiB", "6.00 GiB / 5.00 GiB"]


def test_inference_table_has_the_coordinator_and_cgroup_columns(tmp_path):
    bench = load("inference")
    gib = 2 ** 30
    run = {"scale": 12, "partitions": 2, "num_nodes": 4096, "wall_seconds": 9.0, "nodes_per_second": 455,
           "worker_peak_pss_bytes": [gib // 4] * 2, "worker_peak_anon_bytes": [gib // 8] * 2,
           "worker_peak_rss_bytes": [gib // 2] * 2, "bytes_read": gib, "bytes_written": gib, "output_bytes": gib,
           "measured": "2026-11-28", "cpus": 2}
    runs = {"rmat-12/p2": run, "rmat-13/p2": {**run, "scale": 13, "coordinator_peak_rss_bytes": gib // 4,
                                              "coordinator_cgroup_peak_bytes": 3 * gib,
                                              "coordinator_cgroup_working_set_peak_bytes": 2 * gib}}
    lines = [line for line in bench.render(runs).splitlines() if line.startswith("| ")]  # no |---|
    header = lines[0].split(" | ")
    at = header.index("coordinator RSS")
    old, measured = (line.split(" | ") for line in lines[1:3])
    assert len(old) == len(measured) == len(header)
    assert old[at:at + 2] == ["not measured", "not measured"]
    assert measured[at:at + 2] == ["0.25 GiB", "3.00 / 2.00 GiB"]
