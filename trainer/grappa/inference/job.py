"""What a predict/evaluate run is asked to do, as the JSON every worker process reads.

The job file lives in the run's scratch folder (`<out>/.grappa-work/job.json`); a rerun of the
same job finds it and resumes. What makes two jobs the same is `identity`: the model and graph by
content, and the outputs asked for; where files are, the worker count and the block sizes only
change how the work is done (out_folder.py compares them, local_predict.py reuses the work).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from grappa.models.layerwise import DEFAULT_BLOCK_EDGES

SCRATCH = ".grappa-work"
EMBED_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class PredictJob:
    model: str                     # model file (model_file.py)
    model_sha256: str
    store: str                     # chunk store folder
    store_fingerprint: str
    out: str                       # where the outputs appear when complete
    workers: int                   # P
    predict: bool = True           # write predictions.npy (and what follows)
    scores: bool = False           # scores.npy: softmax class probabilities, float16
    embed_layer: Optional[int] = None  # embeddings.npy: the output of this layer (1..L)
    embed_dtype: str = "float16"
    evaluate: bool = False         # score the store's splits (evaluation.json)
    block_edges: int = DEFAULT_BLOCK_EDGES
    block_rows: int = 1 << 16      # output rows assembled at a time
    code_path: Optional[str] = None  # a custom model's code, when not where it was trained from
    # link prediction (a model trained with task: link-prediction; link_outputs.py)
    task: str = "node-classification"
    pairs: Optional[str] = None        # node pairs to score (pair_scores.npy)
    pairs_sha256: Optional[str] = None
    queries: Optional[str] = None      # query nodes whose top_k best candidates are written (topk.npy)
    queries_sha256: Optional[str] = None
    candidates: Optional[str] = None   # the candidate nodes (None: every node)
    candidates_sha256: Optional[str] = None
    top_k: Optional[int] = None

    @property
    def scratch(self) -> Path:
        return Path(self.out) / SCRATCH

    @property
    def path(self) -> Path:
        return self.scratch / "job.json"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @staticmethod
    def load(path: str | Path) -> "PredictJob":
        return PredictJob(**json.loads(Path(path).read_text()))

    @property
    def identity(self) -> dict:
        """What the outputs are a function of (nothing of where or how they are computed)."""
        return {k: getattr(self, k) for k in IDENTITY}


# The fields that decide the outputs; the layers' row files depend on the first two alone.
# The link outputs' input files count by content; None (not asked) matches a job recorded before them.
IDENTITY = ("model_sha256", "store_fingerprint", "predict", "scores", "embed_layer", "embed_dtype", "evaluate",
            "pairs_sha256", "queries_sha256", "candidates_sha256", "top_k")
