"""The Python API: `grappa.train`, `grappa.predict`, `grappa.evaluate` (docs/api.md).

Each runs the same local job as the command line (`grappa train | predict | evaluate`: the chunk
store prepared, the aggregator and P workers as processes, the same checks and rerun rules) and
returns its result instead of printing it; an error is raised (ConfigError, ModelCodeError,
LaunchError with the failed process's exit code) instead of becoming an exit code.

Settings come as a TrainConfig, a mapping, or a YAML/JSON file, with keywords on top: the
command line's flag names (`dataset="cora"`, `partitions=4`, `epochs=50`, `mode="mini-batch"`),
any top-level field (`run_dir=...`, `strategy=...`), a section as a mapping (`training={...}`),
or dotted fields in `set={"grappa.rounds.every": 5}`. `model` is a factory: a function or class
defined at a module's top level (its module file becomes `model.custom.codePath`, so the training
processes import it), or a 'module:function' string.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from grappa.config import ConfigError, TrainConfig, config_with, load_config

ConfigLike = Union[TrainConfig, dict, str, Path, None]


def make_config(config: ConfigLike = None, *, model: Union[str, Callable, None] = None,
                model_kwargs: Optional[dict] = None, code_path: Optional[str] = None,
                set: Optional[dict] = None, **settings: Any) -> TrainConfig:
    """The TrainConfig of `config` with the keywords on top (module docstring)."""
    from grappa.app.cli import FLAGS
    overrides: dict[str, Any] = {}
    for key, value in settings.items():
        if key in FLAGS:
            overrides[FLAGS[key][0]] = value
        elif key == "fanouts":
            overrides["training.fanouts"] = list(value)
        elif key in TrainConfig.model_fields or any(f.alias == key for f in TrainConfig.model_fields.values()):
            _flatten(TrainConfig, key, value, overrides)
        else:
            raise ConfigError(f"grappa: unknown setting {key}=...: use a flag's name (e.g. epochs=, "
                              "dataset=), a field of TrainConfig, or set={'section.field': value}")
    overrides.update(set or {})
    if model is not None:
        factory, found_path = _factory_of(model)
        overrides["model.custom.factory"] = factory
        if code_path or found_path:
            overrides["model.custom.code_path"] = str(code_path or found_path)
    elif code_path:
        overrides["model.custom.code_path"] = str(code_path)
    if model_kwargs is not None:
        overrides["model.custom.kwargs"] = dict(model_kwargs)
    if isinstance(config, (str, Path)):
        return load_config(str(config), overrides)
    data = json.loads(config.model_dump_json(by_alias=True, exclude_none=True)) if isinstance(config, TrainConfig) \
        else dict(config or {})
    return config_with(data, overrides, "grappa.train settings")


def _flatten(model, key: str, value: Any, out: dict[str, Any], prefix: str = "") -> None:
    """A section given as a mapping becomes dotted fields, so it adds to the config's section
    instead of replacing it (a free-form mapping such as kwargs stays whole)."""
    from grappa.config import _field
    name, sub = _field(model, key)
    if sub is None or not isinstance(value, dict):
        out[prefix + name] = value
        return
    for k, v in value.items():
        _flatten(sub, k, v, out, f"{prefix}{name}.")


def _factory_of(model: Union[str, Callable]) -> tuple[str, Optional[str]]:
    if isinstance(model, str):
        return model, None
    from grappa.models.user_code import describe_callable
    return describe_callable(model)


@dataclass
class TrainResult:
    """What a training run left: its report and where its files are."""

    config: TrainConfig
    report: dict
    run_dir: Path

    @property
    def result(self) -> dict:
        """test_acc (at the best validation epoch), best_val, best_epoch."""
        return self.report["result"]

    @property
    def history(self) -> list[dict]:
        return self.report.get("history", [])

    @property
    def model_path(self) -> Path:
        return self.run_dir / "model.pt"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.json"

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    def load_model(self):
        """The trained model (best-validation parameters) in eval mode: the user's own module
        for a custom model, else the built-in GNN."""
        from grappa.models.model_file import load_model
        model = load_model(self.model_path).model
        return getattr(model, "net", model)


def _refuse_in_a_spawned_import(what: str) -> None:
    """A worker process importing an unguarded script runs none of its calls (util/spawned.py)."""
    from grappa.util.spawned import importing_main, unguarded
    if importing_main():
        raise RuntimeError(unguarded(what))


def train(config: ConfigLike = None, *, model: Union[str, Callable, None] = None,
          model_kwargs: Optional[dict] = None, code_path: Optional[str] = None,
          set: Optional[dict] = None, start_over: bool = False, progress: bool = True,
          **settings: Any) -> TrainResult:
    """Train as `grappa train` does; returns the report and the run's paths."""
    _refuse_in_a_spawned_import("grappa.train")
    from grappa.app.cli import check_model, check_model_imports, claim_run_dir
    from grappa.data.store.preparation import prepare_store
    from grappa.runtime.local_job import LocalJob
    cfg = make_config(config, model=model, model_kwargs=model_kwargs, code_path=code_path, set=set,
                      **settings)
    claim_run_dir(cfg, fresh=start_over)
    check_model_imports(cfg)
    manifest = prepare_store(cfg, progress=progress)
    check_model(cfg, manifest)
    report = LocalJob(cfg, progress=progress).run()
    return TrainResult(cfg, report, Path(cfg.run_dir))


