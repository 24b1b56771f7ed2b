"""The link split: which edges carry messages and which ones the model is asked to predict.

Made once, when the store is prepared (`task: link-prediction`), with PyG `RandomLinkSplit`'s
semantics, out of core (data/link/: the graph is never held in memory):

- The candidate edges are the graph's distinct edges without self-loops. A graph is undirected
  when every edge's reverse is present too; then each undirected edge {u, v} is one candidate,
  written (min, max), and both of its directions go wherever it goes. The distinct edges come
  from an external sort in ranges (link/edge_keys.py, on the store's spill files).
- A seeded order of the candidates (a keyed hash, link/ranking.py) is cut as RandomLinkSplit cuts
  its permutation: n_val = int(valFraction * m) validation edges, n_test = int(testFraction * m)
  test edges, the other m - n_val - n_test training edges. The choice depends on the seed and
  the graph only, never on block sizes, memory or process counts. Each file lists its edges in
  ascending (source, destination) order (directed: by (min, max, direction)).
- Message passing uses the training edges only (both directions when undirected): the store
  reads them from train.npy (link/message.py), so a validation or test edge never reaches the
  chunk store's CSR and no layer can see the edge it is asked to score. Training and evaluation
  run on that same graph (RandomLinkSplit's test graph also adds the validation edges; we do not).

The evaluation's negatives are drawn here too, seeded, and kept in the store (link/negatives.py):
`<split>_neg.npy` [E, k] (k = link.evalNegatives corrupted destinations per positive, uniform
over all nodes: ogbl-citation2's protocol for MRR) and `<split>_shared_neg.npy` [2, N] (one set of
N = link.sharedNegatives pairs, uniform, not an edge of the graph in either split: ogbl-collab's
protocol for Hits@K, and what AUC is measured against).

Files, in `<storeDir>/link/`: `train.npy`, `val.npy`, `test.npy` [2, E] int64 global ids, and the
negatives above; `manifest.json`'s "link" entry records their shapes and the sha256 of their
data (models.model_file.store_fingerprint covers them). Working memory is O(prepare.blockEdges)
for the seeded split; a given split (edge files) is held in memory as its files are. Torch-free.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from grappa.data.errors import ChunkStoreError, DatasetError
from grappa.data.link.columns import ColumnsWriter
from grappa.data.link.edge_check import check_edges
from grappa.data.link.edge_keys import Count, EdgeKeys, edge_keys, record_keys
from grappa.data.link.message import TrainEdgesSource
from grappa.data.link.negatives import eval_negatives, shared_negatives, write_eval_negatives
from grappa.data.link.ranking import TEST, TRAIN, VAL, assign, find_cuts
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, GraphSource
from grappa.data.sources.in_memory import MemoryEdges
from grappa.data.store.manifest import LINK_DIR
from grappa.data.store.prepare_progress import PhaseBar
from grappa.util.npy import load_npy, map_npy

SUPERVISION = ("train", "val", "test")
EVALUATED = ("val", "test")
DEFAULT_BLOCK = 1 << 22  # edges per block when no prepare.blockEdges is given (split_edges)


@dataclass
class LinkSplit:
    message: np.ndarray  # [2, M] int64: the message-passing edges (what the store holds)
    train: np.ndarray    # [2, E_train] int64 supervision edges
    val: np.ndarray
    test: np.ndarray
    undirected: bool


def _keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    return src.astype(np.int64) * np.int64(n) + dst.astype(np.int64)


class _EdgeList(GraphSource):
    """Edges in memory as a source (split_edges)."""

    def __init__(self, edge_index: np.ndarray, num_nodes: int) -> None:
        self.name, self.num_nodes, self.num_features = "edge_index", int(num_nodes), 0
        self.edge_index = np.asarray(edge_index, dtype=np.int64)
        self.num_edges, self.add_inverse_edges = int(self.edge_index.shape[1]), False

    def edge_parts(self, parts: int):
        return [MemoryEdges(self.edge_index[0], self.edge_index[1])]

    def node_blocks(self, block_rows: int):
        return iter(())


def split_edges(edge_index: np.ndarray, num_nodes: int, val_fraction: float, test_fraction: float,
                seed: int, block_edges: int = DEFAULT_BLOCK) -> LinkSplit:
    """The seeded split of `edge_index` [2, E] (any order, duplicates allowed), in memory: what
    the store's prepare writes for the same graph and seed."""
    with tempfile.TemporaryDirectory(prefix="grappa-split-") as tmp:
        keys = edge_keys(_EdgeList(edge_index, num_nodes), Path(tmp) / "keys", block_edges)
        _split_files(keys, val_fraction, test_fraction, seed, Path(tmp), block_edges)
        train, val, test = (load_npy(Path(tmp) / f"{s}.npy") for s in SUPERVISION)
    message = np.concatenate([train, train[::-1]], axis=1) if keys.undirected else train
    return LinkSplit(message, train, val, test, keys.undirected)


