"""`grappa predict` and `grappa evaluate`: arguments, the checks before anything runs, the summary.

Which graph (graph.py): `--store DIR` (a prepared chunk store), or a dataset given the usual way
(`--dataset`, `--config`, `--set dataset.*`; prepared into `--store-dir`, default OUT-store beside
the output folder, needing edges and features only unless the command scores), or by default the
store the model was trained on, checked by its fingerprint. Where the outputs go (out_folder.py):
a new or empty folder, or one holding this command's own outputs, checked for writing before
anything runs; a rerun resumes, or says the job is finished. Torch is imported only once a
command runs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Optional

EMBED_DTYPES = ("float16", "float32")
# The configuration flags an inference command takes: the graph to run on and its store, and
# the worker count; training's flags (model, optimizer, epochs, ...) mean nothing here.
GRAPH_FLAGS = ("dataset", "data_root", "download", "partitions", "chunks", "partition_seed", "store_dir",
               "feature_dtype", "block_edges", "prepare_workers")
FLAG_HELP = {"partitions": "worker processes P (default: the store's chunks, at most 4); a dataset "
                           "prepared here gets P chunks unless --chunks",
             "store_dir": "where a dataset given here is prepared (default: OUT-store beside the outputs)"}
# Settings that say where a dataset is or how to store it, not which graph it is.
WHERE_ONLY = {"data_root": "--data-root", "download": "--download", "store_dir": "--store-dir",
              "chunks": "--chunks", "partition_seed": "--partition-seed", "feature_dtype": "--feature-dtype"}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a model file: RUN_DIR/model.pt or a checkpoint, or one in "
                                                  "a bucket: s3://BUCKET/KEY.pt (outputs go beside it there)")
    p.add_argument("--store", help="a prepared chunk store to run on (default: the model's training "
                                   "store, or the dataset given by --dataset/--config)")
    p.add_argument("--out", help="output folder (default: next to the model, predictions/ or evaluation/)")
    p.add_argument("--edges-per-block", type=int, help="in-edges per block of rows: bounds each worker's memory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--start-over", action="store_true",
                   help="replace the outputs of another job of this command in --out (never other files)")
    p.add_argument("--reprepare", action="store_true",
                   help="prepare the dataset given here again when its files changed since its store was made")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--scores", action="store_true", help="also write scores.npy: class probabilities, float16")
    p.add_argument("--embeddings", nargs="?", type=int, const=0, metavar="LAYER",
                   help="also write embeddings.npy: the output of layer LAYER (1..L; default the last "
                        "hidden layer)")
    p.add_argument("--embedding-dtype", choices=EMBED_DTYPES, default="float16")
    p.add_argument("--evaluate", action="store_true", help="also score the splits (evaluation.json)")
    link = p.add_argument_group("link-prediction models (inference/link_outputs.py)")
    link.add_argument("--pairs", metavar="FILE", help="score these node pairs (.npy [2, E] or [E, 2], or text "
                                                      "'u v' lines): pair_scores.npy")
    link.add_argument("--queries", metavar="FILE", help="for these node ids (.npy [Q] or text), the top-k "
                                                        "candidates: topk.npy, topk_scores.npy")
    link.add_argument("--candidates", metavar="FILE", help="the nodes --queries' candidates come from "
                                                           "(default: every node)")
    link.add_argument("--top-k", type=int, metavar="K", help="candidates kept per query node (default 10)")


INFERENCE_COMMANDS = {
    "predict": ("classes (and optionally scores and embeddings) of every node with a trained model",
                add_predict_arguments),
    "evaluate": ("score a trained model on the splits, exactly (full neighbourhoods)", _common),
}


def _set_keys(args: argparse.Namespace) -> list[str]:
    return [s.split("=", 1)[0].strip() for s in args.set]


def _dataset_named(args: argparse.Namespace) -> bool:
    where = {"dataset.root", "dataset.download"}
    return bool(args.config or args.dataset or
                any(k.startswith("dataset.") and k not in where for k in _set_keys(args)))


def _check_graph_flags(args: argparse.Namespace) -> None:
    """Settings of a dataset to prepare, with no dataset named, would prepare the default one
    (synthetic csbm) behind the user's back: refused, saying what names a graph."""
    if args.store or _dataset_named(args):
        return
    given = [flag for name, flag in WHERE_ONLY.items() if getattr(args, name, None) is not None]
    given += [f"--set {k}" for k in _set_keys(args) if k in ("dataset.root", "dataset.download")]
    if given:
        from grappa.config import ConfigError
        raise ConfigError(
            f"{', '.join(given)} {'says' if len(given) == 1 else 'say'} where a dataset is or how to prepare "
            "it, not which graph to run on: "
            "add --dataset NAME (for your own files also --set dataset.path=FOLDER) or --config FILE, or "
            "leave them out to run on the model's training graph")


def check_width(model_path: str, meta: dict, have: int, where) -> None:
    from grappa.models.model_file import ModelFileError
    want = int(meta["num_features"])
    if want != int(have):
        raise ModelFileError(
            f"model {model_path} takes {want} input features per node but the graph in {where} "
            f"has {have}: predict on a graph with {want}-wide features (the model's dataset: "
            f"{meta['dataset'].get('name')})")


