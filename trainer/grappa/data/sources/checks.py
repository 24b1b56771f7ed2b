"""Checks of streamed values, shared by the streaming prepare and in-memory loading: each error
names the file, the row and the fix."""
from __future__ import annotations

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import SPLIT_NAMES, SPLIT_NONE, EdgeBlock, GraphSource
from grappa.data.store.feature_codec import BINARY, Codec, not_binary


def _first(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def check_edge_ids(block: EdgeBlock, num_nodes: int) -> None:
    for ids, role in ((block.src, "source"), (block.dst, "destination")):
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            i = _first((ids < 0) | (ids >= num_nodes))
            raise DatasetError(f"{block.origin} edge {block.first_row + i}: {role} id {ids[i]} is "
                               f"outside [0, {num_nodes}) (the graph has {num_nodes} nodes)")


def checked_features(x: np.ndarray, codec: Codec, source: GraphSource, start: int) -> np.ndarray:
    """x as the store keeps it (data/store/feature_codec.py), after checking every value is
    finite, fits float16 where stored so, and is 0 or 1 where packed as binary."""
    if x.dtype.kind not in "fiub":
        raise DatasetError(f"{source.feature_origin}: features have dtype {x.dtype}; use float32")
    if x.dtype.kind == "f":
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            raise DatasetError(f"{source.feature_origin} row {start + _first(~finite)}: NaN or infinite "
                               "feature; replace it (e.g. numpy.nan_to_num) or drop the node")
    if codec.encoding == BINARY:
        bad = not_binary(x)
        if bad.any():
            i = _first(bad)
            value = x[i][(x[i] != 0) & (x[i] != 1)][0]
            raise DatasetError(f"{source.feature_origin} row {start + i}: feature value {value} is not "
                               "0 or 1, and dataset.featureDtype: binary keeps only 0/1 features; set "
                               "dataset.featureDtype: sparse (features mostly 0) or float32")
        return codec.encode(x)
    dtype = np.dtype(np.float16 if codec.encoding == "float16" else np.float32)
    with np.errstate(over="ignore"):  # overflow to inf is caught just below, with the row
        out = x.astype(dtype, copy=False)
    if dtype == np.float16 and x.dtype != np.float16:
        over = ~np.isfinite(out).all(axis=1)
        if over.any():
            raise DatasetError(f"{source.feature_origin} row {start + _first(over)}: a feature exceeds "
                               "float16's range (65504); set dataset.featureDtype: float32 or rescale")
    return codec.encode(out)


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


def id_ranges(ids: list[int]) -> str:
    """Sorted ids as ranges: [0, 1, 2, 3, 4, 9] -> '0-4, 9'."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ", ".join(out)


def check_label_gaps(used: list[int], source: GraphSource) -> None:
    """With the class count taken from the data (largest label + 1), every class below it must
    occur: a gap is usually a stray label that would silently add classes to the model."""
    if not used or len(used) == used[-1] + 1:
        return
    gaps = sorted(set(range(used[-1] + 1)) - set(used))
    raise DatasetError(
        f"{source.label_origin}: labels use the class ids {id_ranges(used)} but never "
        f"{id_ranges(gaps)}, so the model would have {used[-1] + 1} classes. If a label is wrong, "
        f"fix it in {source.label_origin}; if those classes exist but have no node here, set "
        f"{source.num_classes_setting}: {used[-1] + 1}")