def _split_files(keys: EdgeKeys, val_fraction: float, test_fraction: float, seed: int, out: Path,
                 block: int) -> dict[str, tuple[list[int], str]]:
    """train.npy, val.npy, test.npy of the candidates in `keys`, written block by block into
    `out`; their shapes and data sha256 by stem."""
    m = keys.candidates_count
    n_val, n_test = int(val_fraction * m), int(test_fraction * m)
    if m - n_val - n_test < 1:
        raise DatasetError(f"the graph has {m} candidate edges: link.valFraction and "
                           "link.testFraction leave none for training; lower them")
    cuts = find_cuts(keys.candidates(block), keys.candidates(block), (n_val, n_val + n_test), seed)
    sizes = {TRAIN: m - n_val - n_test, VAL: n_val, TEST: n_test}
    writers = {code: ColumnsWriter(out / f"{SUPERVISION[code]}.npy", sizes[code]) for code in (TRAIN, VAL, TEST)}
    for ids in keys.candidates(block):
        label = assign(ids, cuts, seed)
        src, dst = keys.edges_of(ids)
        for code, w in writers.items():
            sel = label == code
            if sel.any():
                w.append(src[sel], dst[sel])
    return {SUPERVISION[code]: w.close() for code, w in writers.items()}


# -- the store's link files ------------------------------------------------------------------

def _saved(out: Path, stem: str, arr: np.ndarray) -> tuple[list[int], str]:
    """An in-memory array written as `out/<stem>.npy`: its shape and data sha256."""
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    np.save(out / f"{stem}.npy", arr)
    return list(arr.shape), hashlib.sha256(arr).hexdigest()  # of the data: part of the store's fingerprint


def _entry(files: dict[str, tuple[list[int], str]], undirected: bool, overlap_checked: bool,
           **counts: int) -> dict:
    """The manifest's "link" entry of the written files (`counts`: what the split counted)."""
    return {"link": {"undirected": undirected, **({} if overlap_checked else {"splits_may_overlap": True}),
                     **counts,
                     "files": {stem: shape for stem, (shape, _) in files.items()},
                     "sha256": {stem: sha for stem, (_, sha) in files.items()}}}


@dataclass
class GivenSplit:
    """Supervision edges (and, optionally, evaluation negatives) a dataset brings instead of the
    seeded split: the arrays format's edge files, OGB's own link split."""
    edges: dict[str, np.ndarray]      # "train", "val", "test" -> [2, E]
    negatives: dict[str, np.ndarray]  # optional "<split>_neg" [E, k], "<split>_shared_neg" [2, N]
    files: dict[str, str]             # each of the above -> the file it came from (errors)
    where: str                        # the folder they are in (errors)
    held_out_in_graph: bool = True    # the graph's edge list may hold val/test edges: removed
    check_overlap: bool = True        # refuse an edge in two splits (a user's files; not OGB's own)


def _canonical_keys(e: np.ndarray, n: int, undirected: bool) -> np.ndarray:
    src, dst = np.asarray(e[0], np.int64), np.asarray(e[1], np.int64)
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return _keys(src, dst, n)


