"""Tasks: what a GNN is trained *for*, as a step's loss and an evaluation's metrics.

| task | module | a step's loss | an evaluation's metrics |
|---|---|---|---|
| node classification | `node_classification.py` | cross-entropy per seed node | loss and accuracy per split |

A strategy asks the task for per-example losses and never computes one itself, so a new task
(link prediction next) is a new module here plus the data it needs; the reducer, rounds and
runtime stay as they are. May import: `grappa.config`, `grappa.util`, `grappa.data`,
`grappa.models`.
"""
