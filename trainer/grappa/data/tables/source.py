"""`dataset.name: tables`: a graph from a nodes table and an edges table (Parquet or CSV).

Opening reads the tables' schemas only (and Parquet's row counts): every column named in the
config is checked there, with the columns that exist. `stage` (run by the store's prepare inside
its staging folder, before the two passes) streams the id column and the edges through the
out-of-core id map (idmap.py), writes the ids in dense order to `node_ids.parquet` and the
edges, as dense ids, to two .npy files; the store's passes then read node rows (features, label,
split) from the nodes table in row order and the edges from those files. Every error names the
file, the row and the fix.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from grappa.data.errors import DatasetError
from grappa.data.sources.base import (
    SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, EdgePart, GraphSource, NodeBlock
)
from grappa.data.tables import idmap
from grappa.data.tables.files import Batch, Table, release_arrow_memory

IDS_FILE = "node_ids.parquet"
SPLIT_CODES = {"train": SPLIT_TRAIN, "val": SPLIT_VAL, "test": SPLIT_TEST}
MAX_LABEL_NAMES = 100_000
_SPLIT_PURPOSE = 0x53504C  # "SPL"


def _kind(t: pa.DataType) -> Optional[str]:
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    return None


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _np(arr: pa.Array, dtype) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


class TablesSource(GraphSource):
    def __init__(self, folder: Path, cfg, add_inverse_edges: bool, split_seed: int,
                 need_labels: bool = True) -> None:  # cfg: grappa.config.TablesConfig
        if not folder.is_dir():
            raise DatasetError(f"dataset.path: folder {folder} does not exist (relative paths are "
                               "under dataset.root / $GRAPPA_DATA_ROOT, or the job's storage mount)")
        self.folder, self.cfg = folder, cfg
        self.name = f"tables:{folder.name}"
        self.add_inverse_edges = add_inverse_edges
        self.split_seed = split_seed
        self.labels_required = need_labels
        n, e = cfg.nodes, cfg.edges
        as_text = cfg.id_type != "int64"
        self.nodes = Table(folder, n.files, n.format, "dataset.tables.nodes",
                           (n.id,) if as_text else ())
        self.edges = Table(folder, e.files, e.format, "dataset.tables.edges",
                           (e.src, e.dst) if as_text else ())
        self.nodes.require(n.id, "dataset.tables.nodes.id")
        self.edges.require(e.src, "dataset.tables.edges.src")
        self.edges.require(e.dst, "dataset.tables.edges.dst")
        self.id_kind = self._id_kind()
        self._features()
        self.feature_origin = f"{self.nodes.files[0]} (features {', '.join(self.feature_columns)})"
        self._labels(need_labels)
        self.label_names: Optional[list[str]] = None
        self.num_classes = cfg.num_classes
        self.num_nodes = self.nodes.count_rows() or 0  # CSV: counted by `stage`
        self.num_edges = self.edges.count_rows() or 0
        self.node_files: list[tuple[str, int]] = []  # (file, its first dense id), set by `stage`
        self.edge_files: Optional[tuple[str, str]] = None

    # -- what the config names, checked on the schemas ------------------------------------------

    def _id_kind(self) -> str:
        n, e = self.cfg.nodes, self.cfg.edges
        kinds = {}
        for table, col, setting in ((self.nodes, n.id, "nodes.id"), (self.edges, e.src, "edges.src"),
                                    (self.edges, e.dst, "edges.dst")):
            t = table.schema.field(col).type
            kind = _kind(t)
            if kind is None:
                raise DatasetError(f"{table.files[0]}: id column {col!r} (dataset.tables.{setting}) has "
                                   f"type {t}; ids are strings or integers")
            kinds[setting] = kind
        if self.cfg.id_type != "auto":
            return self.cfg.id_type
        if len(set(kinds.values())) > 1:
            detail = ", ".join(f"{k} {v}" for k, v in kinds.items())
            raise DatasetError(f"mixed id types: {detail} ({self.nodes.files[0]}, {self.edges.files[0]}); "
                               "an edge's endpoints are looked up among the node ids as they are: store "
                               "them with one type, or set dataset.tables.idType: string")
        return kinds["nodes.id"]

    def _features(self) -> None:
        cols = self.nodes.expand(self.cfg.nodes.features, "dataset.tables.nodes.features")
        self.feature_columns = cols
        types = {c: self.nodes.schema.field(c).type for c in cols}
        lists = [c for c in cols if _is_list(types[c])]
        if lists and len(cols) > 1:
            raise DatasetError(f"{self.nodes.files[0]}: dataset.tables.nodes.features names the list "
                               f"column {lists[0]!r} with other columns ({', '.join(cols)}); give one list "
                               "column, or numeric columns only")
        if lists:
            t = types[cols[0]]
            if not _numeric(t.value_type):
                raise DatasetError(f"{self.nodes.files[0]}: feature column {cols[0]!r} holds {t}; "
                                   "features are numbers (a list of float or int)")
            self.feature_list = True
            self.num_features = t.list_size if pa.types.is_fixed_size_list(t) else self._first_length(cols[0])
            return
        bad = [c for c in cols if not _numeric(types[c])]
        if bad:
            raise DatasetError(f"{self.nodes.files[0]}: feature column {bad[0]!r} has type {types[bad[0]]}: "
                               "features are numeric columns, or one list column; convert it to numbers "
                               "or leave it out of dataset.tables.nodes.features")
        self.feature_list = False
        self.num_features = len(cols)

    def _first_length(self, col: str) -> int:
        for b in self.nodes.batches([col], batch_rows=1024):
            lengths = pc.list_value_length(b.column(col))
            valid = lengths.drop_null()
            if len(valid):
                return int(valid[0].as_py())
        raise DatasetError(f"{self.nodes.files[0]}: feature column {col!r} has no value")

    def _labels(self, need_labels: bool) -> None:
        n = self.cfg.nodes
        self.label_kind = None
        if n.label is None:
            if need_labels:
                raise DatasetError("dataset.tables.nodes.label is not set: training and scoring need "
                                   f"labels; name the label column of {self.nodes.files[0]} (its columns "
                                   f"are {', '.join(self.nodes.names)}); `grappa predict` alone needs none")
        else:
            self.nodes.require(n.label, "dataset.tables.nodes.label")
            t = self.nodes.schema.field(n.label).type
            self.label_kind = _kind(t)
            if self.label_kind is None:
                raise DatasetError(f"{self.nodes.files[0]}: label column {n.label!r} has type {t}; labels "
                                   "are integers (class ids) or strings (class names)")
        self.label_origin = f"{self.nodes.files[0]} (label column {n.label!r})"
        if n.split is not None:
            self.nodes.require(n.split, "dataset.tables.nodes.split")
            t = self.nodes.schema.field(n.split).type
            if _kind(t) != "string":
                raise DatasetError(f"{self.nodes.files[0]}: split column {n.split!r} has type {t}; it holds "
                                   "train, val or test (or nothing) per node")
            self.split_origin = {c: f"{self.nodes.files[0]} (split column {n.split!r}, {name})"
                                 for name, c in SPLIT_CODES.items()}
        else:
            self.split_origin = {c: f"dataset.tables.splitFractions ({name})" for name, c in SPLIT_CODES.items()}

    num_classes_setting = "dataset.tables.numClasses"

    # -- the id map ----------------------------------------------------------------------------

    def _ids(self, arr: pa.Array, batch: Batch, column: str) -> pa.Array:
        """The ids of a batch as the map compares them: no nulls, the id type."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.null_count:
            i = int(np.flatnonzero(_np(arr.is_null(), bool))[0])
            raise DatasetError(f"{batch.where(i)}: {column!r} is empty (null); every node and edge endpoint "
                               "needs an id: fill it in or drop the row")
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        kind = _kind(arr.type)
        if kind != self.id_kind:
            if self.cfg.id_type == "auto":
                raise DatasetError(f"{batch.file}: {column!r} holds {arr.type} ids but the other id "
                                   f"columns hold {self.id_kind} ids (mixed id types); store them with one "
                                   "type, or set dataset.tables.idType: string")
            try:
                arr = arr.cast(pa.int64() if self.id_kind == "int64" else pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise DatasetError(f"{batch.file}: {column!r} cannot be read as {self.id_kind} ids "
                                   f"({err}); set dataset.tables.idType: string") from None
        if self.id_kind == "int64":
            return arr.cast(pa.int64())
        return arr.cast(pa.large_string()) if not pa.types.is_large_string(arr.type) else arr

    def where_row(self, dense: int) -> str:
        """`file row r` of the node with dense id `dense`."""
        file, start = next((f, s) for f, s in reversed(self.node_files) if s <= dense)
        return f"{file} row {dense - start}"

    def stage(self, staging: Path, work: Path, block_edges: int) -> dict[str, Any]:
        n, e = self.cfg.nodes, self.cfg.edges
        part_rows = max(1 << 9, block_edges // 2)
        id_type = pa.int64() if self.id_kind == "int64" else pa.large_string()
        edge_estimate = self.edges.count_rows() or self.edges.size_bytes() // 8 + 1
        node_estimate = self.nodes.count_rows() or self.nodes.size_bytes() // 8 + 1
        bits = idmap.partition_bits(max(edge_estimate, node_estimate), part_rows)
        node_runs = idmap.RunSet(work, "nodes", bits, pa.schema([("id", id_type), ("row", pa.int64())]),
                                 part_rows)
        names: set = set()
        ids_path = staging / IDS_FILE
        writer = pq.ParquetWriter(str(ids_path), pa.schema([(n.id, id_type)]))
        row = 0
        files = []
        columns = [n.id] + ([n.label] if self.label_kind == "string" else [])
        try:
            for b in self.nodes.batches(columns):
                if not files or files[-1][0] != b.file:
                    files.append((b.file, row))
                ids = self._ids(b.column(n.id), b, n.id)
                writer.write_table(pa.table({n.id: ids}))
                m = len(ids)
                node_runs.add(idmap.partition_of(ids, bits), [ids, pa.array(np.arange(row, row + m))])
                if self.label_kind == "string":
                    names.update(v for v in pc.unique(self._label_text(b)).to_pylist() if v is not None)
                    if len(names) > MAX_LABEL_NAMES:
                        raise DatasetError(f"{self.label_origin}: more than {MAX_LABEL_NAMES:,} distinct labels; "
                                           "is it the right column?")
                row += m
        finally:
            writer.close()
            node_runs.close()
        self.node_files = files
        if row == 0:
            raise DatasetError(f"dataset.tables.nodes: {', '.join(map(str, self.nodes.files))} hold no row")
        self.num_nodes = row
        if self.label_kind == "string":
            self.label_names = sorted(names)
            self.num_classes = len(self.label_names) or None
        try:
            kept, dangling, rows = self._edges(work, bits, id_type, part_rows, node_runs)
        finally:
            release_arrow_memory()
        self.num_edges = kept
        digest = hashlib.sha256()
        with open(ids_path, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        digest = digest.hexdigest()
        return {"tables": {
            "id_column": n.id, "id_type": self.id_kind,
            "ids": {"file": IDS_FILE, "bytes": ids_path.stat().st_size, "sha256": digest},
            "label_column": n.label, "label_names": self.label_names,
            "edge_rows": rows, "dangling_edges": dangling, "dangling_policy": self.cfg.dangling_edges,
            "partitions": 1 << bits,
        }}

    def _label_text(self, b: Batch) -> pa.Array:
        col = b.column(self.cfg.nodes.label)
        return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col

    def _edges(self, work: Path, bits: int, id_type: pa.DataType, part_rows: int,
               node_runs: idmap.RunSet) -> tuple[int, int, int]:
        """Passes 2-4 of idmap.py; returns (edges kept, edges with a missing endpoint, rows read)."""
        from grappa.data.store.manifest import id_dtype
        from grappa.data.store.npywriter import NpyWriter
        e = self.cfg.edges
        by_dst = idmap.RunSet(work, "edges-dst", bits, pa.schema([("dst", id_type), ("src", id_type)]), part_rows)
        rows = 0
        try:
            for b in self.edges.batches([e.src, e.dst]):
                src, dst = self._ids(b.column(e.src), b, e.src), self._ids(b.column(e.dst), b, e.dst)
                by_dst.add(idmap.partition_of(dst, bits), [dst, src])
                rows += len(src)
        finally:
            by_dst.close()
        by_src = idmap.RunSet(work, "edges-src", bits, pa.schema([("src", id_type), ("dst", pa.int64())]), part_rows)
        missing: Optional[tuple[str, object]] = None
        try:
            for p in range(by_dst.parts):
                nodes = node_runs.read(p)
                ids, at = nodes.column("id").combine_chunks(), _np(nodes.column("row"), np.int64)
                dup = idmap.first_duplicate(ids, at)
                if dup is not None:
                    value, r1, r2 = dup
                    raise DatasetError(f"{self.where_row(r2)}: node id {value!r} is already the id of "
                                       f"{self.where_row(r1)}; node ids must be unique: drop or merge the "
                                       "duplicate row")
                run = by_dst.read(p)
                by_dst.remove(p)
                dense = idmap.lookup(run.column("dst").combine_chunks(), ids, at)
                if missing is None and (dense < 0).any():
                    missing = ("destination", run.column("dst")[int(np.flatnonzero(dense < 0)[0])].as_py())
                src = run.column("src").combine_chunks()
                by_src.add(idmap.partition_of(src, bits), [src, pa.array(dense)])
        finally:
            by_src.close()
        dtype = id_dtype(self.num_nodes)
        src_file, dst_file = work / "edges-src.npy", work / "edges-dst.npy"
        out_src, out_dst = NpyWriter(src_file, dtype), NpyWriter(dst_file, dtype)
        dangling = kept = 0
        for p in range(by_src.parts):
            nodes = node_runs.read(p)
            ids, at = nodes.column("id").combine_chunks(), _np(nodes.column("row"), np.int64)
            node_runs.remove(p)
            run = by_src.read(p)
            by_src.remove(p)
            values = run.column("src").combine_chunks()
            s, d = idmap.lookup(values, ids, at), _np(run.column("dst"), np.int64)
            bad = (s < 0) | (d < 0)
            if bad.any():
                dangling += int(bad.sum())
                if missing is None:
                    missing = ("source", values[int(np.flatnonzero(s < 0)[0])].as_py())
                s, d = s[~bad], d[~bad]
            out_src.append(s.astype(dtype))
            out_dst.append(d.astype(dtype))
            kept += len(s)
        out_src.close()
        out_dst.close()
        if dangling and self.cfg.dangling_edges == "error":
            role, value = missing
            where = self._find_edge(role, value)
            raise DatasetError(
                f"{where}: edge {role} {value!r} is not an id of the nodes table "
                f"({', '.join(map(str, self.nodes.files[:3]))}); {dangling:,} of {rows:,} edges have an endpoint "
                "missing from it. Add those nodes, fix the ids, or set dataset.tables.danglingEdges: drop "
                "to leave those edges out")
        self.edge_files = (str(src_file), str(dst_file))
        return kept, dangling, rows

    def _find_edge(self, role: str, value: object) -> str:
        """`file row r` of the first edge whose `role` endpoint is `value` (the error path only)."""
        col = self.cfg.edges.src if role == "source" else self.cfg.edges.dst
        for b in self.edges.batches([col]):
            ids = self._ids(b.column(col), b, col)
            i = pc.index(ids, pa.scalar(value, ids.type)).as_py()
            if i >= 0:
                return b.where(i)
        return str(self.edges.files[0])

    # -- what the store's passes read ----------------------------------------------------------

    def edge_parts(self, parts: int) -> list[EdgePart]:
        from grappa.data.sources.arrays import EdgeColumns
        from grappa.data.sources.npyio import npy_header
        if self.edge_files is None:
            raise RuntimeError("TablesSource.edge_parts before stage()")
        s, d = npy_header(Path(self.edge_files[0])), npy_header(Path(self.edge_files[1]))
        bounds = np.linspace(0, s.rows, max(1, parts) + 1).astype(np.int64)
        return [EdgeColumns(s, d, int(lo), int(hi), True) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        n = self.cfg.nodes
        # not the id column: only an error message names a node, and reads its id then (_node_id)
        cols = list(dict.fromkeys([*self.feature_columns] + ([n.label] if n.label else [])
                                  + ([n.split] if n.split else [])))
        start = 0
        for b in self.nodes.batches(cols, batch_rows=block_rows):
            x = self._x(b)
            y = self._y(b) if n.label else np.full(len(x), -1, dtype=np.int64)
            split = self._split(b, start, y)
            yield NodeBlock(start, x, y, split)
            start += len(x)

    def _x(self, b: Batch) -> np.ndarray:
        cols = self.feature_columns
        f = self.num_features
        if self.feature_list:
            col = b.column(cols[0])
            if col.null_count:
                i = int(np.flatnonzero(_np(col.is_null(), bool))[0])
                raise DatasetError(f"{b.where(i)}: feature column {cols[0]!r} is empty (null); give every "
                                   "node its features, or drop the row")
            lengths = _np(pc.list_value_length(col), np.int64)
            if (lengths != f).any():
                i = int(np.flatnonzero(lengths != f)[0])
                raise DatasetError(f"{b.where(i)}: feature column {cols[0]!r} has {lengths[i]} values but the "
                                   f"table's first row has {f} (ragged features); every node needs {f}")
            values = col.flatten()
            if values.null_count:
                j = int(np.flatnonzero(_np(values.is_null(), bool))[0])
                raise DatasetError(f"{b.where(j // f)}: feature column {cols[0]!r} has an empty (null) value "
                                   f"at position {j % f}; fill it in (e.g. 0) or drop the row")
            # float32 as it is (no float64 copy of the block); other types through float64
            x = _np(values, np.float32 if values.type == pa.float32() else np.float64).reshape(-1, f)
        else:
            parts = []
            for c in cols:
                col = b.column(c)
                if col.null_count:
                    i = int(np.flatnonzero(_np(col.is_null(), bool))[0])
                    raise DatasetError(f"{b.where(i)}: feature column {c!r} is empty (null); fill it in "
                                       "(e.g. 0) or drop the row")
                parts.append(_np(col, np.float64))
            x = np.column_stack(parts) if parts else np.zeros((b.data.num_rows, 0))
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise DatasetError(f"{b.where(i)}: a feature is NaN or infinite; replace it (e.g. 0) or drop "
                               "the row")
        return x.astype(np.float32, copy=False)

    def _node_id(self, b: Batch, i: int) -> object:
        """The id of row i of `b` (its file read again at that row: the error path only)."""
        return self.nodes.value_at(b.file, b.first_row + int(i), self.cfg.nodes.id)

    def _y(self, b: Batch) -> np.ndarray:
        col = self.cfg.nodes.label
        if self.label_kind == "string":
            text = self._label_text(b)
            at = pc.index_in(text, value_set=pa.array(self.label_names or [], pa.string()).cast(text.type))
            return _np(at.fill_null(-1), np.int64)
        arr = b.column(col)
        y = _np(pc.fill_null(arr, -1), np.int64)
        bad = y < -1
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DatasetError(f"{b.where(i)}: label {y[i]} in column {col!r} is negative; class ids are "
                               "0, 1, ... (null or -1: unlabelled)")
        if self.num_classes is not None and (y >= self.num_classes).any():
            i = int(np.flatnonzero(y >= self.num_classes)[0])
            raise DatasetError(f"{b.where(i)}: label {y[i]} is not below dataset.tables.numClasses "
                               f"({self.num_classes}); fix the label or raise numClasses")
        return y

    def _split(self, b: Batch, start: int, y: np.ndarray) -> np.ndarray:
        n = self.cfg.nodes
        m = len(y)
        if n.split is not None:
            col = b.column(n.split)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            text = pc.fill_null(col, "")
            at = _np(pc.index_in(text, value_set=pa.array(["", "train", "val", "test"], text.type)).fill_null(-1),
                     np.int64)
            if (at < 0).any():
                i = int(np.flatnonzero(at < 0)[0])
                raise DatasetError(f"{b.where(i)}: split {text[i].as_py()!r} in column {n.split!r}; a node's "
                                   "split is train, val or test, or empty for none")
            split = at.astype(np.uint8)
            unlabelled = (split != SPLIT_NONE) & (y < 0)
            if unlabelled.any() and self.labels_required:
                i = int(np.flatnonzero(unlabelled)[0])
                node = self._node_id(b, i)
                what = "has no label column" if n.label is None else f"has no label (null in {n.label!r})"
                raise DatasetError(f"{b.where(i)}: node {node!r} is in split {text[i].as_py()} but {what}; "
                                   "label it, or leave its split empty")
            if not self.labels_required:
                split[y < 0] = SPLIT_NONE
            return split
        if not self.labels_required and n.label is None:
            return np.zeros(m, dtype=np.uint8)
        return fraction_split(np.arange(start, start + m), y, self.cfg.split_fractions, self.split_seed)


def fraction_split(ids: np.ndarray, y: np.ndarray, fractions: list[float], seed: int) -> np.ndarray:
    """Split codes of labelled nodes by seeded shares: a pure function of (dense id, seed)."""
    key = np.random.SeedSequence([seed, _SPLIT_PURPOSE]).generate_state(1, dtype=np.uint64)[0]
    with np.errstate(over="ignore"):
        h = idmap._mix(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    bounds = np.cumsum(fractions)
    code = np.full(len(ids), SPLIT_NONE, dtype=np.uint8)
    code[u < bounds[2]] = SPLIT_TEST
    code[u < bounds[1]] = SPLIT_VAL
    code[u < bounds[0]] = SPLIT_TRAIN
    code[y < 0] = SPLIT_NONE
    return code
