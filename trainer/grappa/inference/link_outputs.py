"""`grappa predict` with a link-prediction model: pair scores, top-k candidates, ranking metrics.

A link model's last layer gives every node its embedding (`embeddings.npy`, as any predict run
writes it, here by default). With the decoder it was trained with, predict also scores:

- `--pairs FILE`: node pairs (u, v), written as `pair_scores.npy` float32 [E], row i the score
  (a logit: sigma(score) is the predicted probability of the edge) of the file's pair i.
- `--queries FILE` (and `--candidates FILE`, default every node; `--top-k K`, default 10): for
  each query node q, the K candidates v with the highest score s(q, v), best first: `topk.npy`
  int64 [Q, K] node ids and `topk_scores.npy` float32 [Q, K]. q itself is never its own
  candidate; a row with fewer than K candidates ends in id -1, score -inf. Edges already in the
  graph are not excluded (filter them with the graph's edge list if you want new links only).

Node ids are the dataset's own numbering (a node's row in the arrays format, OGB's node id): the
same numbering as the rows of every output. Files: `.npy` integer arrays ([2, E] sources in row
0, or [E, 2] a pair per row, for pairs; [Q] for nodes), or text with one pair (or one node) per
line, separated by spaces, tabs or commas (`#` starts a comment; a first line of column names is
skipped). Every id is checked against the graph before anything runs; an error names the file,
its row and the fix.

Scores are computed from the last layer's float32 row files (whatever --embedding-dtype says), by
the P workers: each scores a contiguous range of pairs and of queries, a bounded block at a time
(a block of queries against a block of candidates keeps a running top K), and writes its rows of
the shared output files (outputs.OutputArray). `--evaluate` adds MRR, Hits@K and AUC on the
store's link split (the store a link-prediction run trained on), each worker ranking its share
of the positives against the split's shared negatives, which every worker scores itself (N
pairs, link.sharedNegatives): the same figures training's evaluation reports (runtime/link_eval.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from grappa.data.errors import DatasetError
from grappa.util.files import sha256_of
from grappa.util.npy import map_npy

LINK = "link-prediction"
PAIR_SCORES, TOPK, TOPK_SCORES = "pair_scores", "topk", "topk_scores"
LINK_OUTPUT_FILES = tuple(f"{n}.npy" for n in (PAIR_SCORES, TOPK, TOPK_SCORES))
BLOCK_VALUES = 1 << 22  # scores (times the width, for the mlp decoder) computed at a time
FORMATS = ("write a .npy integer array, or text with one {what} a line (ids separated by a space, "
           "tab or comma)")



def _text_ids(path: Path, flag: str, cols: int) -> tuple[np.ndarray, list[int]]:
    """[rows, cols] int64 from a text file, and each row's line number; a first line of names is
    skipped."""
    what = "pair of node ids (source destination)" if cols == 2 else "node id"
    rows: list[list[int]] = []
    lines: list[int] = []
    first = True
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            text = line.split("#", 1)[0].replace(",", " ").split()
            if not text:
                continue
            try:
                values = [int(t) for t in text]
            except ValueError:
                if first and not any(t.lstrip("-").isdigit() for t in text):
                    first = False
                    continue  # column names
                raise DatasetError(f"{flag} {path} line {no}: {line.strip()[:80]!r} is not a {what}; "
                                   + FORMATS.format(what=what)) from None
            first = False
            if len(values) != cols:
                raise DatasetError(f"{flag} {path} line {no}: {len(values)} values where a {what} is "
                                   f"expected ({cols}); " + FORMATS.format(what=what))
            rows.append(values)
            lines.append(no)
    return np.asarray(rows, dtype=np.int64).reshape(-1, cols), lines


def _npy_ids(path: Path, flag: str) -> np.ndarray:
    try:
        arr = map_npy(path)
    except (OSError, ValueError) as err:
        raise DatasetError(f"{flag} {path} cannot be read as .npy ({err}); "
                           + FORMATS.format(what="pair or node")) from None
    if not np.issubdtype(arr.dtype, np.integer):
        raise DatasetError(f"{flag} {path} holds {arr.dtype} values; node ids are integers: save them "
                           "with an integer dtype (e.g. np.int64)")
    return np.asarray(arr, dtype=np.int64)


def _check_range(ids: np.ndarray, num_nodes: int, flag: str, path: Path, row_of) -> None:
    bad = np.flatnonzero((ids < 0) | (ids >= num_nodes))
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{flag} {path} {row_of(i)}: node id {int(ids.reshape(-1)[i])} is outside [0, {num_nodes}) (the "
            f"graph has {num_nodes} nodes; ids are the dataset's own node numbers, the rows of its node "
            "arrays): fix or remove that row")


def read_pairs(path: str | Path, num_nodes: int, flag: str = "--pairs") -> np.ndarray:
    """[2, E] int64 node pairs of a file, checked against the graph's node count."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{flag} {path} does not exist: give a file of node pairs")
    if path.suffix == ".npy":
        arr = _npy_ids(path, flag)
        if arr.ndim == 2 and arr.shape[0] == 2:  # [2, E] (also a 2 x 2 array: the store's layout)
            pairs = np.ascontiguousarray(arr)
            where = "column"
        elif arr.ndim == 2 and arr.shape[1] == 2:
            pairs = np.ascontiguousarray(arr.T)
            where = "row"
        else:
            raise DatasetError(f"{flag} {path} has shape {list(arr.shape)}: node pairs are a [2, E] array "
                               "(sources in row 0, destinations in row 1) or [E, 2] (a pair per row)")
        e = pairs.shape[1]
        _check_range(pairs, num_nodes, flag, path, lambda i: f"{where} {i % e} (pair {i % e})")
        return pairs
    rows, lines = _text_ids(path, flag, 2)
    _check_range(rows, num_nodes, flag, path, lambda i: f"line {lines[i // 2]} (pair {i // 2})")
    return np.ascontiguousarray(rows.T)