class HeldOutPart:
    """An edge part without the held-out edges (sorted canonical keys), block by block."""

    def __init__(self, part, held: np.ndarray, n: int, undirected: bool) -> None:
        self.part, self.held, self.n, self.undirected = part, held, n, undirected
        self.num_edges = part.num_edges  # an upper bound: what the part lists

    def blocks(self, block_edges: int):
        from grappa.data.sources.base import EdgeBlock
        for b in self.part.blocks(block_edges):
            key = _canonical_keys(np.stack([np.asarray(b.src), np.asarray(b.dst)]), self.n, self.undirected)
            pos = np.clip(np.searchsorted(self.held, key), 0, max(0, self.held.size - 1))
            keep = ~(self.held[pos] == key) if self.held.size else np.ones(key.size, bool)
            yield EdgeBlock(b.src[keep], b.dst[keep], b.origin, b.first_row)


# What a wrapping source passes on of the source it wraps (writer.prepare and the passes read them).
SOURCE_ATTRS = ("name", "num_nodes", "num_features", "num_edges", "add_inverse_edges", "num_classes",
                "labels_required", "labeller", "in_memory", "feature_origin", "label_origin",
                "split_origin", "num_classes_setting")


class HeldOutSource(GraphSource):
    """A streamed source without its held-out edges, filtered as it streams. At module level: the
    store's worker processes are sent it (with the held-out keys, not the edge list)."""

    def __init__(self, source: GraphSource, held: np.ndarray, undirected: bool, num_edges: int) -> None:
        for attr in SOURCE_ATTRS:
            setattr(self, attr, getattr(source, attr))
        self.source, self.held, self.undirected = source, held, undirected
        self.num_edges = num_edges  # what it lists now

    def edge_parts(self, parts: int):
        return [HeldOutPart(p, self.held, int(self.num_nodes), self.undirected)
                for p in self.source.edge_parts(parts)]

    def node_blocks(self, block_rows: int):
        return self.source.node_blocks(block_rows)


def without_held_out(source, held: np.ndarray, undirected: bool, kept: int):
    """The source with the held-out edges (sorted canonical keys) removed from its edge list,
    `kept` edges left: an in-memory source cut in memory, a streamed one filtered as it streams."""
    from grappa.data.sources.in_memory import MemorySource
    n = int(source.num_nodes)
    if isinstance(source, MemorySource):
        keep = ~np.isin(_canonical_keys(source.edge_index, n, undirected), held)
        masks = tuple(source.codes == c for c in (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST))
        return MemorySource(source.name, np.asarray(source.edge_index)[:, keep], source.x, source.y, masks,
                            source.num_classes)
    return HeldOutSource(source, held, undirected, kept)


def _given_files(given: GivenSplit, keys: EdgeKeys, out: Path, lk, block: int) -> dict[str, tuple[list[int], str]]:
    """The link files of a given split: its edges, its negatives, and the negatives it lacks
    drawn as for the seeded split. Shapes and ids checked naming the file and the fix."""
    n, undirected = keys.num_nodes, keys.undirected
    named = {given.files[s]: np.asarray(given.edges[s], dtype=np.int64) for s in SUPERVISION}
    check_edges(named, n, undirected, given.where, overlap=given.check_overlap)
    edges = {s: np.asarray(given.edges[s], dtype=np.int64) for s in SUPERVISION}
    files = {s: _saved(out, s, edges[s]) for s in SUPERVISION}
    extra = np.sort(np.concatenate([record_keys(edges[s][0], edges[s][1], n) for s in SUPERVISION]))
    for s in EVALUATED:
        neg, shared = given.negatives.get(f"{s}_neg"), given.negatives.get(f"{s}_shared_neg")
        count = edges[s].shape[1]
        if neg is not None:
            neg = np.asarray(neg, dtype=np.int64)
            file = f"{given.where}/{given.files[f'{s}_neg']}"
            if neg.ndim != 2 or neg.shape[0] != count:
                raise DatasetError(f"{file}: expected [{count}, k], k negative destinations for "
                                   f"each of the {count} {s} edges, found shape {list(neg.shape)}: "
                                   "write row i for edge i, or remove the file to draw them")
            _check_ids(neg, n, file, "row")
        else:
            neg = eval_negatives(count, n, lk.eval_negatives, lk.split_seed, s)
        if shared is not None:
            shared = np.asarray(shared, dtype=np.int64)
            file = f"{given.where}/{given.files[f'{s}_shared_neg']}"
            if shared.ndim != 2 or shared.shape[0] != 2 or shared.shape[1] < 1:
                raise DatasetError(f"{file}: expected [2, N] negative pairs (sources in row 0), found shape "
                                   f"{list(shared.shape)}: write them so, or remove the file to draw them")
            _check_ids(shared, n, file, "column")
        else:
            shared = shared_negatives(keys, lk.shared_negatives, lk.split_seed, s, block, extra,
                                      extra.size * (2 if undirected else 1))
        files[f"{s}_neg"] = _saved(out, f"{s}_neg", neg)
        files[f"{s}_shared_neg"] = _saved(out, f"{s}_shared_neg", shared)
    return files


