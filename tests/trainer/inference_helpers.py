"""Small stores, model files and a single-process reference for the inference tests."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch

from grappa.config import TrainConfig
from grappa.data.blocks import full_block
from grappa.data.store.chunk_store import ChunkStore
from grappa.data.store.preparation import prepare_store
from grappa.inference.job import PredictJob
from grappa.inference.local_predict import prepare_scratch
from grappa.inference.predict_worker import run_worker
from grappa.models import GNN
from grappa.models.model_file import describe, save_model, store_fingerprint


def small_store(root: Path, num_nodes: int = 600, chunks: int = 4, features: int = 24, **synthetic) -> TrainConfig:
    cfg = TrainConfig.model_validate({
        "partitions": 1, "grappa": {"chunks": chunks},
        "dataset": {"name": "csbm", "synthetic": {"numNodes": num_nodes, "numFeatures": features, **synthetic}},
        "runDir": str(root / "run"), "storeDir": str(root / "store")})
    prepare_store(cfg, progress=False)
    return cfg


def model_file(cfg: TrainConfig, path: Path, arch: str, layers: int = 2, hidden: int = 16, seed: int = 0) -> Path:
    """A randomly initialised model of `arch` for the store of `cfg`, saved as a model file."""
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"arch": arch, "layers": layers,
                                                                        "hidden": hidden, "dropout": 0.0})})
    man = ChunkStore(cfg.store_path).manifest
    torch.manual_seed(seed)
    model = GNN(cfg.model, man["num_features"], man["num_classes"])
    if arch == "gin":  # running statistics other than the initial 0 / 1, so eval-mode BatchNorm matters
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return save_model(path, describe(cfg, man["num_features"], man["num_classes"], model.widths, man),
                      model.state_dict())


@torch.no_grad()
def reference_layers(model: GNN, store_path: Path) -> list[torch.Tensor]:
    """Every layer's output for every node in global id order, the whole graph in one process."""
    store = ChunkStore(store_path)
    n = int(store.manifest["num_nodes"])
    chunks = [store.load_chunk(k) for k in range(store.num_chunks)]
    x = torch.zeros(n, int(store.manifest["num_features"]))
    deg = torch.zeros(n, dtype=torch.int64)
    for c in chunks:
        x[c.nodes] = c.x
        deg[c.nodes] = c.in_degree
    block = full_block(torch.cat([c.edge_index for c in chunks], 1), n, deg)
    model.eval()
    h, outs = model.prepare_input(x), []
    for layer in range(len(model.layers)):
        h = model.layer(layer, h, block)
        outs.append(h)
    return outs


def job_for(model: Path, store_path: Path, out: Path, workers: int, **kw) -> PredictJob:
    import hashlib
    store = ChunkStore(store_path)
    return PredictJob(model=str(model), model_sha256=hashlib.sha256(model.read_bytes()).hexdigest(),
                      store=str(store_path), store_fingerprint=store_fingerprint(store.manifest),
                      out=str(out), workers=workers, **kw)


def run_in_threads(job: PredictJob) -> None:
    """The P workers of a job as threads of this process (the code of the worker processes,
    without paying P interpreter starts per test)."""
    Path(job.out).mkdir(parents=True, exist_ok=True)
    prepare_scratch(job)
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            run_worker(job, rank)
        except BaseException as err:  # surfaced below
            errors.append(err)
    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(job.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    assert not any(t.is_alive() for t in threads), "a worker hung"
    # a finished worker leaves no memory-sampling thread behind in the process that ran it
    samplers = [t for t in threading.enumerate() if t.name == "grappa-pss"]
    for t in samplers:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in samplers), "a finished worker left its PSS sampler running"


def load_outputs(out: Path) -> dict[str, np.ndarray]:
    return {name: np.load(out / f"{name}.npy") for name in ("predictions", "scores", "embeddings")
            if (out / f"{name}.npy").exists()}
