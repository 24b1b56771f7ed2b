"""Command line: `grappa prepare | train | single | predict | evaluate | aggregator | worker`.

Configuration comes from `--config FILE` and/or flags (flags win), or from $GRAPPA_CONFIG in pods.
Exit codes: 0 ok, 1 failure, 2 invalid configuration (also a run directory holding another
run), 3 the job cannot run with this data or cannot write where it must,
143 stopped by SIGTERM with the last completed epoch checkpointed (retryable: resume continues).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Optional

import yaml

from grappa.config import ConfigError, TrainConfig, load_config
from grappa.inference.commands import FLAG_HELP, GRAPH_FLAGS, INFERENCE_COMMANDS, run_inference
from grappa.runtime.exit_codes import report_error, run_reporting
from grappa.runtime.stop import EXIT_STOPPED, Stopped
from grappa.util.files import ensure_writable, removed_if_left_empty

# flag -> dotted config field
FLAGS = {
    "strategy": ("strategy", str), "partitions": ("partitions", int), "dataset": ("dataset.name", str),
    "data_root": ("dataset.root", str), "download": ("dataset.download", None),
    "arch": ("model.arch", str), "layers": ("model.layers", int), "hidden": ("model.hidden", int),
    "dropout": ("model.dropout", float), "mode": ("training.mode", str),
    "epochs": ("training.epochs", int), "batch_size": ("training.batch_size", int),
    "lr": ("training.lr", float), "seed": ("training.seed", int),
    "eval_every": ("training.eval_every", int), "correction": ("grappa.correction", str),
    "shrinkage": ("grappa.shrinkage", float), "chunks": ("grappa.chunks", int),
    "partition_seed": ("grappa.partition_seed", int), "rounds_every": ("grappa.rounds.every", int),
    "pairing": ("grappa.rounds.pairing", str), "checkpoint_interval": ("checkpoint.interval", int),
    "run_dir": ("run_dir", str), "store_dir": ("store_dir", str), "metrics_port": ("metrics_port", int),
    "feature_dtype": ("dataset.feature_dtype", str), "block_edges": ("prepare.block_edges", int),
    "prepare_workers": ("prepare.workers", int),
}
# Where a custom model's code is: model.custom.codePath for training, the model file's code for
# predict / evaluate (a flag of its own, since those commands take no model section).
CODE_PATH_HELP = ("a .py file or package folder holding the model's module (model.custom.codePath; "
                  "predict/evaluate: where the model file's code is now)")


def add_config_flags(p: argparse.ArgumentParser, only: Optional[tuple[str, ...]] = None,
                     helps: Optional[dict[str, str]] = None) -> None:
    """The config's flags (`only` these, e.g. an inference command's graph flags), `--config`
    and `--set`."""
    p.add_argument("--config", help="YAML or JSON file with a TrainConfig (fields: trainer/grappa/config.py)")
    for name, (field, typ) in FLAGS.items():
        if only is not None and name not in only:
            continue
        flag = "--" + name.replace("_", "-")
        text = (helps or {}).get(name, f"sets {field}")
        if typ is None:
            p.add_argument(flag, action="store_true", default=None, help=text)
        else:
            p.add_argument(flag, type=typ, help=text)
    if only is None:
        p.add_argument("--fanouts", help="comma-separated fanouts, input layer first (training.fanouts)")
        p.add_argument("--factory", help="your own model: 'package.module:function' returning a PyG "
                                         "model (model.custom.factory; README, \"Bring your own model\")")
    p.add_argument("--code-path", help=CODE_PATH_HELP)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any config field, dotted (e.g. --set dataset.synthetic.num_nodes=20000)")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    overrides: dict = {}
    for name, (field, _) in FLAGS.items():
        value = getattr(args, name, None)
        if value is not None:
            overrides[field] = value
    if getattr(args, "command", None) not in INFERENCE_COMMANDS:
        for flag, field in (("factory", "model.custom.factory"), ("code_path", "model.custom.code_path")):
            if getattr(args, flag, None):
                overrides[field] = getattr(args, flag)
    if getattr(args, "fanouts", None):
        try:
            overrides["training.fanouts"] = [int(v) for v in args.fanouts.split(",")]
        except ValueError:
            raise ConfigError(f"--fanouts {args.fanouts!r}: give integers separated by commas, e.g. 15,10,5") from None
    for item in getattr(args, "set", []):
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE, e.g. grappa.shrinkage=0.5")
        key, value = item.split("=", 1)
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({problem}); "
                              f"{yaml_fix(key.strip(), value)}") from None
    return load_config(getattr(args, "config", None), overrides)


_PLAIN = re.compile(r"^[A-Za-z0-9_.+-]*$")  # YAML reads these unquoted as themselves


def _quoted(item: str) -> str:
    item = item.strip().strip("'\"")
    return item if _PLAIN.match(item) else json.dumps(item)


def yaml_fix(key: str, value: str) -> str:
    """A --set the user can paste: a list stays a list (quoting the whole value would make it a
    string, which the field then refuses), its items quoted where YAML reads them otherwise."""
    v = value.strip()
    if v.startswith("["):
        items = ", ".join(_quoted(i) for i in v.strip("[]").split(",") if i.strip())
        return (f"write the list in brackets and quote it whole for the shell, each item holding "
                f"YAML's special characters (* & ! : # ...) in double quotes: --set '{key}=[{items}]'")
    if v.startswith("{"):
        return "write a mapping as {field: value}, values holding YAML's special characters in double quotes"
    return f"quote it: --set '{key}={json.dumps(v)}'"


def setup_logging() -> None:
    logging.basicConfig(level=os.environ.get("GRAPPA_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    threads = os.environ.get("GRAPPA_THREADS")
    if threads:
        import torch
        torch.set_num_threads(int(threads))


def check_model(cfg: TrainConfig, manifest: dict) -> None:
    """A custom model imports, builds and runs a forward and backward on a small graph, before
    any worker starts (ModelCodeError, exit 3, names the factory and the user's line)."""
    if cfg.model.user_model is None:
        return
    import torch

    from grappa.models.build import build_model
    from grappa.models.custom import smoke_test
    from grappa.models.params import num_params
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.training.seed)
        model = build_model(cfg.model, manifest["num_features"], manifest["num_classes"], cfg.training.mode)
    smoke_test(model, cfg.training.mode)
    how = "layer by layer" if model.layerwise else f"on full {model.num_layers}-hop neighbourhoods"
    print(f"grappa: model {cfg.model.custom.factory}: {num_params(model):,} parameters, runs on a small "
          f"graph; exact inference {how}", file=sys.stderr)


