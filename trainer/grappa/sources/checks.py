"""Checks of streamed values, shared by the streaming prepare and in-memory loading: each error
names the file, the row and the fix."""
from __future__ import annotations

import numpy as np

from .base import SPLIT_NAMES, SPLIT_NONE, EdgeBlock, GraphSource
from .errors import DatasetError


def _first(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def check_edge_ids(block: EdgeBlock, num_nodes: int) -> None:
    for ids, role in ((block.src, "source"), (block.dst, "destination")):
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            i = _first((ids < 0) | (ids >= num_nodes))
            raise DatasetError(f"{block.origin} edge {block.first_row + i}: {role} id {ids[i]} is "
                               f"outside [0, {num_nodes}) (the graph has {num_nodes} nodes)")


def checked_features(x: np.ndarray, dtype: np.dtype, source: GraphSource, start: int) -> np.ndarray:
    """x cast to the store's dtype, after checking every value is finite (and fits float16)."""
    if x.dtype.kind not in "fiu":
        raise DatasetError(f"{source.feature_origin}: features have dtype {x.dtype}; use float32")
    if x.dtype.kind == "f":
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            raise DatasetError(f"{source.feature_origin} row {start + _first(~finite)}: NaN or infinite "
                               "feature; replace it (e.g. numpy.nan_to_num) or drop the node")
    with np.errstate(over="ignore"):  # overflow to inf is caught just below, with the row
        out = x.astype(dtype, copy=False)
    if dtype == np.float16 and x.dtype != np.float16:
        over = ~np.isfinite(out).all(axis=1)
        if over.any():
            raise DatasetError(f"{source.feature_origin} row {start + _first(over)}: a feature exceeds "
                               "float16's range (65504); set dataset.featureDtype: float32 or rescale")
    return out


def check_labels(y: np.ndarray, split: np.ndarray, source: GraphSource, start: int) -> int:
    """Checks labels are -1 or in [0, classes) and that every split node has one; returns the
    largest label seen (-1 if none)."""
    c = source.num_classes
    bad = (y < -1) | (y >= c) if c is not None else (y < -1)
    if bad.any():
        i = _first(bad)
        allowed = f"[0, {c})" if c is not None else "0 or more"
        raise DatasetError(f"{source.label_origin} row {start + i}: label {y[i]} is not in {allowed} "
                           "(-1 marks an unlabelled node)")
    unlabelled = (y < 0) & (split != SPLIT_NONE)
    if unlabelled.any():
        i = _first(unlabelled)
        where = source.split_origin.get(int(split[i]), SPLIT_NAMES[int(split[i])])
        raise DatasetError(f"node {start + i} is in {where} but has no label (label -1 in "
                           f"{source.label_origin}); label it or leave it out of the split")
    return int(y.max()) if y.size else -1
