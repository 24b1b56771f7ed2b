"""The link split: which edges carry messages and which ones the model is asked to predict.

Made once, when the store is prepared (`task: link-prediction`), with PyG `RandomLinkSplit`'s
semantics:

- The candidate edges are the graph's distinct edges without self-loops. A graph is undirected
  when every edge's reverse is present too; then each undirected edge {u, v} is one candidate,
  written (min, max), and both of its directions go wherever it goes.
- A seeded permutation of the candidates cuts them in order: the first m - n_val - n_test are
  training edges, the next n_val = int(valFraction * m) validation edges, the last
  n_test = int(testFraction * m) test edges (RandomLinkSplit's order and rounding).
- Message passing uses the training edges only (both directions when undirected): a validation
  or test edge never reaches the chunk store's CSR, so no layer can see the edge it is asked to
  score. Training and evaluation run on that same graph (RandomLinkSplit's test graph also adds
  the validation edges; we do not).

The evaluation's negatives are drawn here too, seeded, and kept in the store:
`<split>_neg.npy` [E, k] (k = link.evalNegatives corrupted destinations per positive, uniform
over all nodes: ogbl-citation2's protocol for MRR) and `<split>_shared_neg.npy` [2, N] (one set of
N = link.sharedNegatives pairs, uniform, not an edge of the graph in either split: ogbl-collab's
protocol for Hits@K, and what AUC is measured against).

Files, in `<storeDir>/link/`: `train.npy`, `val.npy`, `test.npy` [2, E] int64 global ids, and the
negatives above; `manifest.json`'s "link" entry records their shapes and the sha256 of their
data (models.model_file.store_fingerprint covers them). Torch-free.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from grappa.data.errors import ChunkStoreError, DatasetError
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, GraphSource
from grappa.data.store.manifest import LINK_DIR
from grappa.util.npy import map_npy

SUPERVISION = ("train", "val", "test")
EVALUATED = ("val", "test")
_NEG_STREAM, _SHARED_STREAM = 1, 2  # seed streams of the negatives, apart from the split's (0)


@dataclass
class LinkSplit:
    message: np.ndarray  # [2, M] int64: the message-passing edges (what the store holds)
    train: np.ndarray    # [2, E_train] int64 supervision edges
    val: np.ndarray
    test: np.ndarray
    undirected: bool


def _keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    return src.astype(np.int64) * np.int64(n) + dst.astype(np.int64)


def is_undirected(edge_index: np.ndarray, num_nodes: int) -> bool:
    """Every edge's reverse is present (self-loops aside)."""
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    fwd = np.unique(_keys(src[keep], dst[keep], num_nodes))
    rev = np.unique(_keys(dst[keep], src[keep], num_nodes))
    return fwd.size == rev.size and bool(np.array_equal(fwd, rev))


