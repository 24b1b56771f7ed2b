"""The self-describing model file: `model.pt`, and the `describe` entry of every checkpoint.

A model file rebuilds the model without the run's config: architecture, layers, widths, heads,
class count, the input feature width and dtype, the training strategy, the dataset's identity,
the chunk store it was trained on and the Grappa version, next to the parameters. It is a plain
`torch.save` of a dict, so `torch.load(path)["state_dict"]` also works without Grappa.

The training store is named by identity, its fingerprint, and by location relative to the model
file itself (`store.path`, `store.relative_to: "model file"`; where it was when the file was
written as well, `store.written_at`), so a run directory copied or moved elsewhere, or a model
used from another working directory, still finds its store, and a store that is not the one
(prepared again, another run's) is known by its fingerprint (inference/graph.py). Files written
before kept a path relative to the training's working directory (`store.path` alone).

Files written before this format (a bare state dict) are refused with the fix: convert them with
the run's config (`python -m grappa.model_file convert OLD.pt --config run/report.json`).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from grappa.config import ConfigError

FORMAT = "grappa-model"
VERSION = 1


class ModelFileError(ConfigError):
    """A model file that cannot be used as asked; the message names the file and the fix."""


def store_fingerprint(manifest: dict) -> str:
    """What identifies a chunk store's content: its identity and every file's checksum."""
    files = [sorted((name, e["sha256"]) for name, e in c["files"].items()) for c in manifest["chunks"]]
    key = {"source": manifest.get("source"), "num_chunks": manifest["num_chunks"],
           "seed": manifest.get("seed"), "num_nodes": manifest["num_nodes"], "files": files}
    if manifest.get("tables"):  # a graph from tables: the user's ids are part of it
        key["ids"] = manifest["tables"]["ids"]["sha256"]
    if (manifest.get("link") or {}).get("sha256"):  # a link split: its edges and negatives too
        key["link"] = manifest["link"]["sha256"]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def describe(cfg, num_features: int, num_classes: int, widths: list[int],
             manifest: Optional[dict] = None, code: Optional[dict] = None) -> dict[str, Any]:
    """Everything but the parameters. `manifest`: the chunk store's (None for `grappa single`,
    which trains on the dataset in memory); `code`: a custom model's code identity
    (user_code.code_identity)."""
    from grappa.util.version import __version__
    from grappa.data.store.preparation import store_source
    m = cfg.model
    return {
        "format": FORMAT, "version": VERSION, "grappa_version": __version__,
        "model": {"arch": m.arch, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                  "dropout": m.dropout,
                  **({"custom": _custom_record(m.custom)} if m.user_model else {})},
        **({"code": code, "mode": cfg.training.mode} if m.user_model else {}),
        # link prediction: the last width is the embedding's, and a decoder's parameters follow
        **({"task": cfg.task, "decoder": cfg.link.decoder} if cfg.task != "node-classification" else {}),
        "widths": list(widths), "num_features": int(num_features), "num_classes": int(num_classes),
        "feature_dtype": manifest["feature_dtype"] if manifest else "float32",
        "strategy": cfg.strategy if manifest else "single",
        "dataset": store_source(cfg),
        # a graph from tables with string labels: class c is label_names[c] (predict writes them)
        **({"label_names": manifest["tables"]["label_names"]}
           if manifest and (manifest.get("tables") or {}).get("label_names") else {}),
        "store": ({"written_at": str(Path(cfg.store_path).resolve()), "fingerprint": store_fingerprint(manifest),
                   "num_nodes": int(manifest["num_nodes"]), "num_chunks": int(manifest["num_chunks"]),
                   # storage.s3: written_at is the bucket's local mirror; predict refills it from here
                   **({"s3": cfg.storage.bucket_store.model_dump(by_alias=True, exclude_none=True)}
                      if cfg.storage.bucket_store else {})}
                  if manifest else None),
    }


RELATIVE_TO = "model file"


def located(meta: dict, folder: str | Path) -> dict:
    """`meta` for a file written into `folder`: its training store's path relative to there."""
    store = meta.get("store")
    if not store or "written_at" not in store:
        return meta
    rel = os.path.relpath(store["written_at"], Path(folder).resolve())
    return {**meta, "store": {**store, "path": rel, "relative_to": RELATIVE_TO}}