def read_nodes(path: str | Path, num_nodes: int, flag: str) -> np.ndarray:
    """[Q] int64 node ids of a file, checked against the graph's node count."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{flag} {path} does not exist: give a file of node ids")
    if path.suffix == ".npy":
        ids = _npy_ids(path, flag)
        if ids.ndim != 1:
            raise DatasetError(f"{flag} {path} has shape {list(ids.shape)}: node ids are a 1-D array [Q]")
        _check_range(ids, num_nodes, flag, path, lambda i: f"row {i}")
    else:
        rows, lines = _text_ids(path, flag, 1)
        ids = rows.reshape(-1)
        _check_range(ids, num_nodes, flag, path, lambda i: f"line {lines[i]} (node {i})")
    return np.ascontiguousarray(ids)


def check_request(model: str, meta: dict, num_nodes: int, *, scores: bool, pairs, queries, candidates,
                  top_k, tables: Optional[dict] = None) -> dict:
    """The link outputs asked for, checked before anything runs: the job's fields. `tables`: the
    store's manifest entry when its graph comes from tables (grappa.data.tables)."""
    from grappa.config import ConfigError
    task = meta.get("task", "node-classification")
    asked = [f for f, v in (("--pairs", pairs), ("--queries", queries), ("--candidates", candidates),
                            ("--top-k", top_k)) if v is not None]
    if task != LINK:
        if asked:
            raise ConfigError(f"{', '.join(asked)} score node pairs with a link-prediction model's decoder; "
                              f"model {model} is a {task} model: drop {', '.join(asked)}, or give a model "
                              "trained with task: link-prediction")
        return {}
    if scores:
        raise ConfigError(f"--scores writes class probabilities; model {model} is a link-prediction model "
                          "(embeddings and a decoder, no classes): drop --scores (--pairs FILE scores node "
                          "pairs, --queries FILE ranks candidates)")
    by_number = [f for f, v in (("--pairs", pairs), ("--queries", queries), ("--candidates", candidates))
                 if v is not None]
    if tables and by_number:
        raise ConfigError(
            f"{', '.join(by_number)} name nodes by the dataset's own numbering (0..n-1), which a graph from "
            f"tables does not have (its nodes are the ids of column {tables.get('id_column')!r} of the nodes "
            f"table): drop {', '.join(by_number)} (spec.predict.pairs / queries / candidates in a GrappaJob); "
            "predictions.parquet keys every node's embedding by that id")
    if candidates is not None and queries is None:
        raise ConfigError("--candidates is the set --queries' top-k are chosen from: add --queries FILE "
                          "or drop --candidates")
    if top_k is not None and queries is None:
        raise ConfigError("--top-k is the number of candidates kept per query node: add --queries FILE "
                          "or drop --top-k")
    if top_k is not None and int(top_k) < 1:
        raise ConfigError(f"--top-k {top_k}: keep at least 1 candidate per query")
    out: dict = {"task": LINK}
    if pairs is not None:
        read_pairs(pairs, num_nodes)
        out.update(pairs=str(Path(pairs).resolve()), pairs_sha256=sha256_of(pairs))
    if queries is not None:
        read_nodes(queries, num_nodes, "--queries")
        out.update(queries=str(Path(queries).resolve()), queries_sha256=sha256_of(queries),
                   top_k=int(top_k or 10))
        if candidates is not None:
            if read_nodes(candidates, num_nodes, "--candidates").size == 0:
                raise DatasetError(f"--candidates {candidates} holds no node id: give at least one")
            out.update(candidates=str(Path(candidates).resolve()), candidates_sha256=sha256_of(candidates))
    return out


