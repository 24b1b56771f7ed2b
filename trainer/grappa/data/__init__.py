"""The data path: a user's graph -> the chunk store -> a worker's local graph -> the blocks each
step runs on -> the feature rows they read.

| step | where |
|---|---|
| sources: every dataset as node blocks and edge parts, read in bounded memory (torch-free) | `sources/` |
| whole in-memory datasets (built-ins, CSBM, R-MAT, a saved PyG Data) for one process | `datasets/` |
| any dataset as a source, the one thing prepare reads | `open.py` |
| the chunk store: seeded random chunks, written once (`preparation.py`, `writer.py`), read by every rank (`chunk_store.py`) | `store/` |
| a worker's local graph for a round (base + variable chunk + halo, CSR) | `local_graph.py` (`distinct.py`: the sorted distinct ids it and the fetch find) |
| a round's data fetched from the store into worker-local storage (one counted, atomic path), and read from there | `local_copy.py` |
| the next round's data fetched in the background while the current round trains (bounded disk and memory, reported), paced over the round's epochs | `prefetch.py`, `pace.py` |
| a mini-batch round's halo rows fetched as its steps first read them | `halo_rows.py` (a bucket's ranged reads: `s3/`) |
| blocks: what one layer runs on, cut for the seeds or sampled | `blocks.py`, `sampling/` |
| feature rows, read from the store's memory maps on demand | `feature_rows.py` |
| per-layer row files of every node (layer-wise inference, exact evaluation) | `rowfiles.py` |
| link prediction's edge split: message-passing vs supervision edges, the evaluation's negatives (in the store's `link/`) | `link_split.py` (`link/`: its out-of-core pieces: sorted edge keys, the seeded rank, the files, the negatives) |

May import: `grappa.config`, `grappa.util`. A new data source is one module in `sources/`
(streaming) opened by `sources.open_source`; the store, the workers and inference read it unchanged.
"""