def store_locations(model_path: str | Path, meta: dict) -> list[Path]:
    """Where the model's training store may be, most likely first: relative to the model file,
    then where it was written. Files from before kept a path relative to the training's working
    directory: tried as it is and under each folder above the model's."""
    store = meta.get("store") or {}
    folder = Path(model_path).resolve().parent
    out: list[Path] = []
    if store.get("relative_to") == RELATIVE_TO:
        out.append(folder / store["path"])
    elif store.get("path"):
        p = Path(store["path"])
        out += [p] if p.is_absolute() else [p, *(base / p for base in (folder, *folder.parents))]
    if store.get("written_at"):
        out.append(Path(store["written_at"]))
    unique: dict[str, Path] = {}
    for p in out:
        unique.setdefault(os.path.normpath(os.path.abspath(p)), p)
    return [Path(k) for k in unique]


def _custom_record(custom) -> dict[str, Any]:
    """model.custom with its codePath absolute (a model file is read from anywhere)."""
    rec = custom.model_dump(by_alias=True, exclude_none=True)
    if custom.code_path:
        rec["codePath"] = str(Path(custom.code_path).expanduser().resolve())
    return rec


def model_record(meta: dict, state_dict: dict) -> dict[str, Any]:
    return {**meta, "state_dict": state_dict}


def save_model(path: str | Path, meta: dict, state_dict: dict) -> Path:
    """Write atomically: a reader never sees half a model."""
    import io

    import torch

    from grappa.util.files import atomic_write
    path = Path(path)
    buf = io.BytesIO()
    torch.save(model_record(located(meta, path.parent), state_dict), buf)
    atomic_write(path, buf.getvalue())
    return path