def cmd_prepare(cfg: TrainConfig, reprepare: bool = False) -> int:
    from grappa.data.store.preparation import TRAINING, prepare_store
    check_model_imports(cfg)  # seconds, before a graph that may take long
    purpose = TRAINING
    if os.environ.get("GRAPPA_PREDICT"):  # a predict job's prepare pod: a graph for inference
        from grappa.inference.pod import prepare_purpose
        purpose = prepare_purpose()
    manifest = prepare_store(cfg, progress=True, reprepare=reprepare, purpose=purpose)
    if purpose == TRAINING:
        check_model(cfg, manifest)
    print(f"chunk store ready at {store_where(cfg)}: {manifest['num_nodes']:,} nodes, "
          f"{manifest['num_edges']:,} edges in {manifest['num_chunks']} chunks")
    run = manifest.get("prepare")
    if run:  # how the store was made (also when it was made earlier)
        peak = run["peak_rss_bytes"]["parent"] + sum(run["peak_rss_bytes"]["workers"])
        print(f"prepared in {run['seconds']:.1f} s with {run['workers']} worker(s); peak memory "
              f"{peak / 2**30:.2f} GiB at most (parent + workers)")
    return 0


def store_where(cfg: TrainConfig) -> str:
    s3 = cfg.storage.bucket_store
    return f"s3://{s3.bucket}/{s3.prefix} (staged in {cfg.store_path})" if s3 else str(cfg.store_path)


def claim_run_dir(cfg: TrainConfig, fresh: bool = False, command: str = "train") -> Optional[dict]:
    """The run directory is writable, and holds no other run (or, with --start-over, no run).
    Returns the report of this very run when the directory holds it finished."""
    from grappa.app.rerun import check_contents, check_rerun, start_over
    check_contents(Path(cfg.run_dir))  # before anything is written there
    ensure_writable(cfg.run_dir, "runDir", "--run-dir")
    home = None
    if cfg.storage.run_home is not None:  # the run lives in the bucket: judged as if it were here
        from grappa.data.s3.run_home import RunHome
        home = RunHome(cfg.storage.run_home)
    if fresh:
        removed = start_over(Path(cfg.run_dir))
        if removed:
            print(f"grappa: --start-over: removed {', '.join(removed)} from {cfg.run_dir}", file=sys.stderr)
        if home is not None and home.clear():
            print(f"grappa: --start-over: removed the run's objects from {home.where}", file=sys.stderr)
        return None
    if home is not None:
        pulled = home.pull(Path(cfg.run_dir))
        if pulled:
            print(f"grappa: {home.where} holds a run: {', '.join(pulled)} downloaded into {cfg.run_dir}",
                  file=sys.stderr)
    return check_rerun(cfg, command)


