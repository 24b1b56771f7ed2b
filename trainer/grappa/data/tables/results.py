"""Results keyed by the user's ids: `predictions.parquet` beside predict's .npy files.

For a store prepared from tables (its manifest has a `tables` section and `node_ids.parquet`),
row v of every output .npy is the node whose id is row v of `node_ids.parquet`. This writes one
Parquet file with, per node: the id column under its own name and type, `predicted_class`
(int32), `predicted_label` (the class name, when the model was trained on string labels),
`scores` (class probabilities) and `embeddings`, each a fixed-size list of float32, when asked
for. Written a block of rows at a time from the finished .npy files (bounded memory), so that
`pandas.read_parquet` or a warehouse loads it as it is.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from grappa.data.sources.npyio import npy_header, read_rows

TABLE_FILE = "predictions.parquet"
BLOCK_ROWS = 1 << 16


def _fixed_list(rows: np.ndarray) -> pa.Array:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


def write_results(store: Path, manifest: dict, outputs: dict[str, Path], path: Path,
                  label_names: Optional[list[str]] = None, block_rows: int = BLOCK_ROWS) -> dict:
    """Write `path` from the store's ids and the output .npy files `outputs` ({"predictions":
    file, "scores": file, "embeddings": file}, any of them); returns its manifest entry."""
    tables = manifest["tables"]
    id_col = tables["id_column"]
    ids = pq.ParquetFile(str(store / tables["ids"]["file"]))
    heads = {name: npy_header(p) for name, p in outputs.items()}
    n = int(manifest["num_nodes"])
    names = pa.array(label_names, pa.string()) if label_names else None
    fields = [pa.field(id_col, ids.schema_arrow.field(0).type)]
    if "predictions" in heads:
        fields.append(pa.field("predicted_class", pa.int32()))
        if names is not None:
            fields.append(pa.field("predicted_label", pa.string()))
    for name in ("scores", "embeddings"):
        if name in heads:
            fields.append(pa.field(name, pa.list_(pa.float32(), heads[name].shape[1])))
    schema = pa.schema(fields)
    row = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        for batch in ids.iter_batches(batch_size=block_rows):
            m = batch.num_rows
            cols: list[pa.Array] = [batch.column(0)]
            if "predictions" in heads:
                pred = read_rows(heads["predictions"], outputs["predictions"], row, row + m).astype(np.int32)
                cols.append(pa.array(pred))
                if names is not None:
                    cols.append(names.take(pa.array(pred)))
            for name in ("scores", "embeddings"):
                if name in heads:
                    cols.append(_fixed_list(read_rows(heads[name], outputs[name], row, row + m)))
            writer.write_batch(pa.record_batch(cols, schema=schema))
            row += m
    if row != n:
        raise RuntimeError(f"{store / tables['ids']['file']} has {row} ids but the store has {n} nodes")
    return {"file": path.name, "format": "parquet", "rows": n, "columns": [f.name for f in fields],
            "holds": f"one row per node keyed by its {id_col!r} from the nodes table: the predicted class"
                     f"{' and its label name' if names is not None else ''}"
                     f"{''.join(', ' + s for s in ('scores', 'embeddings') if s in heads)}"}