def _check_ids(a: np.ndarray, n: int, file: str, unit: str) -> None:
    bad = np.argwhere((a < 0) | (a >= n))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        at = r if unit == "row" else c
        raise DatasetError(f"{file}: {unit} {at} holds node id {int(a[r, c])}, outside [0, {n}); fix or "
                           "remove it (ids are the graph's node ids)")


def split_source(source, lk, given: Optional[GivenSplit], staging: Path, work: Path,
                 block_edges: int, progress: bool = False) -> tuple[object, dict]:
    """Write the link files into `staging/link/`; returns the source with its val/test edges
    removed from message passing and the manifest's "link" entry. The split is the seeded one
    of the graph's edges, or `given` (the dataset's own files). `work`: temporary files;
    `block_edges` (prepare.blockEdges) bounds the memory, as it does the store's passes;
    `progress`: a bar over the edges read (the split's longest part)."""
    out = Path(staging) / LINK_DIR
    out.mkdir(parents=True, exist_ok=True)
    work = Path(work) / "link-split"
    count = Count()
    try:
        with PhaseBar("prepare: link split", int(source.num_edges), count, progress):
            if given is None:
                return _seeded(source, lk, out, work, block_edges, count)
            return _given(source, lk, given, out, work, block_edges, count)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _seeded(source, lk, out: Path, work: Path, block: int, count: Count) -> tuple[object, dict]:
    keys = edge_keys(source, work, block, count=count)
    files = _split_files(keys, lk.val_fraction, lk.test_fraction, lk.split_seed, out, block)
    n = keys.num_nodes
    for s in EVALUATED:
        files[f"{s}_neg"] = write_eval_negatives(out / f"{s}_neg.npy", files[s][0][1], n, lk.eval_negatives,
                                                 lk.split_seed, s, block)
        files[f"{s}_shared_neg"] = _saved(out, f"{s}_shared_neg",
                                          shared_negatives(keys, lk.shared_negatives, lk.split_seed, s, block))
    return TrainEdgesSource(source, out / "train.npy", keys.undirected, SOURCE_ATTRS), \
        _entry(files, keys.undirected, overlap_checked=True, listed_edges=keys.listed,
               candidates=keys.candidates_count)


def _given(source, lk, given: GivenSplit, out: Path, work: Path, block: int,
           count: Count) -> tuple[object, dict]:
    n = int(source.num_nodes)
    named = {given.files[s]: np.asarray(given.edges[s], dtype=np.int64) for s in SUPERVISION}
    check_edges(named, n, True, given.where, overlap=False)  # shapes and ids before the graph is read
    held = None
    if given.held_out_in_graph:
        ev = [np.asarray(given.edges[s], dtype=np.int64) for s in EVALUATED]
        held = {u: np.unique(np.concatenate([_canonical_keys(e, n, u) for e in ev])) for u in (True, False)}
    keys = edge_keys(source, work, block, held, count)
    undirected = keys.undirected
    files = _given_files(given, keys, out, lk, block)
    if held is not None:
        source = without_held_out(source, held[undirected], undirected,
                                  keys.listed - keys.held_hits[undirected])
    return source, _entry(files, undirected, overlap_checked=given.check_overlap)


