"""OGB node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M) and link-property
datasets (ogbl-collab, ogbl-citation2) in OGB's own layout, read in bounded memory, with OGB's
per-dataset semantics (the facts of ogb 1.3.6's master.csv).

    <root>/ogbn_arxiv/RELEASE_v1.txt                 written by OGB with every download
    <root>/ogbn_arxiv/raw/num-node-list.csv.gz       one line: n (node datasets hold one graph)
    <root>/ogbn_arxiv/raw/num-edge-list.csv.gz       one line: E
    <root>/ogbn_arxiv/raw/edge.csv.gz                E lines "src,dst"
    <root>/ogbn_arxiv/raw/node-feat.csv.gz           n lines of f floats
    <root>/ogbn_arxiv/raw/node-label.csv.gz          n lines, one integer
    <root>/ogbn_arxiv/split/time/{train,valid,test}.csv.gz   node ids, one per line
    binary variant (papers100M): raw/data.npz (edge_index [2, E], num_nodes_list, num_edges_list,
    node_feat [n, f]) and raw/node-label.npz (node_label [n, 1], NaN = unlabelled)

Link datasets have no node-label file; raw/edge.csv.gz holds the training graph only, and the
supervision edges are OGB's split, torch-saved dicts of arrays (read with torch, as OGB does):

    <root>/ogbl_collab/split/time/train.pt      {"edge": [E, 2], "weight", "year"}
    <root>/ogbl_collab/split/time/{valid,test}.pt   ... and "edge_neg": [N, 2] (Hits@50's shared negatives)
    <root>/ogbl_citation2/split/time/train.pt   {"source_node": [E], "target_node": [E]}
    <root>/ogbl_citation2/split/time/{valid,test}.pt  ... and "target_node_neg": [E, 1000] (MRR's)

The split is taken as published (a collab pair may collaborate in two years: in two splits);
negatives OGB does not give (collab's per-positive ones, citation2's shared ones) are drawn as for
the seeded split (data/link_split.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.data.sources.base import (
    SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, EdgeBlock, EdgePart, GraphSource, NodeBlock
)
from grappa.data.sources.npyio import MemberStream, csv_blocks, npz_header
from grappa.data.sources.split_files import SplitIndex


@dataclass(frozen=True)
class OgbMeta:
    download_name: str       # folder inside the zip
    num_classes: int
    add_inverse_edge: bool   # OGB's own choice for this dataset
    split: str               # split/<split>/
    binary: bool             # raw/data.npz instead of CSV
    version: int = 1
    kind: str = "nodeproppred"  # or linkproppred

    @property
    def url(self) -> str:
        return f"http://snap.stanford.edu/ogb/data/{self.kind}/{self.download_name}.zip"

    @property
    def link(self) -> bool:
        return self.kind == "linkproppred"


OGB_META = {
    "ogbn-arxiv": OgbMeta("arxiv", 40, False, "time", False),
    "ogbn-products": OgbMeta("products", 47, True, "sales_ranking", False),
    "ogbn-papers100M": OgbMeta("papers100M-bin", 172, False, "time", True),
    "ogbl-collab": OgbMeta("collab", 0, True, "time", False, kind="linkproppred"),
    "ogbl-citation2": OgbMeta("citation-v2", 0, False, "time", False, kind="linkproppred"),
}
LINK_SPLIT_FILES = (("train", "train.pt"), ("val", "valid.pt"), ("test", "test.pt"))
SPLIT_FILES = ((SPLIT_TRAIN, "train"), (SPLIT_VAL, "valid"), (SPLIT_TEST, "test"))


def dataset_dir(root: Path, name: str) -> Path:
    """OGB's folder name: ogbn-arxiv -> ogbn_arxiv."""
    return root / name.replace("-", "_")


class RowStream:
    """Rows of a sequence of blocks, handed out `take(m)` at a time (aligns two files' blocks)."""

    def __init__(self, blocks: Iterator[np.ndarray], origin: str) -> None:
        self._blocks, self._origin = blocks, origin
        self._buf: list[np.ndarray] = []
        self._have = 0

    def take(self, m: int) -> np.ndarray:
        while self._have < m:
            nxt = next(self._blocks, None)
            if nxt is None:
                raise DatasetError(f"{self._origin} has fewer rows than the graph has nodes")
            self._buf.append(nxt)
            self._have += nxt.shape[0]
        whole = np.concatenate(self._buf) if len(self._buf) > 1 else self._buf[0]
        out, rest = whole[:m], whole[m:]
        self._buf, self._have = ([rest] if rest.shape[0] else []), rest.shape[0]
        return out