def check_fit(model_path: str, meta: dict, manifest: dict, store_path, evaluate: bool) -> None:
    from grappa.data.errors import DatasetError
    from grappa.models.model_file import ModelFileError
    check_width(model_path, meta, manifest["num_features"], store_path)
    if not evaluate:
        return
    if meta.get("task") == "link-prediction":
        from grappa.inference.link_outputs import check_evaluable
        return check_evaluable(model_path, store_path, manifest)
    if not any(c.get(s) for c in manifest["chunks"] for s in ("train", "val", "test")):
        raise DatasetError(
            f"the graph in {store_path} has no labelled node in a train, val or test split, so there is "
            "nothing to score: evaluating needs labels.npy and the split files; `grappa predict` "
            "(without --evaluate) needs neither")
    if int(manifest["num_classes"]) > int(meta["num_classes"]):
        raise ModelFileError(
            f"model {model_path} predicts {meta['num_classes']} classes but the labels in {store_path} "
            f"go up to {int(manifest['num_classes']) - 1}: evaluate on a dataset with the model's classes")


def new_job(model: str, meta: dict, store, out: Path, workers: Optional[int], *, predict: bool,
            evaluate: bool, scores: bool = False, embed: Optional[int] = None,
            embed_dtype: str = "float16", block_edges: Optional[int] = None,
            code_path: Optional[str] = None, pairs: Optional[str] = None, queries: Optional[str] = None,
            candidates: Optional[str] = None, top_k: Optional[int] = None):
    """The job after every check that needs no worker: the model fits the graph, the layer and
    the worker count exist."""
    from grappa.config import ConfigError
    from grappa.inference.job import PredictJob
    from grappa.models.layerwise import DEFAULT_BLOCK_EDGES
    from grappa.models.model_file import store_fingerprint
    man = store.manifest
    check_fit(model, meta, man, store.path, evaluate)
    from grappa.inference.link_outputs import check_request
    link = check_request(model, meta, int(man["num_nodes"]), scores=scores, pairs=pairs, queries=queries,
                         candidates=candidates, top_k=top_k, tables=man.get("tables"))
    layers = len(meta["widths"])  # passes of exact inference: the layers, or 1 (custom.py)
    if embed is not None and layers < int(meta["model"]["layers"]):
        raise ConfigError(f"model {model} ({meta['model']['custom']['factory']}) does not expose its "
                          "layers (an inference_per_layer method, as PyG's BasicGNN has), so only its "
                          "output is computed: drop --embeddings, or add inference_per_layer to the model")
    if link and predict:  # a link model's output is its embedding: written by default
        embed = embed or layers
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
                      code_path=str(Path(code_path).resolve()) if code_path else None, **link)


def resolve_graph(args: argparse.Namespace, cfg, meta: dict, out: Path, scores_splits: bool):
    """The graph to run on (graph.py): named by --store or a dataset, else the model's own."""
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.inference.graph import named_graph, training_graph
    if args.store:
        return named_graph(ChunkStore(args.store), meta, f"--store {args.store}")
    if not _dataset_named(args):  # a model from a bucket: its store mirrored beside it (bucket_model.py)
        return training_graph(args.model, meta, mirror=getattr(args, "store_mirror", None))
    from grappa.data.store.preparation import Purpose, prepare_store
    if not cfg.store_dir:
        cfg = cfg.model_copy(update={"store_dir": str(out.parent / f"{out.name}-store")})
    # inference needs edges and features; labels and splits only to score. The feature width is
    # checked on the source's headers, before a byte of the store is written.
    purpose = Purpose(need_labels=scores_splits,
                      check_source=lambda src: check_width(args.model, meta, src.num_features, src.feature_origin))
    prepare_store(cfg, progress=not args.quiet, reprepare=args.reprepare, purpose=purpose)
    where = f" at {cfg.dataset.path}" if cfg.dataset.path else ""
    return named_graph(ChunkStore(cfg.store_path), meta, f"the dataset given ({cfg.dataset.name}{where})")


def output_folder(command: str, args: argparse.Namespace) -> Path:
    default = Path(args.model).resolve().parent / ("predictions" if command == "predict" else "evaluation")
    return Path(args.out) if args.out else default


def build_job(command: str, args: argparse.Namespace, cfg, out: Path):
    from grappa.models.model_file import read_meta
    meta, _ = read_meta(args.model)
    if (meta.get("model") or {}).get("custom"):  # its code is here and unchanged, before any worker
        from grappa.models.model_file import load_model
        load_model(args.model, args.code_path)
    predict = command == "predict"
    evaluate = not predict or bool(args.evaluate)
    graph = resolve_graph(args, cfg, meta, out, scores_splits=evaluate)
    job = new_job(args.model, meta, graph.store, out, args.partitions, predict=predict, evaluate=evaluate,
                  scores=bool(getattr(args, "scores", False)), embed=getattr(args, "embeddings", None),
                  embed_dtype=getattr(args, "embedding_dtype", "float16"), block_edges=args.edges_per_block,
                  code_path=args.code_path, pairs=getattr(args, "pairs", None),
                  queries=getattr(args, "queries", None), candidates=getattr(args, "candidates", None),
                  top_k=getattr(args, "top_k", None))
    return job, int(graph.store.manifest["num_nodes"]), len(meta["widths"])