@dataclass
class PredictResult:
    """A finished predict or evaluate run: its manifest and where its files are."""

    out: Path
    manifest: dict = field(repr=False)

    @property
    def files(self) -> dict[str, Path]:
        return {name: self.out / f["file"] for name, f in self.manifest.get("files", {}).items()}

    @property
    def evaluation(self) -> Optional[dict]:
        """Accuracy and loss per split, when evaluated."""
        return self.manifest.get("evaluation")

    def load(self, name: str = "predictions"):
        """One output as a numpy array (row v is node v), memory-mapped."""
        from grappa.util.npy import map_npy  # numpy only when an output is read
        return map_npy(self.files[name])


def _inference(command: str, model, config: ConfigLike, *, store, out, workers, code_path, progress,
               edges_per_block, set, **settings) -> PredictResult:
    _refuse_in_a_spawned_import(f"grappa.{command}")
    from grappa.inference.bucket_model import is_bucket_model
    from grappa.inference.commands import infer, infer_from_bucket
    bucket = isinstance(model, str) and is_bucket_model(model)
    if bucket and not out:
        raise ConfigError(f"grappa.{command}: model {model} is in a bucket: give out=, a local folder the "
                          "result's arrays are read from (the outputs go beside the model in the bucket too)")
    path = model if bucket else model.model_path if isinstance(model, TrainResult) else Path(model)
    graph = {k: settings.pop(k) for k in list(settings) if k in ("dataset", "data_root", "download")}
    options = {k: settings.pop(k) for k in ("scores", "embeddings", "embedding_dtype", "evaluate", "pairs",
                                            "queries", "candidates", "top_k") if k in settings}
    if settings:
        raise ConfigError(f"grappa.{command}: unknown settings {sorted(settings)}")
    # a graph named here; storage.s3.* (a bucket model's endpoint) names none
    given = config is not None or bool(graph) or any(not k.startswith("storage.") for k in (set or {}))
    cfg = make_config(config, set=set, **graph) if given or set else TrainConfig()
    # the command line's own arguments, defaults and all, so both take the same path (infer)
    from grappa.app.cli import build_parser
    args = build_parser().parse_args([command, "--model", str(path)])
    vars(args).update(
        store=str(store) if store else None, out=str(out) if out else None,
        edges_per_block=edges_per_block, quiet=not progress, partitions=workers,
        config=str(config) if isinstance(config, (str, Path)) else None,
        dataset=cfg.dataset.name if given else None,
        set=[f"{k}=" for k in (set or {})], code_path=str(code_path) if code_path else None,
        **({"scores": bool(options.get("scores")), "embeddings": options.get("embeddings"),
            "embedding_dtype": options.get("embedding_dtype", "float16"),
            "evaluate": bool(options.get("evaluate")),
            **{k: (None if options.get(k) is None else str(options[k]) if k != "top_k" else int(options[k]))
               for k in ("pairs", "queries", "candidates", "top_k")}} if command == "predict" else {}))
    out, manifest = (infer_from_bucket if bucket else infer)(command, cfg, args)
    return PredictResult(out, manifest)


def predict(model, config: ConfigLike = None, *, store=None, out=None, workers: Optional[int] = None,
            scores: bool = False, embeddings: Optional[int] = None, embedding_dtype: str = "float16",
            evaluate: bool = False, code_path=None, progress: bool = True,
            edges_per_block: Optional[int] = None, set: Optional[dict] = None, pairs=None, queries=None,
            candidates=None, top_k: Optional[int] = None, **graph: Any) -> PredictResult:
    """Classes (and optionally scores, embeddings, accuracy) of every node, as `grappa predict`;
    for a link-prediction model its embeddings, and the scores of `pairs` and the `top_k`
    `candidates` of `queries` (files, as the command line's --pairs, --queries, --candidates).
    `model`: a model file or a TrainResult; the graph: the model's training store by default,
    else `store=` or a dataset (`dataset="cora"`, `config=`)."""
    return _inference("predict", model, config, store=store, out=out, workers=workers, code_path=code_path,
                      progress=progress, edges_per_block=edges_per_block, set=set, scores=scores,
                      embeddings=embeddings, embedding_dtype=embedding_dtype, evaluate=evaluate,
                      pairs=pairs, queries=queries, candidates=candidates, top_k=top_k, **graph)


def evaluate(model, config: ConfigLike = None, *, store=None, out=None, workers: Optional[int] = None,
             code_path=None, progress: bool = True, edges_per_block: Optional[int] = None,
             set: Optional[dict] = None, **graph: Any) -> dict:
    """Accuracy and loss per split, exactly (full neighbourhoods), as `grappa evaluate`; the
    result's `evaluation` plus `out`, the folder of evaluation.json."""
    res = _inference("evaluate", model, config, store=store, out=out, workers=workers, code_path=code_path,
                     progress=progress, edges_per_block=edges_per_block, set=set, **graph)
    return {**(res.evaluation or {}), "out": str(res.out)}