def split_edges(edge_index: np.ndarray, num_nodes: int, val_fraction: float, test_fraction: float,
                seed: int) -> LinkSplit:
    """The seeded split of `edge_index` [2, E] (any order, duplicates allowed)."""
    n = int(num_nodes)
    src, dst = np.asarray(edge_index[0], dtype=np.int64), np.asarray(edge_index[1], dtype=np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    undirected = is_undirected(np.stack([src, dst]), n)
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    keys = np.unique(_keys(src, dst, n))  # sorted distinct candidates: the order is the graph's
    m = keys.size
    n_val, n_test = int(val_fraction * m), int(test_fraction * m)
    if m - n_val - n_test < 1:
        raise DatasetError(f"the graph has {m} candidate edges: link.valFraction and "
                           "link.testFraction leave none for training; lower them")
    perm = np.random.default_rng([seed, 0]).permutation(m)
    cand = np.stack([keys // n, keys % n])
    n_train = m - n_val - n_test
    train = cand[:, np.sort(perm[:n_train])]
    val = cand[:, perm[n_train:n_train + n_val]]
    test = cand[:, perm[n_train + n_val:]]
    message = np.concatenate([train, train[::-1]], axis=1) if undirected else train
    return LinkSplit(message, train, val, test, undirected)


def eval_negatives(pos: np.ndarray, num_nodes: int, k: int, seed: int, split: str) -> np.ndarray:
    """[E, k] corrupted destinations per positive, uniform over all nodes (ogbl-citation2)."""
    rng = np.random.default_rng([seed, _NEG_STREAM, SUPERVISION.index(split)])
    return rng.integers(0, num_nodes, size=(pos.shape[1], k), dtype=np.int64)


def shared_negatives(edge_index: np.ndarray, num_nodes: int, count: int, seed: int,
                     split: str, undirected: bool) -> np.ndarray:
    """[2, count] uniform pairs (u != v) that are no edge of the whole graph (any split; either
    direction when undirected)."""
    n = int(num_nodes)
    src, dst = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
    known = np.unique(np.concatenate([_keys(src, dst, n)] + ([_keys(dst, src, n)] if undirected else [])))
    if known.size >= n * (n - 1) - count:
        raise DatasetError(f"the graph has too few non-edges for link.sharedNegatives ({count}): "
                           "lower it")
    rng = np.random.default_rng([seed, _SHARED_STREAM, SUPERVISION.index(split)])
    out = np.empty((2, 0), dtype=np.int64)
    while out.shape[1] < count:
        want = 2 * (count - out.shape[1]) + 16
        a, b = rng.integers(0, n, size=want), rng.integers(0, n, size=want)
        k = _keys(a, b, n)
        ok = (a != b) & ~np.isin(k, known)
        out = np.concatenate([out, np.stack([a[ok], b[ok]])], axis=1)
    return out[:, :count]


def check_edges(arrays: dict[str, np.ndarray], num_nodes: int, undirected: bool,
                where: str, overlap: bool = True) -> None:
    """Refuse supervision edges that cannot be right, naming the file, the edge (its column) and
    the fix: a shape other than [2, E], a node id out of range, an edge in two splits (either
    direction, when the graph is undirected)."""
    seen: list[tuple[str, np.ndarray, np.ndarray]] = []  # (name, sorted keys, their columns)
    for name, e in arrays.items():
        file = f"{where}/{name}" if "." in name else f"{where}/{name}.npy"
        if e.ndim != 2 or e.shape[0] != 2:
            raise DatasetError(f"{file}: expected a [2, E] array of (source, destination) rows, "
                               f"found shape {list(e.shape)}; write sources in row 0, destinations in row 1")
        bad = np.flatnonzero((e < 0).any(axis=0) | (e >= num_nodes).any(axis=0))
        if bad.size:
            col = int(bad[0])
            raise DatasetError(f"{file}: edge {col} (column {col}) is ({int(e[0, col])}, "
                               f"{int(e[1, col])}), a node id outside [0, {num_nodes}); fix or remove "
                               "that edge (ids are the graph's node ids)")
        src, dst = e[0].astype(np.int64), e[1].astype(np.int64)
        if undirected:
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        keys = _keys(src, dst, num_nodes)
        if not overlap:  # a dataset's own split (OGB's), taken as published
            continue
        for prev_name, prev_keys, prev_cols in seen:
            hit = np.flatnonzero(np.isin(keys, prev_keys))
            if hit.size:
                col = int(hit[0])
                j = int(prev_cols[np.searchsorted(prev_keys, keys[col])])
                raise DatasetError(
                    f"{file}: edge {col} (column {col}), ({int(e[0, col])}, {int(e[1, col])}), is "
                    f"also edge {j} of {where}/{prev_name if '.' in prev_name else prev_name + '.npy'}; an "
                    "edge belongs to one split only: "
                    "remove it from one of the two files")
        order = np.argsort(keys, kind="stable")
        seen.append((name, keys[order], order))


# -- the store's link files ------------------------------------------------------------------

def link_files(split: LinkSplit, original: np.ndarray, num_nodes: int, lk) -> dict[str, np.ndarray]:
    """Every array `<storeDir>/link/` holds, by file stem."""
    files = {"train": split.train, "val": split.val, "test": split.test}
    for s in EVALUATED:
        files[f"{s}_neg"] = eval_negatives(files[s], num_nodes, lk.eval_negatives, lk.split_seed, s)
        files[f"{s}_shared_neg"] = shared_negatives(original, num_nodes, lk.shared_negatives,
                                                    lk.split_seed, s, split.undirected)
    return files


def write_link_files(folder: Path, files: dict[str, np.ndarray], undirected: bool,
                     overlap_checked: bool = True) -> dict:
    """Writes the arrays into `folder/link/`; returns the manifest's "link" entry."""
    out = Path(folder) / LINK_DIR
    out.mkdir(parents=True, exist_ok=True)
    digests = {}
    for stem, arr in files.items():
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        np.save(out / f"{stem}.npy", arr)
        digests[stem] = hashlib.sha256(arr).hexdigest()  # of the data: part of the store's fingerprint
    return {"link": {"undirected": undirected, **({} if overlap_checked else {"splits_may_overlap": True}),
                     "files": {stem: list(arr.shape) for stem, arr in files.items()}, "sha256": digests}}


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


def read_edges(source) -> np.ndarray:
    """Every edge of a source as it lists them, [2, E] int64 in memory (16 bytes an edge), ids
    checked naming the file and row."""
    from grappa.data.sources.in_memory import MemorySource
    n = int(source.num_nodes)
    if isinstance(source, MemorySource):
        e = np.asarray(source.edge_index, dtype=np.int64)
    else:
        parts = []
        for part in source.edge_parts(1):
            for b in part.blocks(1 << 22):
                src, dst = np.asarray(b.src, np.int64), np.asarray(b.dst, np.int64)
                bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n))
                if bad.size:
                    i = int(bad[0])
                    raise DatasetError(f"{b.origin}: edge {b.first_row + i} is ({int(src[i])}, {int(dst[i])}), "
                                       f"a node id outside [0, {n}); fix or remove that edge")
                parts.append(np.stack([src, dst]))
        e = np.concatenate(parts, axis=1) if parts else np.empty((2, 0), np.int64)
    return e


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


def without_held_out(source, held: np.ndarray, undirected: bool, listed: np.ndarray):
    """The source with the held-out edges (canonical keys) removed from its edge list (`listed`,
    read_edges'): an in-memory source cut in memory, a streamed one filtered as it streams."""
    from grappa.data.sources.in_memory import MemorySource
    n = int(source.num_nodes)
    held = np.unique(held)
    if isinstance(source, MemorySource):
        keep = ~np.isin(_canonical_keys(source.edge_index, n, undirected), held)
        masks = tuple(source.codes == c for c in (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST))
        return MemorySource(source.name, np.asarray(source.edge_index)[:, keep], source.x, source.y, masks,
                            source.num_classes)
    return HeldOutSource(source, held, undirected,
                         int((~np.isin(_canonical_keys(listed, n, undirected), held)).sum()))


def _given_files(given: GivenSplit, graph: np.ndarray, n: int, undirected: bool, lk) -> dict[str, np.ndarray]:
    """The link files of a given split: its edges, its negatives, and the negatives it lacks
    drawn as for the seeded split. Shapes and ids checked naming the file and the fix."""
    named = {given.files[s]: np.asarray(given.edges[s], dtype=np.int64) for s in SUPERVISION}
    check_edges(named, n, undirected, given.where, overlap=given.check_overlap)
    files = {s: np.asarray(given.edges[s], dtype=np.int64) for s in SUPERVISION}
    known = np.concatenate([graph] + [files[s] for s in SUPERVISION], axis=1)
    for s in EVALUATED:
        neg, shared = given.negatives.get(f"{s}_neg"), given.negatives.get(f"{s}_shared_neg")
        if neg is not None:
            neg = np.asarray(neg, dtype=np.int64)
            file = f"{given.where}/{given.files[f'{s}_neg']}"
            if neg.ndim != 2 or neg.shape[0] != files[s].shape[1]:
                raise DatasetError(f"{file}: expected [{files[s].shape[1]}, k], k negative destinations for "
                                   f"each of the {files[s].shape[1]} {s} edges, found shape {list(neg.shape)}: "
                                   "write row i for edge i, or remove the file to draw them")
            _check_ids(neg, n, file, "row")
        else:
            neg = eval_negatives(files[s], n, lk.eval_negatives, lk.split_seed, s)
        if shared is not None:
            shared = np.asarray(shared, dtype=np.int64)
            file = f"{given.where}/{given.files[f'{s}_shared_neg']}"
            if shared.ndim != 2 or shared.shape[0] != 2 or shared.shape[1] < 1:
                raise DatasetError(f"{file}: expected [2, N] negative pairs (sources in row 0), found shape "
                                   f"{list(shared.shape)}: write them so, or remove the file to draw them")
            _check_ids(shared, n, file, "column")
        else:
            shared = shared_negatives(known, n, lk.shared_negatives, lk.split_seed, s, undirected)
        files[f"{s}_neg"], files[f"{s}_shared_neg"] = neg, shared
    return files


def _check_ids(a: np.ndarray, n: int, file: str, unit: str) -> None:
    bad = np.argwhere((a < 0) | (a >= n))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        at = r if unit == "row" else c
        raise DatasetError(f"{file}: {unit} {at} holds node id {int(a[r, c])}, outside [0, {n}); fix or "
                           "remove it (ids are the graph's node ids)")


def split_source(source, lk, given: Optional[GivenSplit] = None) -> tuple[object, dict[str, np.ndarray], bool, bool]:
    """The source with its val/test edges removed from message passing, the link files' arrays,
    whether the graph is undirected, and whether the splits were checked for overlap. The split is
    the seeded one of the graph's edges, or `given` (the dataset's own files). Holds the edge list
    in memory."""
    n = int(source.num_nodes)
    listed = read_edges(source)
    graph = np.concatenate([listed, listed[::-1]], axis=1) if source.add_inverse_edges else listed
    if given is None:
        split = split_edges(graph, n, lk.val_fraction, lk.test_fraction, lk.split_seed)
        undirected = split.undirected
        files = link_files(split, graph, n, lk)
        check_edges({s: files[s] for s in SUPERVISION}, n, undirected, LINK_DIR)
        held_out = True
    else:
        undirected = bool(source.add_inverse_edges) or is_undirected(graph, n)
        files = _given_files(given, graph, n, undirected, lk)
        held_out = given.held_out_in_graph
    del graph
    if held_out:
        held = np.concatenate([_canonical_keys(files[s], n, undirected) for s in EVALUATED])
        source = without_held_out(source, held, undirected, listed)
    return source, files, undirected, given is None or given.check_overlap


class LinkSplitSource(GraphSource):
    """A source whose link split is made when the store's prepare stages it (GraphSource.stage):
    after the source's own stage, since a graph from tables has its edges in dense ids only once
    its id map is built there. The val/test edges then leave message passing, the link files are
    written into the staging folder and their manifest entry is returned with the source's own.
    Until then it reports the wrapped source's metadata; its passes read the split source."""

    def __init__(self, source: GraphSource, lk, given: Optional[GivenSplit] = None) -> None:
        self.source, self.lk, self.given = source, lk, given
        self._take(source)

    def _take(self, source: GraphSource) -> None:
        for attr in SOURCE_ATTRS:
            setattr(self, attr, getattr(source, attr))

    def stage(self, staging: Path, work: Path, block_edges: int) -> dict:
        staged = self.source.stage(staging, work, block_edges)
        self.source, files, undirected, overlap = split_source(self.source, self.lk, self.given)
        self.given = None  # its arrays are in `files` now: never sent to the worker processes
        self._take(self.source)
        return {**staged, **write_link_files(staging, files, undirected, overlap)}

    def edge_parts(self, parts: int):
        return self.source.edge_parts(parts)

    def node_blocks(self, block_rows: int):
        return self.source.node_blocks(block_rows)


def link_source(source, lk, given: Optional[GivenSplit] = None) -> LinkSplitSource:
    """The source for a link-prediction store: split when the store's prepare stages it."""
    return LinkSplitSource(source, lk, given)


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
        check_edges({s: np.asarray(self.arrays[s]) for s in SUPERVISION},
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