def print_finished(report: dict, cfg: TrainConfig, command: str) -> None:
    """A rerun of a finished run: said, with its result, and nothing started; and when the
    dataset's files changed since its store was prepared, that too (the run stays as it was)."""
    from grappa.data.store.fingerprint import changed_since_prepared
    from grappa.data.store.manifest import MANIFEST
    extend = "add --epochs N to extend it, " if command == "train" else ""
    print(f"grappa: {cfg.run_dir} holds this run, finished ({report['epochs']} epochs): nothing to "
          f"train; {extend}or --start-over to train it again", file=sys.stderr)
    if command == "train" and (cfg.store_path / MANIFEST).is_file():
        _, changed = changed_since_prepared(json.loads((cfg.store_path / MANIFEST).read_text()))
        if changed:
            print(f"grappa: note: the dataset's files changed since the run's store was prepared "
                  f"({'; '.join(changed)}); to train on them: --start-over --reprepare", file=sys.stderr)
    print_result(report["result"], report, cfg.run_dir)


def cmd_train(cfg: TrainConfig, reprepare: bool = False) -> int:
    from grappa.data.store.preparation import prepare_store
    from grappa.runtime.local_job import LaunchError, LocalJob, rank_modules
    from grappa.runtime.zygote import Zygote
    # Before the user's code is imported or a graph is prepared (torch's threads start there):
    # the ranks' zygote as a fork of this process, which then has torch for the prepare too.
    zygote = Zygote.forked_here(rank_modules(cfg))
    try:
        print(f"grappa: preparing chunk store at {store_where(cfg)}", file=sys.stderr)
        check_model_imports(cfg)
        manifest = prepare_store(cfg, progress=True, reprepare=reprepare)
        check_model(cfg, manifest)
        method = (f"correction={cfg.grappa.correction}, rounds every {cfg.grappa.rounds.every} epochs"
                  if cfg.strategy == "grappa" else f"strategy {cfg.strategy}, fixed partitions")
        print(f"grappa: training {cfg.model.name if cfg.model.user_model else cfg.model.arch.upper()} "
              f"x{cfg.model.layers} on {cfg.dataset.name} "
              f"with P={cfg.partitions} workers ({cfg.training.mode}, {method}); logs in {cfg.run_dir}/logs",
              file=sys.stderr)
        try:
            report = LocalJob(cfg, zygote=zygote).run()
        except LaunchError as err:
            report_error(err)
            return err.code
    finally:
        if zygote is not None:
            zygote.close()  # unused when the job never started (LocalJob closed it otherwise)
    print_result(report["result"], report, cfg.run_dir)
    return 0


def check_model_imports(cfg: TrainConfig) -> None:
    """A custom model's factory imports (before a large graph is prepared)."""
    if cfg.model.user_model is not None:
        from grappa.models.user_code import load_factory
        load_factory(cfg.model.custom.factory, cfg.model.custom.code_path)


def print_result(result: dict, report: dict, run_dir: str) -> None:
    acc = result.get("test_acc")
    mb = (report.get("train_bytes_total", 0) + report.get("fetch_bytes_total", 0)) / 1e6
    if "test_mrr" in result:  # link prediction
        def f(key: str) -> str:
            return "n/a" if result.get(key) is None else f"{result[key]:.4f}"
        print(f"final test MRR {f('test_mrr')}, Hits@10 {f('test_hits@10')}, Hits@50 "
              f"{f('test_hits@50')}, Hits@100 {f('test_hits@100')}, AUC {f('test_auc')} (best "
              f"validation MRR {result['best_val']:.4f} at epoch {result['best_epoch']}); training "
              f"traffic {mb:.1f} MB; report {run_dir}/report.json, plot {run_dir}/training.png")
        return
    print(f"final test accuracy {acc:.4f} (best validation {result['best_val']:.4f} at epoch "
          f"{result['best_epoch']}); training traffic {mb:.1f} MB; report {run_dir}/report.json, "
          f"plot {run_dir}/training.png")


