"""Built-in real datasets read through PyG from a local root laid out like shared/datasets."""
from __future__ import annotations

from torch_geometric.data import Data

from grappa.config import DatasetConfig
from grappa.data.datasets.random_splits import per_class_split
from grappa.data.errors import DatasetError
from grappa.data.sources import data_root

# name -> (sub-folder, PyG class name, PyG dataset name, raw files PyG needs)
_PLANETOID_RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
BUILTINS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "cora": ("planetoid", "Planetoid", "Cora", tuple(f"ind.cora.{s}" for s in _PLANETOID_RAW)),
    "citeseer": ("planetoid", "Planetoid", "CiteSeer",
                 tuple(f"ind.citeseer.{s}" for s in _PLANETOID_RAW)),
    "coauthor-cs": ("coauthor", "Coauthor", "CS", ("ms_academic_cs.npz",)),
    "coauthor-physics": ("coauthor", "Coauthor", "Physics", ("ms_academic_phy.npz",)),
    "amazon-computers": ("amazon", "Amazon", "Computers", ("amazon_electronics_computers.npz",)),
    "amazon-photo": ("amazon", "Amazon", "Photo", ("amazon_electronics_photo.npz",)),
}


def load_builtin(cfg: DatasetConfig) -> Data:
    """PyG dataset with its public split (Planetoid) or a seeded 20/30-per-class split."""
    import importlib.util

    import torch_geometric.datasets as pyg_datasets

    sub, cls_name, pyg_name, raw_files = BUILTINS[cfg.name]
    root = data_root(cfg) / sub
    raw_dir = root / pyg_name / "raw"
    missing = [f for f in raw_files if not (raw_dir / f).is_file()]
    if missing and not cfg.download:
        raise DatasetError(
            f"dataset '{cfg.name}': raw files missing in {raw_dir} ({', '.join(missing)}); "
            f"dataset.root (or $GRAPPA_DATA_ROOT) is '{data_root(cfg)}'. Fix: set GRAPPA_DATA_ROOT "
            f"or dataset.root to a folder that has {sub}/{pyg_name}/raw/, "
            "or set dataset.download: true to let PyG fetch it")
    if importlib.util.find_spec("scipy") is None:  # PyG's raw readers need it; fail before any download
        raise DatasetError(f"dataset '{cfg.name}' needs scipy (PyG reads its raw files with it): "
                           "pip install scipy")
    cls = getattr(pyg_datasets, cls_name)
    ds = cls(str(root), pyg_name) if cls_name != "Planetoid" else cls(str(root), pyg_name, split="public")
    data = ds[0]
    if cls_name != "Planetoid":  # Coauthor and Amazon ship no split
        data.train_mask, data.val_mask, data.test_mask = per_class_split(data.y, cfg.split_seed)
    data.num_classes = int(ds.num_classes)
    return data
