"""The output files: .npy arrays whose row is the node's id in the user's own numbering.

The store's global id of a node is its row in the source (the arrays format's row, OGB's node
id), so output row v is node v. Each worker writes a contiguous range of rows into the shared
files with positioned writes (disjoint byte ranges, no process maps or holds a whole file) and
every worker writes the same .npy header. The files live in the scratch folder until rank 0
renames them into place, manifest last (worker.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from grappa.data.rowfiles import LayerRows
from grappa.inference.job import PredictJob
from grappa.models.layerwise import StoreGraph


@dataclass(frozen=True)
class OutputSpec:
    name: str          # file stem
    layer: int         # the layer whose rows it derives from (1..L)
    dtype: str
    width: Optional[int]  # None: one value per node
    holds: str

    def derive(self, rows: np.ndarray) -> np.ndarray:
        if self.name == "predictions":
            return rows.argmax(1).astype(np.int32)
        if self.name == "scores":
            return torch.softmax(torch.from_numpy(rows), 1).numpy().astype(np.float16)
        return rows.astype(self.dtype)

    @property
    def file(self) -> str:
        return f"{self.name}.npy"


def output_specs(job: PredictJob, widths: list[int]) -> list[OutputSpec]:
    if not job.predict:
        return []
    last = len(widths)
    if job.task == "link-prediction":  # embeddings always; pair scores and top-k: link_outputs.py
        e = job.embed_layer or last
        what = "the embedding the decoder scores" if e == last else "after ReLU, the next layer's input"
        return [OutputSpec("embeddings", e, job.embed_dtype, widths[e - 1], f"output of layer {e} of {last} ({what})")]
    specs = [OutputSpec("predictions", last, "int32", None, "predicted class of each node (argmax of the logits)")]
    if job.scores:
        specs.append(OutputSpec("scores", last, "float16", widths[-1],
                                "class probabilities of each node (softmax of the logits)"))
    if job.embed_layer is not None:
        e = job.embed_layer
        what = "the logits" if e == last else "after ReLU, the next layer's input"
        specs.append(OutputSpec("embeddings", e, job.embed_dtype, widths[e - 1],
                                f"output of layer {e} of {last} ({what})"))
    return specs


def _header(dtype: str, shape: tuple[int, ...]) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape})
    return buf.getvalue()


class OutputArray:
    """One output .npy opened for positioned writes of row ranges."""

    def __init__(self, path: Path, spec: OutputSpec, num_nodes: int) -> None:
        shape = (num_nodes,) if spec.width is None else (num_nodes, spec.width)
        header = _header(spec.dtype, shape)
        self.row_bytes = np.dtype(spec.dtype).itemsize * (spec.width or 1)
        self.offset = len(header)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self.fd, header, 0)
        self.bytes = 0

    def write(self, lo: int, rows: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(rows)).cast("B")
        os.pwrite(self.fd, data, self.offset + lo * self.row_bytes)
        self.bytes += data.nbytes

    def close(self) -> None:
        os.fsync(self.fd)
        os.close(self.fd)


def id_range(rank: int, workers: int, num_nodes: int) -> tuple[int, int]:
    return rank * num_nodes // workers, (rank + 1) * num_nodes // workers


def assemble(job: PredictJob, g: StoreGraph, specs: list[OutputSpec], widths: list[int],
             lo: int, hi: int, tick=lambda n: None) -> int:
    """Write output rows lo..hi: for each block of ids, each chunk's nodes in it are one slice
    of its sorted node list, so the block is filled from K slices. Returns bytes written."""
    scratch = job.scratch
    layers = sorted({s.layer for s in specs})
    sources = {l: LayerRows(scratch, l) for l in layers}
    num_nodes = int(g.store.manifest["num_nodes"])
    outs = {s.name: OutputArray(scratch / s.file, s, num_nodes) for s in specs}
    try:
        for blo in range(lo, hi, job.block_rows):
            bhi = min(hi, blo + job.block_rows)
            bufs = {l: np.empty((bhi - blo, widths[l - 1]), dtype=np.float32) for l in layers}
            for c in range(g.store.num_chunks):
                nodes = g.array(c, "nodes.npy")
                i, j = int(np.searchsorted(nodes, blo)), int(np.searchsorted(nodes, bhi))
                at = np.asarray(nodes[i:j], dtype=np.int64) - blo
                for l in layers:
                    bufs[l][at] = sources[l].rows(c)[i:j]
            for s in specs:
                outs[s.name].write(blo, s.derive(bufs[s.layer]))
            g.release()
            for src in sources.values():
                src.release()
            tick(bhi - blo)
    finally:
        for o in outs.values():
            o.close()
    return sum(o.bytes for o in outs.values())