# -- the workers' part --------------------------------------------------------------------------

def output_specs(job, num_nodes: int) -> list[tuple]:
    """(OutputSpec, rows) of the link outputs the job asks for."""
    from grappa.inference.outputs import OutputSpec
    if job.task != LINK or not job.predict:
        return []
    out = []
    if job.pairs:
        e = int(read_pairs(job.pairs, num_nodes).shape[1])
        out.append((OutputSpec(PAIR_SCORES, 0, "float32", None,
                               f"score (logit) of each pair of {Path(job.pairs).name}, in its order"), e))
    if job.queries:
        q = int(read_nodes(job.queries, num_nodes, "--queries").size)
        k = _kept(job, num_nodes)
        where = Path(job.candidates).name if job.candidates else "every node"
        out.append((OutputSpec(TOPK, 0, "int64", k, f"per query node of {Path(job.queries).name}: the {k} "
                               f"best-scored candidates ({where}), best first; -1 where there are fewer"), q))
        out.append((OutputSpec(TOPK_SCORES, 0, "float32", k, "their scores (logits); -inf where the id is -1"),
                    q))
    return out


def _kept(job, num_nodes: int) -> int:
    n_cand = read_nodes(job.candidates, num_nodes, "--candidates").size if job.candidates else num_nodes
    return max(1, min(int(job.top_k or 10), n_cand))


def _scores(decoder, h_a, h_b):
    """[a, b] scores of every (row of h_a, row of h_b)."""
    import torch
    if decoder.kind == "dot":
        return h_a @ h_b.T
    if decoder.kind == "distmult":
        return (h_a * decoder.rel) @ h_b.T
    return decoder(h_a.unsqueeze(1), h_b.unsqueeze(0)) if h_a.numel() and h_b.numel() else \
        torch.zeros(h_a.shape[0], h_b.shape[0])