@dataclass
class LoadedModel:
    path: Path
    meta: dict
    model: Any  # grappa.models.GNN in eval mode, the file's parameters loaded

    @property
    def num_features(self) -> int:
        return int(self.meta["num_features"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def widths(self) -> list[int]:
        return list(self.meta["widths"])


def _convert_hint(path: Path) -> str:
    return (f"convert it with the run's config: `python -m grappa.model_file convert {path} "
            f"--config RUN_DIR/report.json`, or train again with this Grappa")


def read_meta(path: str | Path) -> tuple[dict, dict]:
    """(description, state dict) of a model file or a checkpoint; refuses anything else."""
    import torch
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist (a finished run writes RUN_DIR/model.pt)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise ModelFileError(f"model file {path} cannot be read ({err}); it is not a Grappa model file") from None
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        rec = obj
    elif isinstance(obj, dict) and isinstance(obj.get("describe"), dict) and "model" in obj:
        rec = {**obj["describe"], "state_dict": obj["model"]}  # a training checkpoint
    elif isinstance(obj, dict) and obj and all(isinstance(k, str) for k in obj) and \
            all(hasattr(v, "shape") for v in obj.values()):
        raise ModelFileError(
            f"model file {path} is a bare state dict from an older Grappa: it does not say which "
            f"model it is (architecture, widths, classes); {_convert_hint(path)}")
    elif isinstance(obj, dict) and "model" in obj and "optimizer" in obj:
        raise ModelFileError(f"{path} is a checkpoint from an older Grappa, without a model "
                             f"description; {_convert_hint(path)}")
    else:
        raise ModelFileError(f"model file {path} is not a Grappa model file (no '{FORMAT}' record); "
                             f"{_convert_hint(path)}")
    if rec.get("version", 0) > VERSION:
        raise ModelFileError(f"model file {path} has format version {rec['version']}, newer than this "
                             f"Grappa reads ({VERSION}); upgrade Grappa")
    if rec.get("strategy") == "retexo":
        raise ModelFileError(
            f"model file {path} holds the last RETEXO stage only (the stages' layers are saved as "
            "RUN_DIR/stage-*.pt); predictions need a model trained with strategy grappa, full or "
            "varco, or `grappa single`")
    if rec.get("task", "node-classification") not in ("node-classification", "link-prediction"):
        raise ModelFileError(f"model file {path} is a {rec['task']!r} model, a task this Grappa does "
                             "not know; upgrade Grappa")
    state = rec.pop("state_dict")
    return rec, state


def load_model(path: str | Path, code_path: Optional[str] = None) -> LoadedModel:
    """The model of a model file or checkpoint, rebuilt from its description, in eval mode.
    A custom model's code is imported from `code_path`, else $GRAPPA_CODE_PATH, else the path it
    was trained from, and must be the code it was trained with (user_code.check_identity)."""
    from grappa.config import ModelConfig
    from grappa.models import GNN
    meta, state = read_meta(path)
    cfg = ModelConfig(**meta["model"])
    if cfg.user_model is not None:
        model = _load_custom(Path(path), meta, cfg, code_path)
    elif meta.get("task") == "link-prediction":  # the GNN's last width is the embedding's; a decoder
        from grappa.models.decoder import Decoder
        width = int(meta["widths"][-1])
        model = GNN(cfg, int(meta["num_features"]), width)
        model.decoder = Decoder(meta.get("decoder", "dot"), width)
    else:
        model = GNN(cfg, int(meta["num_features"]), int(meta["num_classes"]))
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ModelFileError(f"model file {path}: the parameters do not fit the model it describes "
                             f"({err}); the file is damaged: use another checkpoint") from None
    model.eval()
    return LoadedModel(Path(path), meta, model)


def _load_custom(path: Path, meta: dict, cfg, code_path: Optional[str]):
    """The user's model of a model file, from the code it was trained with."""
    from grappa.models.custom import build_custom
    from grappa.models.user_code import ModelCodeError, check_identity, environment_code_path
    rec = meta.get("code") or {}
    given = code_path or environment_code_path()
    trained_from = cfg.custom.code_path
    how = ("at that path, or pass its file or package folder with --code-path (a predict job: "
           "$GRAPPA_CODE_PATH in spec.worker.env and spec.aggregator.env)")
    source = f"module {rec.get('module', cfg.custom.factory)}" + (
        f" (sha256 {rec['sha256'][:12]}...)" if rec.get("sha256") and not rec.get("version") else
        f" ({rec['distribution']} {rec['version']})" if rec.get("version") else "")
    if not given and trained_from and not Path(trained_from).exists():
        raise ModelCodeError(
            f"model file {path} needs the code of its model, {source}, factory {cfg.custom.factory}, "
            f"trained from {trained_from}, which is not here: put that file back {how}")
    try:
        model = build_custom(cfg, int(meta["num_features"]), int(meta["num_classes"]),
                             meta.get("mode", "full-graph"), given)
    except ModelCodeError as err:
        raise ModelCodeError(f"model file {path} needs {source}: {err}") from None
    check_identity(rec, model.code, f"model file {path}", how)
    return model


def convert(old: Path, config: Path, out: Path) -> Path:
    """An older bare state dict + the run's config (a config file or report.json) -> a model file.
    The class count and feature width come from the run's chunk store, which must still exist."""
    import torch

    from grappa.config import validate_config
    from grappa.data.store.chunk_store import ChunkStore
    from grappa.models import GNN
    for path, what in ((old, "model file"), (config, "--config")):
        if not path.is_file():
            raise ModelFileError(f"{what} {path} does not exist")
    data = json.loads(config.read_text()) if config.suffix == ".json" else None
    if data is None:
        import yaml
        data = yaml.safe_load(config.read_text())
    cfg = validate_config(data.get("config", data) if isinstance(data, dict) else data, str(config))
    manifest = ChunkStore(cfg.store_path).manifest
    state = torch.load(old, map_location="cpu", weights_only=False)
    if "model" in state and "optimizer" in state:  # an older checkpoint: its parameters
        state = state["model"]
    model = GNN(cfg.model, manifest["num_features"], manifest["num_classes"])
    model.load_state_dict(state)
    meta = describe(cfg, manifest["num_features"], manifest["num_classes"], model.widths, manifest)
    return save_model(out, meta, model.state_dict())


def main(argv: Optional[list[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m grappa.model_file",
                                description="convert an older model.pt (a bare state dict)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="write a self-describing model file from an old one")
    c.add_argument("old", type=Path)
    c.add_argument("--config", type=Path, required=True, help="the run's config or report.json")
    c.add_argument("--out", type=Path, help="default: OLD with .v1.pt")
    args = p.parse_args(argv)
    return _convert_command(args.old, args.config, args.out or args.old.with_suffix(".v1.pt"))


def _convert_command(old: Path, config: Path, out: Path) -> int:
    """convert, writing a new file only: an existing one is never replaced, and a folder that
    cannot be written is one line (exit 3) before any work."""
    from grappa.util.files import ensure_writable
    if out.exists():
        raise ConfigError(f"--out {out} exists: give another --out (or delete it); convert writes a new file only")
    ensure_writable(out.parent, "--out", "--out")
    print(f"wrote {convert(old, config, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
