"""Dataset loaders: built-ins from a scratch copy of shared/datasets, synthetic generators, files."""
from __future__ import annotations

import pytest
import torch

from grappa.config import DatasetConfig, SyntheticConfig
from grappa.data.datasets import describe, load_dataset
from grappa.data.datasets.random_splits import per_class_split
from grappa.data.errors import DatasetError

# PyG's Planetoid and npz readers import scipy.
needs_scipy = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("scipy") is None, reason="scipy not installed")


def check_clean(data) -> None:
    assert data.x.dtype == torch.float32 and data.y.dtype == torch.int64
    assert data.edge_index.dtype == torch.int64
    src, dst = data.edge_index
    assert not bool((src == dst).any())
    assert torch.unique(src * data.num_nodes + dst).numel() == src.numel()
    for m in ("train_mask", "val_mask", "test_mask"):
        assert data[m].dtype == torch.bool and data[m].numel() == data.num_nodes
    assert not bool((data.train_mask & data.val_mask).any() | (data.val_mask & data.test_mask).any())


def is_symmetric(edge_index: torch.Tensor, n: int) -> bool:
    fwd = torch.sort(edge_index[0] * n + edge_index[1]).values
    bwd = torch.sort(edge_index[1] * n + edge_index[0]).values
    return bool(torch.equal(fwd, bwd))


@needs_scipy
@pytest.mark.parametrize("name,nodes,classes", [("cora", 2708, 7), ("citeseer", 3327, 6)])
def test_planetoid_public_split(data_root, name, nodes, classes):
    data = load_dataset(DatasetConfig(name=name))
    check_clean(data)
    d = describe(data)
    assert (d["nodes"], d["classes"]) == (nodes, classes)
    assert (d["train"], d["val"], d["test"]) == (20 * classes, 500, 1000)
    assert is_symmetric(data.edge_index, data.num_nodes)
    assert (data_root / "planetoid" / ("Cora" if name == "cora" else "CiteSeer") / "processed").is_dir()


@needs_scipy
def test_coauthor_cs_per_class_split(data_root):
    data = load_dataset(DatasetConfig(name="coauthor-cs", split_seed=3))
    check_clean(data)
    assert data.num_nodes == 18333 and data.num_classes == 15
    assert data.edge_index.size(1) == 163788
    per_class = lambda m: torch.bincount(data.y[m], minlength=15)  # noqa: E731
    assert bool((per_class(data.train_mask) == 20).all())
    assert bool((per_class(data.val_mask) == 30).all())
    assert int(data.test_mask.sum()) == 18333 - 15 * 50
    again, other = per_class_split(data.y, 3), per_class_split(data.y, 4)
    assert torch.equal(again[0], data.train_mask) and torch.equal(again[1], data.val_mask)
    assert not torch.equal(other[0], data.train_mask)


def test_missing_raw_without_download(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset\.root") as err:
        load_dataset(DatasetConfig(name="amazon-photo", root=str(tmp_path)))
    msg = str(err.value)
    assert "amazon/Photo/raw" in msg and "GRAPPA_DATA_ROOT" in msg and "download: true" in msg
    assert isinstance(err.value, ValueError)


def test_csbm_shape_symmetry_homophily():
    cfg = DatasetConfig(name="csbm", synthetic=SyntheticConfig(num_nodes=3000, homophily=0.7))
    data = load_dataset(cfg)
    check_clean(data)
    assert data.x.shape == (3000, 64) and data.num_classes == 5
    assert is_symmetric(data.edge_index, data.num_nodes)
    src, dst = data.edge_index
    assert abs((data.y[src] == data.y[dst]).float().mean().item() - 0.7) < 0.03
    assert abs(data.edge_index.size(1) / 3000 - 10) < 0.5
    assert describe(data)["train"] == 600 and describe(data)["test"] == 1800


def test_csbm_deterministic_by_seed():
    a, b, c = (load_dataset(DatasetConfig(name="csbm", synthetic=SyntheticConfig(num_nodes=500, seed=s)))
               for s in (1, 1, 2))
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert torch.equal(a.train_mask, b.train_mask)
    assert not torch.equal(a.x, c.x)


def test_rmat_small():
    cfg = DatasetConfig(name="rmat", synthetic=SyntheticConfig(scale=10, num_features=8))
    data = load_dataset(cfg)
    check_clean(data)
    assert data.num_nodes == 1024 and data.x.shape == (1024, 8)
    assert is_symmetric(data.edge_index, 1024)
    assert 0 < data.edge_index.size(1) <= 2 * (1 << 14)
    counts = torch.bincount(data.y, minlength=5)
    assert int(counts.min()) > 0.05 * 1024  # planted labels use every class
    assert torch.equal(load_dataset(cfg).edge_index, data.edge_index)


def test_file_dataset(tmp_path):
    from torch_geometric.data import Data
    ei = torch.tensor([[0, 1, 1, 2, 2], [1, 0, 0, 2, 0]])  # a duplicate and a self-loop
    torch.save(Data(x=torch.randn(3, 4, dtype=torch.float64), y=torch.tensor([0, 1, 1]), edge_index=ei),
               tmp_path / "g.pt")
    data = load_dataset(DatasetConfig(name="file", path=str(tmp_path / "g.pt")))
    check_clean(data)
    assert data.edge_index.tolist() == [[0, 1, 2], [1, 0, 0]]
    assert data.num_classes == 2 and int(data.train_mask.sum() + data.val_mask.sum() + data.test_mask.sum()) == 3
    torch.save(Data(x=torch.randn(3, 4), edge_index=ei), tmp_path / "noy.pt")
    with pytest.raises(DatasetError, match="'y'"):
        load_dataset(DatasetConfig(name="file", path=str(tmp_path / "noy.pt")))
    with pytest.raises(DatasetError, match="dataset.path"):
        load_dataset(DatasetConfig(name="file", path=str(tmp_path / "absent.pt")))
