"""`grappa predict` and `grappa evaluate`: arguments, the checks before anything runs, the summary.

Which graph: `--store DIR` (a prepared chunk store), or a dataset given the usual way
(`--dataset`, `--config`, `--set dataset.*`; prepared into `--store-dir`, default OUT-store beside
the output folder), or
by default the store the model was trained on. Torch is imported only once a command runs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Optional

EMBED_DTYPES = ("float16", "float32")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model file: RUN_DIR/model.pt or a checkpoint")
    p.add_argument("--store", help="a prepared chunk store to run on (default: the model's training "
                                   "store, or the dataset given by --dataset/--config)")
    p.add_argument("--out", help="output folder (default: next to the model, predictions/ or evaluation/)")
    p.add_argument("--edges-per-block", type=int, help="in-edges per block of rows: bounds each worker's memory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--scores", action="store_true", help="also write scores.npy: class probabilities, float16")
    p.add_argument("--embeddings", nargs="?", type=int, const=0, metavar="LAYER",
                   help="also write embeddings.npy: the output of layer LAYER (1..L; default the last "
                        "hidden layer)")
    p.add_argument("--embedding-dtype", choices=EMBED_DTYPES, default="float16")
    p.add_argument("--evaluate", action="store_true", help="also score the splits (evaluation.json)")


INFERENCE_COMMANDS = {
    "predict": ("classes (and optionally scores and embeddings) of every node with a trained model",
                add_predict_arguments),
    "evaluate": ("score a trained model on the splits, exactly (full neighbourhoods)", _common),
}


def _dataset_given(args: argparse.Namespace) -> bool:
    return bool(args.config or args.dataset or args.data_root or
                any(s.split("=", 1)[0].strip().startswith("dataset.") for s in args.set))


def resolve_store(args: argparse.Namespace, cfg, meta: dict, out: Path):
    """The chunk store to run on, prepared if a dataset was given."""
    from grappa.config import ConfigError
    from grappa.data.store.chunk_store import ChunkStore
    if args.store:
        return ChunkStore(args.store)
    if _dataset_given(args):
        from grappa.data.store.preparation import prepare_store
        if not cfg.store_dir:
            cfg = cfg.model_copy(update={"store_dir": str(out.parent / f"{out.name}-store")})
        prepare_store(cfg, progress=not args.quiet)
        return ChunkStore(cfg.store_path)
    store = meta.get("store") or {}
    if not store.get("path") or not (Path(store["path"]) / "manifest.json").is_file():
        where = f" ({store['path']} is gone)" if store.get("path") else ""
        raise ConfigError(f"model {args.model} does not name a chunk store that exists{where}: give the "
                          "graph with --store DIR or --dataset/--config (e.g. the training run's config)")
    return ChunkStore(store["path"])


def check_fit(model_path: str, meta: dict, manifest: dict, store_path, evaluate: bool) -> None:
    from grappa.models.model_file import ModelFileError
    want, have = int(meta["num_features"]), int(manifest["num_features"])
    if want != have:
        raise ModelFileError(
            f"model {model_path} takes {want} input features per node but the graph in {store_path} "
            f"has {have}: predict on a graph with {want}-wide features (the model's dataset: "
            f"{meta['dataset'].get('name')})")
    if evaluate and int(manifest["num_classes"]) > int(meta["num_classes"]):
        raise ModelFileError(
            f"model {model_path} predicts {meta['num_classes']} classes but the labels in {store_path} "
            f"go up to {int(manifest['num_classes']) - 1}: evaluate on a dataset with the model's classes")


def new_job(model: str, meta: dict, store, out: Path, workers: Optional[int], *, predict: bool,
            evaluate: bool, scores: bool = False, embed: Optional[int] = None,
            embed_dtype: str = "float16", block_edges: Optional[int] = None,
            code_path: Optional[str] = None):
    """The job after every check that needs no worker: the model fits the graph, the layer and
    the worker count exist."""
    from grappa.config import ConfigError
    from grappa.inference.job import PredictJob
    from grappa.models.layerwise import DEFAULT_BLOCK_EDGES
    from grappa.models.model_file import store_fingerprint
    man = store.manifest
    check_fit(model, meta, man, store.path, evaluate)
    layers = len(meta["widths"])  # passes of exact inference: the layers, or 1 (custom.py)
    if embed is not None and layers < int(meta["model"]["layers"]):
        raise ConfigError(f"model {model} ({meta['model']['custom']['factory']}) does not expose its "
                          "layers (an inference_per_layer method, as PyG's BasicGNN has), so only its "
                          "output is computed: drop --embeddings, or add inference_per_layer to the model")
    if embed is not None:
        embed = embed or max(1, layers - 1)
        if not 1 <= embed <= layers:
            raise ConfigError(f"embeddings layer {embed}: the model has layers 1..{layers} (layer {layers} "
                              "outputs the logits)")
    workers = workers or min(4, store.num_chunks)
    if workers > store.num_chunks:
        raise ConfigError(f"{workers} workers (--partitions) are more than the store's {store.num_chunks} "
                          f"chunks ({store.path}): use at most {store.num_chunks}")
    sha = hashlib.sha256(Path(model).read_bytes()).hexdigest()
    return PredictJob(model=str(Path(model).resolve()), model_sha256=sha, store=str(store.path.resolve()),
                      store_fingerprint=store_fingerprint(man), out=str(out.resolve()), workers=workers,
                      predict=predict, scores=scores, embed_layer=embed, embed_dtype=embed_dtype,
                      evaluate=evaluate, block_edges=block_edges or DEFAULT_BLOCK_EDGES,
                      code_path=str(Path(code_path).resolve()) if code_path else None)


def build_job(command: str, args: argparse.Namespace, cfg):
    from grappa.config import ConfigError
    from grappa.models.model_file import read_meta
    meta, _ = read_meta(args.model)
    if (meta.get("model") or {}).get("custom"):  # its code is here and unchanged, before any worker
        from grappa.models.model_file import load_model
        load_model(args.model, args.code_path)
    model_dir = Path(args.model).resolve().parent
    out = Path(args.out or model_dir / ("predictions" if command == "predict" else "evaluation"))
    store = resolve_store(args, cfg, meta, out)
    predict = command == "predict"
    if predict and (out / "manifest.json").exists():
        raise ConfigError(f"{out} already holds finished predictions ({out / 'manifest.json'}): "
                          "choose another --out or delete it")
    job = new_job(args.model, meta, store, out, args.partitions, predict=predict,
                  evaluate=not predict or bool(args.evaluate), scores=bool(getattr(args, "scores", False)),
                  embed=getattr(args, "embeddings", None), embed_dtype=getattr(args, "embedding_dtype", "float16"),
                  block_edges=args.edges_per_block, code_path=args.code_path)
    return job, int(store.manifest["num_nodes"]), len(meta["widths"])


def run_inference(command: str, cfg, args: argparse.Namespace) -> int:
    from grappa.inference.local_predict import run_local
    from grappa.runtime.local_job import LaunchError
    job, num_nodes, layers = build_job(command, args, cfg)
    Path(job.out).mkdir(parents=True, exist_ok=True)
    try:
        path = run_local(job, num_nodes, layers, progress=not args.quiet)
    except LaunchError as err:
        print(f"grappa: error: {err}", file=sys.stderr)
        return err.code
    print_summary(json.loads(path.read_text()), Path(job.out))
    return 0


def print_summary(m: dict, out: Path) -> None:
    peak = max((w.get("peak_pss_bytes") or 0) for w in m["per_worker"])
    print(f"{m['num_nodes']:,} nodes in {m['seconds']:.1f} s ({m['nodes_per_second']:,.0f} nodes/s) with "
          f"{m['workers']} workers, peak PSS per worker {peak / 2**20:.0f} MiB")
    for name, f in m["files"].items():
        print(f"  {out / f['file']}: {f['dtype']} {f['shape']} ({f['holds']})")
    ev = m.get("evaluation")
    if ev:
        accs = ", ".join(f"{s} {v['acc']:.4f}" for s, v in ev.items() if v["acc"] is not None)
        print(f"  accuracy: {accs}; report {out / 'evaluation.json'}")
    print(f"  manifest {out / 'manifest.json'}")
