"""`load_dataset`: one entry point from DatasetConfig to a clean, split PyG Data."""
from __future__ import annotations

from torch_geometric.data import Data

from grappa.config import BUILTIN_DATASETS, OGB_DATASETS, DatasetConfig
from grappa.data.datasets.builtin import load_builtin
from grappa.data.datasets.csbm import csbm
from grappa.data.datasets.file import load_file
from grappa.data.datasets.graph import clean_edges
from grappa.data.datasets.random_splits import random_split
from grappa.data.datasets.rmat_graph import rmat
from grappa.data.errors import DatasetError

MASKS = ("train_mask", "val_mask", "test_mask")


def load_dataset(cfg: DatasetConfig) -> Data:
    """Data with x float32 [n, f], y int64 [n], edge_index int64 [2, E] (no self-loops, no
    duplicates; undirected graphs hold both directions), bool train/val/test masks, num_classes."""
    if cfg.name in BUILTIN_DATASETS:
        data = load_builtin(cfg)
    elif cfg.name == "csbm":
        data = csbm(cfg.synthetic)
    elif cfg.name == "rmat":
        data = rmat(cfg.synthetic, cfg.split_seed)
    elif cfg.name == "file":
        data = load_file(cfg)
    elif cfg.name in OGB_DATASETS + ("arrays",):
        from grappa.data.datasets.whole import read_whole
        from grappa.data.sources import open_source
        data = read_whole(open_source(cfg))
    else:  # unreachable through the validated config
        raise DatasetError(f"dataset.name: unknown dataset '{cfg.name}'")
    clean = cfg.name in ("csbm", "rmat", "arrays") + OGB_DATASETS  # made clean by their readers
    return _finalise(data, cfg.split_seed, clean=clean)


def _finalise(data: Data, split_seed: int, clean: bool) -> Data:
    n = int(data.x.size(0))
    if data.y.numel() != n:
        raise DatasetError(f"dataset: y has {data.y.numel()} entries but x has {n} rows")
    out = Data(x=data.x.float().contiguous(), y=data.y.view(-1).long(),
               edge_index=data.edge_index if clean else clean_edges(data.edge_index, n),
               num_nodes=n)
    if all(getattr(data, m, None) is not None for m in MASKS):
        for m in MASKS:
            out[m] = getattr(data, m).bool()
    else:
        out.train_mask, out.val_mask, out.test_mask = random_split(n, split_seed)
    out.num_classes = int(getattr(data, "num_classes", None) or int(out.y.max()) + 1)
    return out
