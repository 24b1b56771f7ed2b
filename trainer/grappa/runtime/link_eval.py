"""Link prediction's evaluation during training: exact embeddings, ranked by the P workers.

1. Every layer, the last one included, goes through the layer-wise pass of exact evaluation
   (exact_eval.py): each worker writes its base chunks' rows to row files on the shared volume,
   with a one-element barrier after each layer. The last layer's rows are every node's exact
   embedding.
2. Each split's shared negatives are scored by the workers, every P-th pair each, and sent to the
   aggregator, which sorts them and sends the sorted scores to every worker: N floats per split
   (link.sharedNegatives), whatever the graph's size.
3. Each worker scores its share of the split's positives (every P-th) and of their own negatives
   (link.evalNegatives per positive) a block at a time, and sends the sums of
   tasks/link_prediction.split_stats: MRR's reciprocal ranks, Hits@K against the shared
   negatives' K-th largest score, the AUC terms, the loss.

Embeddings are read from the row files by global id (chunk by the store's assignment, row by the
chunk's sorted node ids): a block of positives holds (2 + k) x block rows at a time.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from grappa.data.link_split import EVALUATED, LinkEdges
from grappa.data.rowfiles import LayerRows
from grappa.data.store.chunk_store import ChunkStore
from grappa.tasks import link_prediction as lp

BLOCK_PAIRS = 1 << 16  # scored pairs per block (positives x (2 + k) rows of embeddings)


class RowLookup:
    """Rows of nodes given by global id, from a layer's per-chunk row files (rowfiles.py): the
    chunk by the store's assignment, the row by the chunk's sorted node ids."""

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        self.assign = store.assignment
        self.nodes = [store.chunk_file(k, "nodes.npy") for k in range(store.num_chunks)]

    def embeddings(self, rows: LayerRows, ids: np.ndarray) -> Tensor:
        """Rows of `ids` (global) from the last layer's row files."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        chunk = self.assign.chunk_of(ids)
        out = None
        for k in np.unique(chunk).tolist():
            sel = np.flatnonzero(chunk == k)
            pos = np.searchsorted(self.nodes[k], ids[sel])
            block = np.asarray(rows.rows(k)[pos])
            if out is None:
                out = np.empty((ids.size, block.shape[1]), dtype=np.float32)
            out[sel] = block
        rows.release()
        return torch.from_numpy(out if out is not None else np.empty((0, 0), np.float32))


class LinkEvaluation(RowLookup):
    def __init__(self, store: ChunkStore, link: LinkEdges, worker: int, workers: int,
                 rows) -> None:
        super().__init__(store)
        self.link, self.worker, self.workers = link, worker, workers
        self.rows = rows  # layer -> LayerRows of one pass (exact_eval.LayerwiseEvaluation.rows)

    @torch.no_grad()
    def shared_scores(self, decoder, rows: LayerRows, split: str) -> Tensor:
        """This worker's share (every P-th pair) of the split's shared negative scores."""
        pairs = self.link[f"{split}_shared_neg"]
        cols = np.arange(self.worker, pairs.shape[1], self.workers)
        out = [torch.zeros(0)]
        for lo in range(0, cols.size, BLOCK_PAIRS):
            c = cols[lo:lo + BLOCK_PAIRS]
            e = np.asarray(pairs[:, c])
            out.append(decoder(self.embeddings(rows, e[0]), self.embeddings(rows, e[1])).float())
        return torch.cat(out)

    @torch.no_grad()
    def positive_stats(self, decoder, rows: LayerRows, split: str, shared_sorted: Tensor) -> Tensor:
        """split_stats' sums over this worker's share of the split's positives."""
        pos, neg = self.link[split], self.link[f"{split}_neg"]
        thresholds = lp.hits_thresholds(shared_sorted)
        cols = self.link.scored_by(split, self.worker, self.workers)
        k = neg.shape[1]
        step = max(1, BLOCK_PAIRS // (k + 1))
        stats = torch.zeros(lp.STATS_PER_SPLIT, dtype=torch.float64)
        for lo in range(0, cols.size, step):
            c = cols[lo:lo + step]
            e = np.asarray(pos[:, c])
            h_src = self.embeddings(rows, e[0])
            p = decoder(h_src, self.embeddings(rows, e[1]))
            h_neg = self.embeddings(rows, np.asarray(neg[c])).view(c.size, k, -1)
            n = decoder(h_src.unsqueeze(1), h_neg)
            stats += lp.split_stats(p, n, shared_sorted, thresholds)
        return stats


def worker_evaluate(model, ev, link_eval: LinkEvaluation, link) -> None:
    """The worker's side (`ev`: its exact_eval.LayerwiseEvaluation, `link`: its transport)."""
    model.eval()
    for layer in range(model.passes):
        ev.write_layer(model, layer)
        link.send(torch.zeros(1), 0, "eval")  # barrier: every worker's rows of this layer in place
        link.recv(torch.empty(1), 0, "eval")
    rows = link_eval.rows(model.passes)
    for split in EVALUATED:
        link.send_var(link_eval.shared_scores(model.decoder, rows, split), 0, "eval")
    shared = [link.recv_var(0, "eval") for _ in EVALUATED]
    stats = torch.cat([link_eval.positive_stats(model.decoder, rows, split, s)
                       for split, s in zip(EVALUATED, shared)])
    link.send(stats, 0, "eval")


def aggregator_evaluate(passes: int, workers: list[int], link) -> dict:
    """The aggregator's side: the barriers, the shared scores sorted and sent back, the sums."""
    for _ in range(passes):
        link.recv_many([(torch.empty(1), r) for r in workers], "eval")
        link.send_many([(torch.zeros(1), r) for r in workers], "eval")
    shared = []
    for _ in EVALUATED:
        parts = [link.recv_var(r, "eval") for r in workers]
        shared.append(torch.sort(torch.cat(parts)).values)
    for s in shared:
        for r in workers:
            link.send_var(s, r, "eval")
    stats = link.recv_many([(torch.empty(lp.EVAL_STATS_LEN, dtype=torch.float64), r) for r in workers], "eval")
    return lp.metrics_of(torch.stack(stats).sum(0))