def cmd_single(cfg: TrainConfig) -> int:
    if cfg.task != "node-classification":
        raise ConfigError(f"task: grappa single trains node-classification only so far (task is "
                          f"{cfg.task!r}): run it with grappa train (strategy grappa, --partitions 1 "
                          "for one worker)")
    from grappa.app.report import write_report
    from grappa.data.datasets import load_dataset
    from grappa.runtime.single_process import train_single
    from grappa.util.progress_bar import progress_bar
    data = load_dataset(cfg.dataset)
    with progress_bar(cfg.training.epochs, "epochs", "ep") as bar:
        def tick(rec: dict) -> None:
            bar.update(1)
            if rec.get("val_acc") is not None:
                bar.set_postfix(loss=f"{rec['loss']:.3f}", val=f"{rec['val_acc']:.3f}")
        result, history = train_single(cfg, data, on_epoch=tick)
    report_path = write_report(cfg.run_dir, json.loads(cfg.model_dump_json(by_alias=True)), history, result,
                               extra={"evaluation": "exact evaluation, full graph", "command": "single"})
    print_result(result, json.loads(report_path.read_text()), cfg.run_dir)
    return 0


def cmd_aggregator(cfg: TrainConfig) -> int:
    from grappa.app.roles import run_aggregator
    run_aggregator(cfg)
    return 0


def cmd_worker(cfg: TrainConfig) -> int:
    from grappa.app.roles import run_worker
    run_worker(cfg)
    return 0


COMMANDS = {
    "prepare": ("write the chunk store for a job (idempotent)", cmd_prepare),
    "train": ("run a Grappa job locally: aggregator + P workers on 127.0.0.1", cmd_train),
    "single": ("single-process full-graph baseline (no partitions)", cmd_single),
    "aggregator": ("run rank 0 (used by pods and the local launcher)", cmd_aggregator),
    "worker": ("run a worker rank (used by pods and the local launcher)", cmd_worker),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grappa", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, _) in COMMANDS.items():
        add_config_flags(sub.add_parser(name, help=help_text, description=help_text))
    for name in ("train", "single"):
        sub.choices[name].add_argument(
            "--start-over", action="store_true",
            help="delete the run directory's results (not its chunk store) and train from scratch")
    for name in ("prepare", "train"):
        sub.choices[name].add_argument(
            "--reprepare", action="store_true",
            help="prepare the chunk store again when the dataset's files changed since it was made")
    for name, (help_text, add_arguments) in INFERENCE_COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_config_flags(p, only=GRAPH_FLAGS, helps=FLAG_HELP)  # the graph: --dataset, --config, --set dataset.*
        add_arguments(p)
    return parser


def end_process(code: int) -> None:
    """Exit a rank's process without the interpreter's teardown, once its work is saved: the
    C++ side of torch.distributed (gloo's threads, the store's client) is then never destroyed
    in an order it does not expect. Seen once on a loaded machine: a worker that had finished
    died in teardown with SIGABRT ("terminate called without an active exception"), which
    failed a finished job."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_command(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.command not in ("aggregator", "worker"):
        setup_logging()
    if args.command in INFERENCE_COMMANDS:
        return run_inference(args.command, cfg, args)
    extra = {"reprepare": args.reprepare} if args.command in ("prepare", "train") else {}
    if args.command == "aggregator":
        ensure_writable(cfg.run_dir, "runDir", "--run-dir")
    if args.command in ("aggregator", "worker"):
        end_process(COMMANDS[args.command][1](cfg, **extra))  # its group closed, files written
    if args.command not in ("train", "single"):
        return COMMANDS[args.command][1](cfg, **extra)
    with removed_if_left_empty(cfg.run_dir):  # refused data leaves no empty run directory
        finished = claim_run_dir(cfg, fresh=args.start_over, command=args.command)
        if finished is not None:
            print_finished(finished, cfg, args.command)
            return 0
        return COMMANDS[args.command][1](cfg, **extra)


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_reporting(lambda: run_command(args))
    except Stopped as err:  # SIGTERM, the last completed epoch saved (logged where it happened)
        if str(err):
            print(f"grappa: {err}", file=sys.stderr)
        # No interpreter teardown: destroying a gloo group whose peers are gone holds the GIL
        # for seconds (measured ~4 s), time the grace period should not pay for.
        end_process(EXIT_STOPPED)
