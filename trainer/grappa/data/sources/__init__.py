"""Graph sources: every dataset Grappa can prepare, read in bounded memory (torch-free except
for the small in-memory datasets, which PyG loads)."""
from __future__ import annotations

import os
from pathlib import Path

from grappa.config import OGB_DATASETS, DatasetConfig
from grappa.data.errors import DatasetError
from grappa.data.sources.base import EdgeBlock, EdgePart, GraphSource, NodeBlock

__all__ = ["open_source", "data_root", "GraphSource", "EdgePart", "EdgeBlock", "NodeBlock", "DatasetError"]


def data_root(cfg: DatasetConfig) -> Path:
    """dataset.root, else $GRAPPA_DATA_ROOT, else ./data."""
    return Path(cfg.root or os.environ.get("GRAPPA_DATA_ROOT") or "data")


def dataset_path(cfg: DatasetConfig) -> Path:
    """dataset.path; a relative one lies under the data root."""
    path = Path(cfg.path or "")
    return path if path.is_absolute() else data_root(cfg) / path


def open_source(cfg: DatasetConfig, progress: bool = True, need_labels: bool = True) -> GraphSource:
    """The streaming source of rmat, OGB, arrays or tables: reads metadata only. `need_labels=False`:
    an arrays graph may lack labels.npy and the split files (inference)."""
    if cfg.name == "rmat":
        from grappa.data.sources.rmat import RmatSource
        s = cfg.synthetic
        return RmatSource(s.scale, s.num_features, s.num_classes, s.seed, cfg.split_seed)
    if cfg.name in OGB_DATASETS:
        from grappa.data.sources.ogb import OGB_META, OgbSource, dataset_dir
        root = data_root(cfg)
        release = dataset_dir(root, cfg.name) / f"RELEASE_v{OGB_META[cfg.name].version}.txt"
        if cfg.download and not release.is_file():
            from grappa.data.sources.download import download_ogb
            download_ogb(cfg.name, root, progress=progress)
        return OgbSource(cfg.name, root, cfg.add_inverse_edges)
    if cfg.name == "tables":
        from grappa.data.tables.source import TablesSource
        return TablesSource(dataset_path(cfg), cfg.tables, bool(cfg.add_inverse_edges), cfg.split_seed,
                            need_labels)
    if cfg.name == "arrays":
        from grappa.data.sources.arrays import ArraysSource
        return ArraysSource(dataset_path(cfg), cfg.arrays, bool(cfg.add_inverse_edges), need_labels)
    # The in-memory datasets (built-ins, csbm, file) are grappa.data's: grappa.data.open_dataset
    # opens every kind; this package never imports grappa.data, which builds on it.
    raise DatasetError(f"dataset.name: '{cfg.name}' is not a streaming source; open it with "
                       "grappa.data.open_dataset")