def infer(command: str, cfg, args: argparse.Namespace, bucket_out=None) -> tuple[Path, dict]:
    """The output folder and its manifest, by the rules of every writing command: the folder is
    new, empty or this command's own; the same finished job is not run again. `bucket_out` (a
    model in a bucket, bucket_model.py): the same rules for the outputs' prefix there, and the
    outputs uploaded to it."""
    from grappa.inference.out_folder import claim, previous
    from grappa.util.files import ensure_writable, removed_if_left_empty
    _check_graph_flags(args)
    out = output_folder(command, args)
    previous(out)  # a folder holding anything but this command's outputs: refused before any work
    with removed_if_left_empty(out):  # a job refused below leaves no empty output folder
        ensure_writable(out, "--out", "--out")
        job, num_nodes, layers = build_job(command, args, cfg, out)
        there = bucket_out.claim(command, job, args.start_over) if bucket_out is not None else None
        done = claim(out, command, job, start_over=args.start_over)
        if there is not None and done is None:
            print(f"grappa: {bucket_out.home.uri(bucket_out.out)} holds this {command}'s finished outputs: "
                  "nothing to do; add --start-over to compute them again", file=sys.stderr)
            if bucket_out.local_out:
                bucket_out.download_outputs(out)
            return out, there
        if done is not None:
            print(f"grappa: {out} holds this {command}'s finished outputs (the same model, graph and "
                  "outputs asked for): nothing to do; add --start-over to compute them again", file=sys.stderr)
            if bucket_out is not None and there is None:
                bucket_out.upload(out)
            return out, done
        from grappa.inference.local_predict import run_local
        path = run_local(job, num_nodes, layers, progress=not args.quiet)
        if bucket_out is not None:
            bucket_out.upload(out)
    return out, json.loads(path.read_text())


def infer_from_bucket(command: str, cfg, args: argparse.Namespace) -> tuple[Path, dict]:
    """infer on a model in a bucket (bucket_model.py): downloaded into a temporary folder, its
    store mirrored beside it, the outputs in --out (default: that folder) and the bucket."""
    import shutil
    import tempfile

    from grappa.inference.bucket_model import BucketModel
    bm = BucketModel(args.model, cfg.storage.s3, command)
    bm.local_out = bool(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="grappa-model-"))
    try:
        local = argparse.Namespace(**{**vars(args), "model": str(bm.download(tmp)),
                                      "out": args.out or str(tmp / bm.out.rstrip("/")),
                                      "store_mirror": tmp / "store"})
        return infer(command, cfg, local, bucket_out=bm)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_inference(command: str, cfg, args: argparse.Namespace) -> int:
    from grappa.inference.bucket_model import is_bucket_model, manifest_home
    if is_bucket_model(args.model):
        out, manifest = infer_from_bucket(command, cfg, args)
        if not args.out:  # the temporary folder is gone: the outputs are in the bucket
            out = manifest_home(args.model, command)
    else:
        out, manifest = infer(command, cfg, args)
    print_summary(manifest, out)
    return 0


def coordinator_memory(m: dict) -> str:
    """This process's peak RSS, and its memory cgroup's peak (outside a container: the session's,
    named, since the workers' and anything else there count in it too)."""
    c = m.get("coordinator")
    if not c:
        return ""
    text = f", this process {c['peak_rss_bytes'] / 2**20:.0f} MiB RSS"
    group = c.get("cgroup")
    if group and c.get("cgroup_peak_bytes"):
        text += (f"; memory cgroup {group['path']}: peak {c['cgroup_peak_bytes'] / 2**20:.0f} MiB with page "
                 f"cache, working set {c['cgroup_working_set_peak_bytes'] / 2**20:.0f} MiB")
    return text


def print_summary(m: dict, out) -> None:
    peak = max((w.get("peak_pss_bytes") or 0) for w in m["per_worker"])
    print(f"{m['num_nodes']:,} nodes in {m['seconds']:.1f} s ({m['nodes_per_second']:,.0f} nodes/s) with "
          f"{m['workers']} workers, peak PSS per worker {peak / 2**20:.0f} MiB{coordinator_memory(m)}")
    for name, f in m["files"].items():
        shape = f"{f['dtype']} {f['shape']}" if "dtype" in f else f"Parquet, {f['rows']:,} rows, columns {', '.join(f['columns'])}"
        print(f"  {out}/{f['file']}: {shape} ({f['holds']})")
    ev = m.get("evaluation")
    if ev and m.get("task") == "link-prediction":
        from grappa.inference.link_outputs import summary_line
        print(f"  {summary_line(ev)}; report {out}/evaluation.json")
    elif ev:
        accs = ", ".join(f"{s} {v['acc']:.4f}" for s, v in ev.items() if v["acc"] is not None)
        print(f"  accuracy: {accs}; report {out}/evaluation.json")
    print(f"  manifest {out}/manifest.json")
