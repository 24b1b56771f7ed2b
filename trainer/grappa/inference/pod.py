"""A predict job's pods (GrappaJob `spec.predict`): `python -m grappa.inference.pod ROLE`.

The operator runs the same group as for training: the aggregator pod (rank 0) coordinates, worker
pod r runs inference rank r - 1, and the prepare pod has prepared the spec's dataset before. The
coordinator checks the model against the graph, writes the job file into the scratch folder on
the volume (keeping the previous attempt's work when the job is the same: a restarted group
resumes), waits until the outputs are published, and reports the split accuracies as the job's
result. Workers compute the same job and start once the coordinator's job file matches it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from grappa.config import load_config
from grappa.inference.job import PredictJob
from grappa.inference.predict_worker import LAUNCHED, MANIFEST, run_worker, wait_until
from grappa.runtime.exit_codes import run_reporting
from grappa.runtime.stop import EXIT_STOPPED

log = logging.getLogger("grappa.predict")


def prepare_purpose():
    """What a predict job's prepare pod prepares the spec's dataset for: inference, so edges and
    features (labels and splits only when the job scores), of the width the model takes (checked
    on the source's headers, before the store is written)."""
    from grappa.data.store.preparation import Purpose
    from grappa.inference.commands import check_width
    from grappa.models.model_file import read_meta
    spec = json.loads(os.environ["GRAPPA_PREDICT"])
    meta, _ = read_meta(spec["model"])
    return Purpose(need_labels=bool(spec.get("evaluate")),
                   check_source=lambda src: check_width(spec["model"], meta, src.num_features, src.feature_origin))


def job_from_env() -> PredictJob:
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.inference.commands import new_job
    from grappa.inference.graph import named_graph
    from grappa.models.model_file import read_meta
    cfg = load_config()  # $GRAPPA_CONFIG: the dataset's store, the run directory, P
    spec = json.loads(os.environ["GRAPPA_PREDICT"])
    meta, _ = read_meta(spec["model"])
    store = ChunkStore(cfg.store_path)
    named_graph(store, meta, f"spec.dataset ({cfg.dataset.name})")  # said when not the training graph
    return new_job(spec["model"], meta, store, Path(cfg.run_dir) / spec["out"], cfg.partitions, predict=True,
                   evaluate=bool(spec.get("evaluate")), scores=bool(spec.get("scores")),
                   embed=spec.get("embeddings"), embed_dtype=spec.get("embeddingDtype", "float16"),
                   pairs=spec.get("pairs"), queries=spec.get("queries"), candidates=spec.get("candidates"),
                   top_k=spec.get("topK"))


def coordinate(job: PredictJob) -> dict:
    from grappa.inference.local_predict import COORDINATOR_SAMPLE_S, add_coordinator_memory, prepare_scratch
    from grappa.util.process_memory import PeakMemory
    out = Path(job.out)
    manifest = out / MANIFEST
    if not manifest.exists():  # else: published by an earlier attempt
        memory = PeakMemory(interval=COORDINATOR_SAMPLE_S)
        out.mkdir(parents=True, exist_ok=True)
        prepare_scratch(job, clear_status=False)  # workers may be running already: keep theirs
        (job.scratch / LAUNCHED).write_text(repr(time.time()))
        log.info("predict job written to %s; waiting for %d workers", job.path, job.workers)
        wait_until(manifest.exists, "the workers to publish the outputs", say_every=300)
        memory.stop()
        add_coordinator_memory(manifest, memory)  # this pod's: its cgroup is the container's
    m = json.loads(manifest.read_text())
    log.info("published %s: %d nodes in %.1f s", out, m["num_nodes"], m["seconds"])
    if os.environ.get("GRAPPA_JOB_NAME"):
        report_result(m)
    return m


def report_result(m: dict) -> None:
    from grappa.runtime.job_progress import Progress
    from grappa.runtime.kube_status import JobStatus
    ev = m.get("evaluation") or {}
    if m.get("task") == "link-prediction":  # MRR, Hits@K, AUC of the val and test edges
        val, test = ev.get("val") or {}, ev.get("test") or {}
        final = {f"test_{k}": v for k, v in test.items() if k != "edges"}
        JobStatus.from_env().report(Progress(val_mrr=val.get("mrr"), test_mrr=test.get("mrr"),
                                             test_hits50=test.get("hits@50"), test_auc=test.get("auc"),
                                             best_val=val.get("mrr"), final_metrics=final), final=True)
        return
    acc = {split: (ev.get(split) or {}).get("acc") for split in ("train", "val", "test")}
    JobStatus.from_env().report(Progress(train_acc=acc["train"], val_acc=acc["val"], test_acc=acc["test"],
                                         best_val=acc["val"]), final=True)


def work(job: PredictJob, rank: int) -> None:
    """Start once the coordinator has written this very job (not an earlier attempt's)."""
    expected = job.to_json()

    def written() -> bool:
        try:
            return job.path.read_text() == expected
        except OSError:
            return False
    if not (Path(job.out) / MANIFEST).exists():
        wait_until(written, f"the coordinator's job file {job.path}")
        run_worker(job, rank)


def run_role(role: str) -> int:
    job = job_from_env()
    if role == "aggregator":
        coordinate(job)
    else:
        work(job, int(os.environ["RANK"]) - 1)
    return 0


def main(argv: list[str]) -> int:
    role = argv[0]
    logging.basicConfig(level=os.environ.get("GRAPPA_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s predict-{role} %(levelname)s %(message)s")
    # PID 1 of a container needs a handler to die on SIGTERM; nothing to save (files by rename)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(EXIT_STOPPED))
    # the CLI's error path: the model does not fit the graph, an old model file, ... end with one
    # `grappa: error:` line on stderr and in the termination message, which the operator reports
    return run_reporting(lambda: run_role(role))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