def write_rank_outputs(job, model, store, rank: int, tick=lambda n: None) -> int:
    """This rank's rows of pair_scores, topk and topk_scores (a contiguous range of each), written
    into the scratch folder's shared files. Returns the bytes written."""
    import torch

    from grappa.data.rowfiles import LayerRows
    from grappa.inference.outputs import OutputArray, id_range
    from grappa.runtime.link_eval import RowLookup
    n = int(store.manifest["num_nodes"])
    specs = dict((s.name, (s, rows)) for s, rows in output_specs(job, n))
    if not specs:
        return 0
    lookup, layer = RowLookup(store), LayerRows(job.scratch, model.passes)
    decoder = model.decoder.eval()
    written = 0
    with torch.no_grad():
        if PAIR_SCORES in specs:
            spec, e = specs[PAIR_SCORES]
            pairs = read_pairs(job.pairs, n)
            out = OutputArray(job.scratch / spec.file, spec, e)
            lo, hi = id_range(rank, job.workers, e)
            step = max(1, BLOCK_VALUES // 64)
            try:
                for a in range(lo, hi, step):
                    b = min(hi, a + step)
                    h_src = lookup.embeddings(layer, pairs[0, a:b])
                    s = decoder(h_src, lookup.embeddings(layer, pairs[1, a:b]))
                    out.write(a, s.numpy().astype(np.float32))
                    tick(b - a)
            finally:
                out.close()
            written += out.bytes
        if TOPK in specs:
            written += _write_topk(job, decoder, lookup, layer, specs, n, rank, tick)
    return written


def _write_topk(job, decoder, lookup, layer, specs, n: int, rank: int, tick) -> int:
    import torch

    from grappa.inference.outputs import OutputArray, id_range
    (spec_ids, q_total), (spec_scores, _) = specs[TOPK], specs[TOPK_SCORES]
    k = spec_ids.width
    queries = read_nodes(job.queries, n, "--queries")
    cand = read_nodes(job.candidates, n, "--candidates") if job.candidates else None
    n_cand = cand.size if cand is not None else n
    width = int(decoder.mlp[0].in_features) if decoder.kind == "mlp" else 1
    c_block = min(n_cand, 8192)
    q_block = max(1, BLOCK_VALUES // (c_block * width))
    out_ids = OutputArray(job.scratch / spec_ids.file, spec_ids, q_total)
    out_scores = OutputArray(job.scratch / spec_scores.file, spec_scores, q_total)
    lo, hi = id_range(rank, job.workers, q_total)
    try:
        for a in range(lo, hi, q_block):
            q = queries[a:min(hi, a + q_block)]
            h_q = lookup.embeddings(layer, q)
            best_s = torch.full((q.size, 0), -np.inf)
            best_i = torch.zeros((q.size, 0), dtype=torch.int64)
            for c0 in range(0, n_cand, c_block):
                c = cand[c0:c0 + c_block] if cand is not None else np.arange(c0, min(n, c0 + c_block))
                s = _scores(decoder, h_q, lookup.embeddings(layer, c)).float()
                ct = torch.from_numpy(np.asarray(c, dtype=np.int64))
                s[torch.from_numpy(q).unsqueeze(1) == ct.unsqueeze(0)] = -np.inf  # not its own candidate
                all_s = torch.cat([best_s, s], 1)
                all_i = torch.cat([best_i, ct.expand(q.size, -1)], 1)
                top = torch.topk(all_s, min(k, all_s.shape[1]), dim=1)
                best_s, best_i = top.values, all_i.gather(1, top.indices)
            best_i = torch.where(torch.isneginf(best_s), torch.full_like(best_i, -1), best_i)
            out_ids.write(a, best_i.numpy().astype(np.int64))
            out_scores.write(a, best_s.numpy().astype(np.float32))
            tick(q.size)
    finally:
        out_ids.close()
        out_scores.close()
    return out_ids.bytes + out_scores.bytes


def evaluation_sums(job, model, store, rank: int) -> list[float]:
    """This rank's sums of tasks/link_prediction.split_stats over its share of the store's
    val and test positives; every rank scores all of a split's shared negatives (N pairs)."""
    import torch

    from grappa.data.link_split import EVALUATED, LinkEdges
    from grappa.data.rowfiles import LayerRows
    from grappa.runtime.link_eval import LinkEvaluation
    link = LinkEdges(store.path, store.manifest)
    def rows_of(layer: int) -> LayerRows:
        return LayerRows(job.scratch, layer)
    mine = LinkEvaluation(store, link, rank, job.workers, rows_of)
    every = LinkEvaluation(store, link, 0, 1, rows_of)
    rows = rows_of(model.passes)
    model.eval()
    stats = []
    for split in EVALUATED:
        shared = torch.sort(every.shared_scores(model.decoder, rows, split)).values
        stats.append(mine.positive_stats(model.decoder, rows, split, shared))
    return torch.cat(stats).tolist()


def evaluation(sums: list[list[float]]) -> dict:
    """evaluation.json's figures per split from the ranks' sums: MRR, Hits@K, AUC, loss, edges."""
    import torch

    from grappa.tasks import link_prediction as lp
    total = torch.tensor(sums, dtype=torch.float64).sum(0)
    flat = lp.metrics_of(total)
    out = {}
    for i, split in enumerate(lp.EVAL_SPLITS):
        out[split] = {key[len(split) + 1:]: v for key, v in flat.items() if key.startswith(split + "_")}
        out[split]["edges"] = int(total[i * lp.STATS_PER_SPLIT])
    return out


def check_evaluable(model: str, store_path, manifest: dict) -> None:
    if not manifest.get("link"):
        raise DatasetError(
            f"the graph in {store_path} has no link split (it was prepared for node classification), so "
            f"there are no held-out edges to rank: evaluate model {model} on the store its training run "
            "prepared (the default), or prepare the dataset with task: link-prediction")


def summary_line(ev: dict) -> Optional[str]:
    parts = []
    for split, v in ev.items():
        if v.get("mrr") is None:
            continue
        parts.append(f"{split} MRR {v['mrr']:.4f}, Hits@10 {v['hits@10']:.4f}, Hits@50 {v['hits@50']:.4f}, "
                     f"Hits@100 {v['hits@100']:.4f}, AUC {v['auc']:.4f} ({v['edges']:,} edges)")
    return "; ".join(parts) or None