class CsvEdges(EdgePart):
    def __init__(self, path: Path, num_edges: int) -> None:
        self.path, self.num_edges = path, num_edges

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        for row, arr in csv_blocks(self.path, np.int64, 2, block_bytes=min(1 << 26, block_edges * 16)):
            yield EdgeBlock(arr[:, 0], arr[:, 1], str(self.path), row)


class NpzEdges(EdgePart):
    """edge_index [2, E] of data.npz: two forward streams, one per row."""

    def __init__(self, path: Path, num_edges: int) -> None:
        self.path, self.num_edges = path, num_edges

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        with MemberStream(self.path, "edge_index") as src, \
                MemberStream(self.path, "edge_index", skip_items=self.num_edges) as dst:
            for first in range(0, self.num_edges, block_edges):
                m = min(block_edges, self.num_edges - first)
                yield EdgeBlock(src.take(m), dst.take(m), f"{self.path}:edge_index", first)


def _single_value(path: Path, what: str) -> int:
    rows = np.concatenate([a for _, a in csv_blocks(path, np.int64, 1)]).reshape(-1)
    if rows.size != 1:
        raise DatasetError(f"{path} lists {rows.size} graphs; an OGB node dataset has one {what} count")
    return int(rows[0])


class OgbSource(GraphSource):
    def __init__(self, name: str, root: Path, add_inverse_edges: Optional[bool]) -> None:
        self.meta = OGB_META[name]
        self.name = name
        self.dir = dataset_dir(root, name)
        self.raw = self.dir / "raw"
        release = self.dir / f"RELEASE_v{self.meta.version}.txt"
        if not release.is_file():
            raise DatasetError(
                f"{release} is missing: {self.dir} is not a complete OGB download of {name} "
                f"(version {self.meta.version}). Fix: delete it and set dataset.download: true, or "
                f"unzip {self.meta.url} into {root} and rename the folder to {self.dir.name}")
        self.num_classes = self.meta.num_classes or None
        self.add_inverse_edges = self.meta.add_inverse_edge if add_inverse_edges is None else add_inverse_edges
        if self.meta.binary:
            self._open_binary()
        else:
            self._open_csv()
        self.splits = SplitIndex(self.num_nodes) if self.meta.link else self._splits()
        self.split_origin = self.splits.origins

    def _open_csv(self) -> None:
        self.num_nodes = _single_value(self.raw / "num-node-list.csv.gz", "node")
        self.num_edges = _single_value(self.raw / "num-edge-list.csv.gz", "edge")
        for f in ("edge.csv.gz", "node-feat.csv.gz") + (() if self.meta.link else ("node-label.csv.gz",)):
            if not (self.raw / f).is_file():
                raise DatasetError(f"{self.raw / f} is missing; download {self.name} again")
        first = next(csv_blocks(self.raw / "node-feat.csv.gz", np.float32, None, block_bytes=1 << 16))[1]
        self.num_features = first.shape[1]
        self.feature_origin = str(self.raw / "node-feat.csv.gz")
        self.label_origin = str(self.raw / "node-label.csv.gz")
        if self.meta.link:
            self.labels_required = False  # a link dataset's labels are its split's edges

    def _open_binary(self) -> None:
        data = self.raw / "data.npz"
        with MemberStream(data, "num_nodes_list") as s:
            nodes = s.take(s.header.rows)
        with MemberStream(data, "num_edges_list") as s:
            edges = s.take(s.header.rows)
        if nodes.size != 1 or edges.size != 1:
            raise DatasetError(f"{data} lists {nodes.size} graphs; an OGB node dataset has one")
        self.num_nodes, self.num_edges = int(nodes[0]), int(edges[0])
        ei, x = npz_header(data, "edge_index"), npz_header(data, "node_feat")
        if ei.shape != (2, self.num_edges) or ei.fortran_order:
            raise DatasetError(f"{ei.origin} has shape {ei.shape}; expected (2, {self.num_edges}) in C order")
        if len(x.shape) != 2 or x.rows != self.num_nodes:
            raise DatasetError(f"{x.origin} has shape {x.shape}; expected ({self.num_nodes}, f)")
        y = npz_header(self.raw / "node-label.npz", "node_label")
        if y.rows != self.num_nodes or y.row_items != 1:
            raise DatasetError(f"{y.origin} has shape {y.shape}; expected ({self.num_nodes}, 1)")
        self.num_features = x.shape[1]
        self.feature_origin, self.label_origin = x.origin, y.origin

    def _splits(self) -> SplitIndex:
        folder = self.dir / "split" / self.meta.split
        splits = SplitIndex(self.num_nodes)
        csvs = [folder / f"{f}.csv.gz" for _, f in SPLIT_FILES]
        if all(p.is_file() for p in csvs):
            for (code, _), path in zip(SPLIT_FILES, csvs):
                ids = np.concatenate([a for _, a in csv_blocks(path, np.int64, 1)] or [np.empty((0, 1), np.int64)])
                splits.add_indices(code, ids.reshape(-1), str(path))
            return splits
        pt = folder / "split_dict.pt"
        if pt.is_file():  # ogb >= 1.2.3 may ship the split as a pickled dict of arrays
            import torch
            d = torch.load(pt, weights_only=False)  # OGB's own file, same trust as the download
            for code, key in SPLIT_FILES:
                splits.add_indices(code, np.asarray(d[key]).reshape(-1), f"{pt}[{key}]")
            return splits
        raise DatasetError(f"{folder} has no split ({', '.join(p.name for p in csvs)} or "
                           f"split_dict.pt); download {self.name} again")

    def link_split(self):
        """OGB's own link split (module docstring); None for a node dataset."""
        if not self.meta.link:
            return None
        import torch

        from grappa.data.link_split import GivenSplit
        folder = self.dir / "split" / self.meta.split
        edges, negatives, files = {}, {}, {}
        for split, name in LINK_SPLIT_FILES:
            path = folder / name
            if not path.is_file():
                raise DatasetError(f"{path} is missing: {self.dir} is not a complete download of {self.name}; "
                                   "delete it and set dataset.download: true")
            d = torch.load(path, weights_only=False)  # OGB's own file, same trust as the download
            try:
                if "edge" in d:  # ogbl-collab
                    edges[split] = np.asarray(d["edge"], dtype=np.int64).reshape(-1, 2).T
                    if "edge_neg" in d:
                        negatives[f"{split}_shared_neg"] = np.asarray(d["edge_neg"], dtype=np.int64).reshape(-1, 2).T
                        files[f"{split}_shared_neg"] = f"{name}[edge_neg]"
                else:  # ogbl-citation2
                    edges[split] = np.stack([np.asarray(d["source_node"], dtype=np.int64).reshape(-1),
                                             np.asarray(d["target_node"], dtype=np.int64).reshape(-1)])
                    if "target_node_neg" in d:
                        negatives[f"{split}_neg"] = np.asarray(d["target_node_neg"], dtype=np.int64)
                        files[f"{split}_neg"] = f"{name}[target_node_neg]"
            except (KeyError, TypeError, ValueError) as err:
                raise DatasetError(f"{path} is not an OGB link split ({err!r}): download {self.name} again") from None
            files[split] = name
        return GivenSplit(edges=edges, negatives=negatives, files=files, where=str(folder),
                          held_out_in_graph=False, check_overlap=False)

    def edge_parts(self, parts: int) -> list[EdgePart]:
        if self.meta.binary:
            return [NpzEdges(self.raw / "data.npz", self.num_edges)]
        return [CsvEdges(self.raw / "edge.csv.gz", self.num_edges)]

    def _feature_rows(self, block_rows: int) -> tuple[RowStream, RowStream]:
        if self.meta.binary:
            x_stream = MemberStream(self.raw / "data.npz", "node_feat")
            y_stream = MemberStream(self.raw / "node-label.npz", "node_label")
            f = self.num_features

            def x_blocks():
                with x_stream:
                    for lo in range(0, self.num_nodes, block_rows):
                        yield x_stream.take(min(block_rows, self.num_nodes - lo) * f).reshape(-1, f)

            def y_blocks():
                with y_stream:
                    for lo in range(0, self.num_nodes, block_rows):
                        yield y_stream.take(min(block_rows, self.num_nodes - lo))
            return RowStream(x_blocks(), self.feature_origin), RowStream(y_blocks(), self.label_origin)
        x_csv = (a for _, a in csv_blocks(self.raw / "node-feat.csv.gz", np.float32, self.num_features))
        if self.meta.link:  # no node labels: every node unlabelled
            y_csv = (np.full((min(block_rows, self.num_nodes - lo), 1), np.nan)
                     for lo in range(0, self.num_nodes, block_rows))
            return RowStream(x_csv, self.feature_origin), RowStream(y_csv, self.label_origin)
        y_csv = (a for _, a in csv_blocks(self.raw / "node-label.csv.gz", np.float64, 1))
        return RowStream(x_csv, self.feature_origin), RowStream(y_csv, self.label_origin)

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        xs, ys = self._feature_rows(block_rows)
        for lo in range(0, self.num_nodes, block_rows):
            hi = min(lo + block_rows, self.num_nodes)
            x = xs.take(hi - lo)
            raw_y = ys.take(hi - lo).reshape(-1).astype(np.float64)
            y = np.where(np.isnan(raw_y), -1, raw_y).astype(np.int64)  # NaN = unlabelled
            yield NodeBlock(lo, np.ascontiguousarray(x, dtype=np.float32), y, self.splits.codes(lo, hi))
