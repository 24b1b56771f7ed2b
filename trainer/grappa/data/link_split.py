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
negatives above; `manifest.json`'s "link" entry records their shapes. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from grappa.data.errors import ChunkStoreError, DatasetError
from grappa.data.sources.base import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from grappa.data.store.manifest import LINK_DIR

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
                where: str) -> None:
    """Refuse supervision edges that cannot be right, naming the file, the edge (its column) and
    the fix: a shape other than [2, E], a node id out of range, an edge in two splits (either
    direction, when the graph is undirected)."""
    seen: list[tuple[str, np.ndarray, np.ndarray]] = []  # (name, sorted keys, their columns)
    for name, e in arrays.items():
        file = f"{where}/{name}.npy"
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
        for prev_name, prev_keys, prev_cols in seen:
            hit = np.flatnonzero(np.isin(keys, prev_keys))
            if hit.size:
                col = int(hit[0])
                j = int(prev_cols[np.searchsorted(prev_keys, keys[col])])
                raise DatasetError(
                    f"{file}: edge {col} (column {col}), ({int(e[0, col])}, {int(e[1, col])}), is "
                    f"also edge {j} of {where}/{prev_name}.npy; an edge belongs to one split only: "
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


def write_link_files(folder: Path, files: dict[str, np.ndarray], undirected: bool) -> dict:
    """Writes the arrays into `folder/link/`; returns the manifest's "link" entry."""
    out = Path(folder) / LINK_DIR
    out.mkdir(parents=True, exist_ok=True)
    for stem, arr in files.items():
        np.save(out / f"{stem}.npy", np.ascontiguousarray(arr, dtype=np.int64))
    return {"link": {"undirected": undirected,
                     "files": {stem: list(arr.shape) for stem, arr in files.items()}}}


def link_source(source, lk) -> tuple[object, Callable[[Path], dict]]:
    """An in-memory source (sources/in_memory.MemorySource) with its val/test edges removed from
    message passing, and the writer of its link files (called on the store's staging folder)."""
    from grappa.data.sources.in_memory import MemorySource
    if not isinstance(source, MemorySource):
        raise DatasetError(f"task link-prediction splits edges in memory; dataset {source.name!r} "
                           "is streamed: use a built-in dataset, csbm or file")
    n = source.num_nodes
    split = split_edges(source.edge_index, n, lk.val_fraction, lk.test_fraction, lk.split_seed)
    files = link_files(split, source.edge_index, n, lk)
    check_edges({s: files[s] for s in SUPERVISION}, n, split.undirected, LINK_DIR)
    masks = tuple(source.codes == c for c in (SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST))
    cut = MemorySource(source.name, split.message, source.x, source.y, masks, source.num_classes)
    return cut, lambda staging: write_link_files(staging, files, split.undirected)


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
                arr = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as err:
                raise ChunkStoreError(f"{path} cannot be read ({err}); delete {store_path} and "
                                      "prepare it again") from None
            if list(arr.shape) != list(shape):
                raise ChunkStoreError(f"{path} has shape {list(arr.shape)}, the manifest says "
                                      f"{shape}; delete {store_path} and prepare it again")
            self.arrays[stem] = arr
        check_edges({s: np.asarray(self.arrays[s]) for s in SUPERVISION},
                    int(manifest["num_nodes"]), self.undirected, str(folder))

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
