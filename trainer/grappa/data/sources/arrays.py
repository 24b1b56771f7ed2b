"""The Grappa arrays format: a user's graph as .npy files in one folder.

    <folder>/edges.npy       [2, E] int32 or int64 (row 0 source, row 1 destination); or several
                             part files, or src/dst pairs of [E] arrays (dataset.arrays)
    <folder>/features.npy    [n, f] float32 or float16; n defines the node count
    <folder>/labels.npy      [n] integers, -1 = unlabelled
    <folder>/train.npy, val.npy, test.npy   bool masks [n] or integer index arrays

Training needs all of them. Inference needs edges and features only (`need_labels=False`): a
graph without labels.npy has every node unlabelled, one without a split file no node in that
split; whatever is there is checked the same.

Link prediction (task: link-prediction) needs edges and features only; its supervision edges are
the seeded split of edges.npy, or the folder's own (`link_split`, all optional but the three
edge files go together):

    <folder>/train_edges.npy, val_edges.npy, test_edges.npy   [2, E] int node ids
    <folder>/val_neg.npy, test_neg.npy          [E_split, k] negative destinations per positive (MRR)
    <folder>/val_shared_neg.npy, test_shared_neg.npy   [2, N] negative pairs (Hits@K, AUC)

The validation and test edges are removed from edges.npy's message passing (both directions when
the graph is undirected); negatives not given are drawn as for the seeded split.

Everything is checked from the headers before any data is read; edge ids, feature values and
labels are checked block by block as they stream (file and row named in every error).
"""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Iterator

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import (
    SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, EdgeBlock, EdgePart, GraphSource, NodeBlock
)
from grappa.data.sources.npyio import NpyHeader, npy_header, read_rows
from grappa.data.sources.split_files import SplitIndex
from grappa.util.npy import load_npy

FEATURE_DTYPES = (np.float32, np.float16)
LINK_EDGE_FILES = {"train": "train_edges.npy", "val": "val_edges.npy", "test": "test_edges.npy"}
LINK_NEGATIVE_FILES = {"val_neg": "val_neg.npy", "test_neg": "test_neg.npy",
                       "val_shared_neg": "val_shared_neg.npy", "test_shared_neg": "test_shared_neg.npy"}
LINK_FILES = (*LINK_EDGE_FILES.values(), *LINK_NEGATIVE_FILES.values())


class EdgeColumns(EdgePart):
    """Columns [lo, hi) of a [2, E] edge file, or rows [lo, hi) of a src/dst file pair."""

    def __init__(self, src: NpyHeader, dst: NpyHeader, lo: int, hi: int, pair: bool) -> None:
        self.src, self.dst, self.lo, self.hi, self.pair = src, dst, lo, hi, pair
        self.num_edges = hi - lo

    def _read(self, header: NpyHeader, first: int, count: int, row: int) -> np.ndarray:
        """`count` ids from position `first` of row `row` (0 or 1) of a [2, E] array, or of a 1-D file."""
        path = Path(header.origin)
        if self.pair:
            return read_rows(header, path, first, first + count)
        e = header.shape[1]
        if header.fortran_order:  # stored as E (src, dst) pairs
            pairs = np.fromfile(path, header.dtype, count=2 * count,
                                offset=header.data_offset + 2 * first * header.dtype.itemsize)
            return pairs[row::2]
        return np.fromfile(path, header.dtype, count=count,
                           offset=header.data_offset + (row * e + first) * header.dtype.itemsize)

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        for first in range(self.lo, self.hi, block_edges):
            count = min(block_edges, self.hi - first)
            src, dst = self._read(self.src, first, count, 0), self._read(self.dst, first, count, 1)
            if src.size != count or dst.size != count:
                raise DatasetError(f"{self.src.origin} is truncated near edge {first}")
            yield EdgeBlock(src, dst, self.src.origin if not self.pair else
                            f"{self.src.origin} / {self.dst.origin}", first)


