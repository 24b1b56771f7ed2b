"""docs/results/models.md's explanation is computed from the profiles and cells (bench/models.py),
and the trimmed user model it measures computes PyG GraphSAGE's outputs."""
import sys

import torch

from bench_modules import BENCH, load


def prof(ops: dict, fwd: float, bwd: float, given: int, read: int, density: float = 1.0) -> dict:
    total = sum(ops.values())
    return {"steps": 10, "seconds_per_step": {"sample_and_features": 0.01, "forward": fwd, "backward": bwd},
            "step_peak_bytes": 100 * 2 ** 20, "rss_before_bytes": 0, "input_density": density,
            "rows_per_step": {"given": given, "read_next": read, "all": 3 * given},
            "top_ops": [{"op": k, "seconds_per_step": v, "share": v / total} for k, v in ops.items()]}


def cell(ds: str, model: str, seconds: float, pss: float = 2 ** 30) -> dict:
    return {"dataset": ds, "model": model, "epoch_seconds": seconds, "max_worker_peak_pss_bytes": pss,
            "steps_per_epoch": 27, "test_acc": 0.5,
            "setting": {"partitions": 8, "batch_size": 1000, "layers": 3, "hidden": 128, "fanouts": [15, 10, 5],
                        "epochs": 2, "eval_fraction": 0.01, "cpus": 2, "measured": "2026-11-26"}}


def test_the_gap_is_explained_by_the_measured_operators_rows_and_variants(tmp_path):
    m = load("models")
    ds = "rmat-20"
    runs = {f"profile/{ds}/builtin-sage": prof({"aten::mm": 0.012, "aten::random_": 0.001}, 0.018, 0.014, 1000, 1000),
            f"profile/{ds}/pyg-sage": prof({"aten::bernoulli_": 0.034, "aten::mm": 0.028, "aten::index_select": 0.002},
                                           0.062, 0.031, 5000, 1000),
            f"profile/{ds}/pyg-sage-fast": prof({"aten::mm": 0.028}, 0.040, 0.030, 5000, 1000),
            f"cell/{ds}/builtin-sage": cell(ds, "builtin-sage", 5.0),
            f"cell/{ds}/pyg-sage": cell(ds, "pyg-sage", 12.5, 1.2 * 2 ** 30),
            f"cell/{ds}/pyg-sage-fast": cell(ds, "pyg-sage-fast", 7.0),
            f"cell/{ds}/user-sage-trimmed": {"dataset": ds, "model": "user-sage-trimmed", "failed": "boom"}}
    assert m.op_differences(runs[f"profile/{ds}/pyg-sage"], runs[f"profile/{ds}/builtin-sage"]) == \
        [("aten::bernoulli_", 0.034), ("aten::mm", 0.016), ("aten::index_select", 0.002)]
    page = tmp_path / "models.md"
    m.render(runs, page, "make bench-models")
    text = page.read_text()
    assert "epoch time 2.50x (**missed**), worker peak PSS 1.20x (met)" in text
    assert "PyG GraphSAGE with `fastDropout` within 1.5x of the built-in SAGE: epoch time 1.40x (met)" in text
    assert "computing only the rows read next, with `fastDropout` within 1.5x of the built-in SAGE: not measured" in text
    assert "`aten::bernoulli_` +0.034 s, torch's dropout mask" in text
    assert "(5,000 a step over its layers), of which the next layer reads 1,000 (5.0x)" in text
    assert "PyG GraphSAGE with `fastDropout`: epoch 1.40x the built-in, forward and backward 2.19x" in text
    assert "non-zero" not in text  # a dense input says nothing of CSR
    runs[f"profile/{ds}/builtin-sage"]["input_density"] = 0.013
    m.render(runs, page, "make bench-models")
    assert "The input is 1.3% non-zero" in page.read_text()


def test_the_trimmed_user_model_computes_pyg_graphsages_outputs():
    from grappa.config import ModelConfig
    from grappa.data.sampling import NeighborSampler
    from grappa.models.build import build_model
    path = BENCH / "user_models" / "trimmed_sage.py"

    def built(factory, code=None):
        torch.manual_seed(0)
        return build_model(ModelConfig.model_validate({"layers": 3, "hidden": 32, "dropout": 0.0, "custom": {
            "factory": factory, "codePath": code}}), 16, 5, "mini-batch")
    pyg, mine = built("torch_geometric.nn.models:GraphSAGE"), built("trimmed_sage:TrimmedSAGE", str(path))
    mine.net.load_state_dict(pyg.net.state_dict())  # the same SAGEConv parameters, by name
    g = torch.Generator().manual_seed(1)
    ei = torch.randint(0, 300, (2, 3000), generator=g)
    ei = torch.unique(ei[:, ei[0] != ei[1]], dim=1)
    x = torch.randn(300, 16, generator=g)
    sub = NeighborSampler.from_edge_index(ei, 300, [5, 4, 3]).sample(torch.arange(20), g)
    blocks = sub.blocks(torch.bincount(ei[1], minlength=300).index_select(0, sub.n_id))
    pyg.eval(), mine.eval()
    assert torch.allclose(pyg(x[sub.n_id], blocks), mine(x[sub.n_id], blocks), atol=1e-5)
    sys.modules.pop("trimmed_sage", None)
