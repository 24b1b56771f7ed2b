"""bench/layers.py measures both designs on the same graph and renders their ratios."""
from bench_modules import load


def test_one_case_per_design_on_the_same_graph(tmp_path, monkeypatch):
    layers = load("layers")
    runs = [layers.one_case(arch, design, 300, 4, 16, 1) for arch in ("sage", "gat")
            for design in ("previous", "lean")]
    assert len({r["edges"] for r in runs}) == 1  # one seeded graph for every case
    assert all(isinstance(r["step_seconds"], float) and r["step_peak_bytes"] >= 0 for r in runs)
    monkeypatch.setattr(layers, "RESULTS", tmp_path)
    page = layers.render(runs, "python bench/layers.py").read_text()
    assert "| sage |" in page and "| gat |" in page and "| gcn |" not in page