class LinkSplitSource(GraphSource):
    """A source whose link split is made when the store's prepare stages it (GraphSource.stage):
    after the source's own stage, since a graph from tables has its edges in dense ids only once
    its id map is built there. The val/test edges then leave message passing, the link files are
    written into the staging folder and their manifest entry is returned with the source's own.
    Until then it reports the wrapped source's metadata; its passes read the split source."""

    def __init__(self, source: GraphSource, lk, given: Optional[GivenSplit] = None,
                 progress: bool = False) -> None:
        self.source, self.lk, self.given, self.progress = source, lk, given, progress
        self._take(source)

    def _take(self, source: GraphSource) -> None:
        for attr in SOURCE_ATTRS:
            setattr(self, attr, getattr(source, attr))

    def stage(self, staging: Path, work: Path, block_edges: int) -> dict:
        staged = self.source.stage(staging, work, block_edges)
        self.source, entry = split_source(self.source, self.lk, self.given, staging, work, block_edges,
                                          self.progress)
        self.given = None  # its arrays are in the link files now: never sent to the worker processes
        self._take(self.source)
        return {**staged, **entry}

    def edge_parts(self, parts: int):
        return self.source.edge_parts(parts)

    def node_blocks(self, block_rows: int):
        return self.source.node_blocks(block_rows)


def link_source(source, lk, given: Optional[GivenSplit] = None, progress: bool = False) -> LinkSplitSource:
    """The source for a link-prediction store: split when the store's prepare stages it."""
    return LinkSplitSource(source, lk, given, progress)


class LinkEdges:
    """The store's link files as memory maps, checked against the manifest and each other."""

    def __init__(self, store_path: Path, manifest: dict) -> None:
        entry = manifest.get("link")
        folder = Path(store_path) / LINK_DIR
        if not entry:
            raise ChunkStoreError(f"the chunk store {store_path} was prepared for node "
                                  "classification (no link split): give task: link-prediction its "
                                  "own storeDir, or delete the store to prepare it again")
        self.undirected = bool(entry["undirected"])
        self.arrays: dict[str, np.ndarray] = {}
        for stem, shape in entry["files"].items():
            path = folder / f"{stem}.npy"
            try:
                arr = map_npy(path)
            except (OSError, ValueError) as err:
                raise ChunkStoreError(f"{path} cannot be read ({err}); delete {store_path} and "
                                      "prepare it again") from None
            if list(arr.shape) != list(shape):
                raise ChunkStoreError(f"{path} has shape {list(arr.shape)}, the manifest says "
                                      f"{shape}; delete {store_path} and prepare it again")
            self.arrays[stem] = arr
        check_edges({s: self.arrays[s] for s in SUPERVISION},
                    int(manifest["num_nodes"]), self.undirected, str(folder),
                    overlap=not entry.get("splits_may_overlap"))

    def __getitem__(self, stem: str) -> np.ndarray:
        return self.arrays[stem]

    def scored_by(self, split: str, worker: int, workers: int) -> np.ndarray:
        """The positives (columns of `split`) a worker scores in evaluation: every P-th from its
        index, so each is scored once and the work is even."""
        return np.arange(worker, self.arrays[split].shape[1], workers)


def supervision_in(edges: np.ndarray, global_ids: np.ndarray, num_base: int, num_owned: int,
                   chunk_of: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> np.ndarray:
    """[2, E_local] local ids of the edges a worker trains on in a round: its destination in the
    worker's base chunks, its source owned (base or variable chunk). Each edge thus belongs to
    one worker (its destination's base owner), and a round whose variable chunk holds the source
    exposes it there. `global_ids`: the local graph's local -> global ids."""
    owned = np.asarray(global_ids[:num_owned], dtype=np.int64)
    if owned.size == 0:
        return np.empty((2, 0), dtype=np.int64)
    order = np.argsort(owned, kind="stable")
    sorted_ids = owned[order]
    out = []
    for lo in range(0, edges.shape[1], 1 << 20):
        e = np.asarray(edges[:, lo:lo + (1 << 20)], dtype=np.int64)
        loc = []
        for row in e:
            pos = np.clip(np.searchsorted(sorted_ids, row), 0, sorted_ids.size - 1)
            found = sorted_ids[pos] == row
            loc.append((np.where(found, order[pos], -1), found))
        (s, s_ok), (d, d_ok) = loc
        keep = s_ok & d_ok & (d < num_base)
        out.append(np.stack([s[keep], d[keep]]))
    return np.concatenate(out, axis=1) if out else np.empty((2, 0), dtype=np.int64)
