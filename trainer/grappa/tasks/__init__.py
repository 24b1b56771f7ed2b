"""Tasks: what a GNN is trained *for*, as a step's loss and an evaluation's metrics.

| task | module | a step's loss | an evaluation's metrics |
|---|---|---|---|
| node classification | `node_classification.py` | cross-entropy per seed node | loss and accuracy per split |
| link prediction | `link_prediction.py` | BCE per positive edge and its uniform negatives | MRR, Hits@10/50/100, AUC (OGB's evaluators) per split |

A strategy asks the task for per-example losses and never computes one itself, so a new task is a
new module here plus the data it needs (link prediction's split: data/link_split.py); the reducer,
rounds and runtime stay as they are. May import: `grappa.config`, `grappa.util`, `grappa.data`,
`grappa.models`.
"""
from __future__ import annotations


def build_task_model(cfg, num_features: int, num_classes: int):
    """The model a job trains: the GNN of models/build with the task's output width (the class
    count, or for link prediction the embedding width) and, for link prediction, its decoder.
    Seeded by the caller, so every rank builds the same one."""
    from grappa.models.build import build_model
    if cfg.task == "link-prediction":
        from grappa.tasks.link_prediction import attach_decoder, embedding_width
        return attach_decoder(build_model(cfg.model, num_features, embedding_width(cfg),
                                          cfg.training.mode), cfg)
    return build_model(cfg.model, num_features, num_classes, cfg.training.mode)