def _integer(header: NpyHeader, what: str) -> None:
    if not np.issubdtype(header.dtype, np.integer) or header.dtype.itemsize > 8 or \
            header.dtype == np.uint64:
        raise DatasetError(f"{header.origin}: {what} have dtype {header.dtype}; save them as int32 or "
                           f"int64 (e.g. numpy.save(path, a.astype(numpy.int64)))")


class ArraysSource(GraphSource):
    def __init__(self, folder: Path, cfg, add_inverse_edges: bool,  # cfg: ArraysConfig
                 need_labels: bool = True) -> None:
        if not folder.is_dir():
            raise DatasetError(f"dataset.path: folder {folder} does not exist (relative paths are "
                               "under dataset.root / $GRAPPA_DATA_ROOT, or the job's storage mount)")
        self.folder = folder
        self.name = f"arrays:{folder.name}"
        self.add_inverse_edges = add_inverse_edges
        self.num_classes = cfg.num_classes
        x = npy_header(folder / cfg.features)
        if len(x.shape) != 2:
            raise DatasetError(f"{x.origin}: features have shape {x.shape}; expected [n, f] (2-D)")
        if x.dtype not in FEATURE_DTYPES:
            raise DatasetError(f"{x.origin}: features have dtype {x.dtype}; save them as float32 or "
                               "float16 (e.g. numpy.save(path, x.astype(numpy.float32)))")
        self.features = x
        self.num_nodes, self.num_features = x.shape
        self.feature_origin = x.origin
        self.labels_required = need_labels
        labels = folder / cfg.labels
        if need_labels and not labels.is_file():
            raise DatasetError(f"{labels} does not exist: training and scoring need labels (-1 for an "
                               "unlabelled node) and train/val/test; `grappa predict` alone needs edges "
                               "and features only")
        self.labels = self._labels(labels) if labels.is_file() else None
        self.label_origin = self.labels.origin if self.labels else str(labels)
        self.parts = self._edge_files(cfg)
        self.num_edges = sum(src.rows if pair else src.shape[1] for src, _, pair in self.parts)
        self.splits = SplitIndex(self.num_nodes)
        for code, name in ((SPLIT_TRAIN, cfg.train), (SPLIT_VAL, cfg.val), (SPLIT_TEST, cfg.test)):
            if need_labels or (folder / name).is_file():
                self._add_split(code, folder / name)
        self.split_origin = self.splits.origins

    def _labels(self, path: Path) -> NpyHeader:
        y = npy_header(path)
        if not (len(y.shape) == 1 or (len(y.shape) == 2 and y.shape[1] == 1)) or y.rows != self.num_nodes:
            raise DatasetError(f"{y.origin}: labels have shape {y.shape}; expected [{self.num_nodes}] "
                               f"(one per row of {self.feature_origin})")
        _integer(y, "labels")
        return y

    def _edge_files(self, cfg) -> list[tuple[NpyHeader, NpyHeader, bool]]:
        out = []
        if cfg.src:
            for s_name, d_name in zip(cfg.src, cfg.dst):
                s, d = npy_header(self.folder / s_name), npy_header(self.folder / d_name)
                for h in (s, d):
                    _integer(h, "edge ids")
                    if len(h.shape) != 1:
                        raise DatasetError(f"{h.origin}: shape {h.shape}; src/dst files are 1-D [E]")
                if s.rows != d.rows:
                    raise DatasetError(f"{s.origin} has {s.rows} ids but {d.origin} has {d.rows}: "
                                       "each src file must pair with a dst file of the same length")
                out.append((s, d, True))
            return out
        for pattern in cfg.edges or ["edges.npy"]:
            matches = sorted(glob.glob(str(self.folder / pattern)))
            if not matches:
                raise DatasetError(f"dataset.arrays.edges: no file matches {self.folder / pattern}")
            for name in matches:
                h = npy_header(Path(name))
                _integer(h, "edge ids")
                if len(h.shape) != 2 or h.shape[0] != 2:
                    fix = " (transpose it: numpy.save(path, e.T))" if len(h.shape) == 2 and h.shape[1] == 2 else ""
                    raise DatasetError(f"{h.origin}: edges have shape {h.shape}; expected [2, E] "
                                       f"(row 0 sources, row 1 destinations){fix}")
                out.append((h, h, False))
        return out

    def _add_split(self, code: int, path: Path) -> None:
        if not path.is_file():
            raise DatasetError(f"{path} does not exist: training and scoring need train, val and test "
                               "(bool masks or index arrays); set dataset.arrays.train/val/test "
                               "(`grappa predict` alone needs none of them)")
        h = npy_header(path)
        if h.dtype == np.bool_:
            if h.shape != (self.num_nodes,):
                n = self.num_nodes
                raise DatasetError(
                    f"{h.origin}: mask has shape {h.shape}; expected [{n}], one bool per row of "
                    f"{self.feature_origin}: save m = numpy.zeros({n}, bool) with m[ids] = True, "
                    "or the split's node ids themselves as an integer array")
            self.splits.add_mask(code, h)
            return
        if len(h.shape) != 1:
            raise DatasetError(f"{h.origin}: shape {h.shape}; a split is a bool mask [n] or a 1-D index array")
        _integer(h, "split indices")
        self.splits.add_indices(code, read_rows(h, path, 0, h.rows), h.origin)

    def link_split(self):
        """The folder's own link split (train_edges.npy, ...), or None: the seeded split."""
        from grappa.data.link_split import GivenSplit
        present = {s: self.folder / f for s, f in LINK_EDGE_FILES.items() if (self.folder / f).is_file()}
        negatives = {s: self.folder / f for s, f in LINK_NEGATIVE_FILES.items() if (self.folder / f).is_file()}
        if not present:
            if negatives:
                raise DatasetError(f"{next(iter(negatives.values()))} gives negatives for edge files that are "
                                   f"not there: add {', '.join(LINK_EDGE_FILES.values())} to {self.folder}, "
                                   "or remove the negative files to split edges.npy")
            return None
        missing = [f for s, f in LINK_EDGE_FILES.items() if s not in present]
        if missing:
            raise DatasetError(f"{self.folder} has {', '.join(p.name for p in present.values())} but not "
                               f"{', '.join(missing)}: give all three edge files (an empty [2, 0] array for a "
                               "split without edges), or none to split edges.npy")
        arrays = {}
        for key, path in {**present, **negatives}.items():
            h = npy_header(path)
            _integer(h, "node ids")
            arrays[key] = read_rows(h, path, 0, h.rows) if len(h.shape) == 1 else load_npy(path)
        return GivenSplit(edges={s: arrays[s] for s in LINK_EDGE_FILES},
                          negatives={s: arrays[s] for s in LINK_NEGATIVE_FILES if s in arrays},
                          files={**LINK_EDGE_FILES, **LINK_NEGATIVE_FILES}, where=str(self.folder))

    def edge_parts(self, parts: int) -> list[EdgePart]:
        total = max(1, self.num_edges)
        out: list[EdgePart] = []
        for src, dst, pair in self.parts:
            e = src.rows if pair else src.shape[1]
            pieces = max(1, round(parts * e / total))
            bounds = np.linspace(0, e, pieces + 1).astype(np.int64)
            out += [EdgeColumns(src, dst, int(lo), int(hi), pair)
                    for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
        return out

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        for lo in range(0, self.num_nodes, block_rows):
            hi = min(lo + block_rows, self.num_nodes)
            x = read_rows(self.features, Path(self.features.origin), lo, hi)
            y = (read_rows(self.labels, Path(self.labels.origin), lo, hi).reshape(-1).astype(np.int64)
                 if self.labels else np.full(hi - lo, -1, dtype=np.int64))
            yield NodeBlock(lo, x, y, self.splits.codes(lo, hi))
