"""Training configuration: the one pydantic model the CLI, the pods and the GrappaJob spec share.

Torch-free on purpose: the operator imports it to build the CRD schema and must stay slim.
Field names are snake_case in Python and camelCase on the wire (YAML, CRD), both accepted.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator
)
from pydantic.alias_generators import to_camel

BUILTIN_DATASETS = (
    "cora", "citeseer", "coauthor-cs", "coauthor-physics", "amazon-computers", "amazon-photo",
)
SYNTHETIC_DATASETS = ("csbm", "rmat")
OGB_NODE_DATASETS = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M")
OGB_LINK_DATASETS = ("ogbl-collab", "ogbl-citation2")  # task link-prediction only
OGB_DATASETS = OGB_NODE_DATASETS + OGB_LINK_DATASETS
DATASET_NAMES = BUILTIN_DATASETS + SYNTHETIC_DATASETS + OGB_DATASETS + ("arrays", "tables", "file")

STRATEGIES = ("grappa", "full", "varco", "retexo")
# Why a strategy needs Grappa's own layers (a custom model trains with grappa only).
STRATEGY_NEEDS = {
    "full": "exchanges every layer's activations between workers",
    "varco": "exchanges every layer's (compressed) activations between workers",
    "retexo": "trains the model layer by layer, one stage per layer",
}
Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]

TASKS = ("node-classification", "link-prediction")
Task = Literal[TASKS]  # type: ignore[valid-type]
# Datasets link prediction trains on (data/link_split.py): every one; the seeded split, or the
# dataset's own (arrays' edge files, OGB's link split), is made when the store is prepared.
LINK_DATASETS = DATASET_NAMES

# Bounds on free-form strings and lists: the GrappaJob CRD compares these sections in CEL rules,
# and the API server's cost estimate needs a maximum size for every string and list they hold.
PATH_MAX = 4096
FILES_MAX = 256  # part files per list (a glob pattern counts as one)
FILE_NAME_MAX = 1024
FileName = Annotated[str, Field(max_length=FILE_NAME_MAX)]

# Reference fanouts per depth, input layer first (DGL order), from the method doc §5.
DEFAULT_FANOUTS = {1: [25], 2: [25, 10], 3: [15, 10, 5], 4: [20, 15, 10, 5]}


class Section(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_assignment=True,
    )


class SyntheticConfig(Section):
    """Parameters of the synthetic generators (ignored for real datasets)."""

    num_nodes: int = Field(4000, ge=2, description="CSBM: number of nodes.")
    num_classes: int = Field(5, ge=2, le=1000, description="CSBM: number of classes (blocks).")
    num_features: int = Field(64, ge=1, description="Feature width for both generators.")
    avg_degree: float = Field(10.0, gt=0, description="CSBM: expected out-degree per node.")
    homophily: float = Field(0.8, ge=0, le=1, description="CSBM: share of edges inside a block.")
    feature_signal: float = Field(
        0.5, ge=0, description="CSBM: distance of class means in feature space (noise sd is 1).")
    scale: int = Field(14, ge=4, le=30, description="RMAT: 2^scale nodes and 2^(scale+4) edges.")
    seed: int = Field(0, ge=0, description="Seed of the generator.")


class ArraysConfig(Section):
    """The Grappa arrays format: a user's graph as .npy files in one folder (README, "Your own
    graph"). File names are relative to that folder; edge entries may be glob patterns."""

    edges: Optional[list[FileName]] = Field(
        None, max_length=FILES_MAX, description="[2, E] int32/int64 edge arrays (src row, dst row), one or several part "
                          "files; default edges.npy unless src/dst are given.")
    src: list[FileName] = Field(default_factory=list, max_length=FILES_MAX, description="Source-id arrays [E], paired in order with dst.")
    dst: list[FileName] = Field(default_factory=list, max_length=FILES_MAX, description="Destination-id arrays [E].")
    features: str = Field("features.npy", max_length=FILE_NAME_MAX, description="[n, f] float32 or float16 node features.")
    labels: str = Field("labels.npy", max_length=FILE_NAME_MAX, description="[n] integer labels; -1 marks an unlabelled node.")
    train: str = Field("train.npy", max_length=FILE_NAME_MAX, description="Training nodes: a bool mask [n] or an index array.")
    val: str = Field("val.npy", max_length=FILE_NAME_MAX, description="Validation nodes: a bool mask [n] or an index array.")
    test: str = Field("test.npy", max_length=FILE_NAME_MAX, description="Test nodes: a bool mask [n] or an index array.")
    num_classes: Optional[int] = Field(
        None, ge=2, description="Number of classes (default: the largest label + 1).")

    @model_validator(mode="after")
    def _one_edge_layout(self) -> "ArraysConfig":
        if self.src or self.dst:
            if self.edges is not None:
                raise ValueError("dataset.arrays: give either edges or src/dst, not both")
            if len(self.src) != len(self.dst):
                raise ValueError(f"dataset.arrays.src has {len(self.src)} files but dst has "
                                 f"{len(self.dst)}: pair every src file with one dst file")
        return self


ColumnName = Annotated[str, Field(min_length=1, max_length=256)]
SPLIT_VALUES = ("train", "val", "test")


class TableFiles(Section):
    """Where one table is: files, folders (every .parquet / .csv / .csv.gz file in them) or glob
    patterns, relative to dataset.path; Parquet or CSV (with a header line)."""

    files: list[FileName] = Field(
        default_factory=list, max_length=FILES_MAX,
        description="Files, folders or glob patterns of the table, relative to dataset.path (the "
                    "rows of all of them, in sorted path order, are the table).")
    format: Optional[Literal["parquet", "csv"]] = Field(
        None, description="parquet or csv (default: from the file names: .parquet/.pq, .csv/.csv.gz).")


class NodeTable(TableFiles):
    """The nodes table: one row per node, with its id and, for training, its features, label and split."""

    files: list[FileName] = Field(
        default_factory=lambda: ["nodes.parquet"], max_length=FILES_MAX,
        description="Files, folders or glob patterns of the nodes table, relative to dataset.path.")
    id: ColumnName = Field("id", description="The node id column: strings or integers of any range, unique.")
    features: list[ColumnName] = Field(
        default_factory=lambda: ["features"], min_length=1, max_length=FILES_MAX,
        description="The feature columns: one list / fixed-size-list column, or numeric columns, or "
                    "glob patterns of column names (e.g. ['f_*']), in the table's column order.")
    label: Optional[ColumnName] = Field(
        None, description="The label column: integers (null or -1: unlabelled) or strings (class "
                           "names, mapped to classes 0.. in sorted order; null: unlabelled).")
    split: Optional[ColumnName] = Field(
        None, description="A column of train / val / test (null or empty: in no split); default: "
                          "dataset.tables.splitFractions of the labelled nodes, seeded by dataset.splitSeed.")


class EdgeTable(TableFiles):
    """The edges table: one row per edge, its endpoints given by the nodes table's ids."""

    files: list[FileName] = Field(
        default_factory=lambda: ["edges.parquet"], max_length=FILES_MAX,
        description="Files, folders or glob patterns of the edges table, relative to dataset.path.")
    src: ColumnName = Field("src", description="The source id column (ids of the nodes table).")
    dst: ColumnName = Field("dst", description="The destination id column (ids of the nodes table).")


class TablesConfig(Section):
    """A user's graph as a nodes table and an edges table, Parquet or CSV (README, "Your own graph
    from tables"). Read in batches; ids are mapped to dense ids out of core."""

    nodes: NodeTable = Field(default_factory=NodeTable)
    edges: EdgeTable = Field(default_factory=EdgeTable)
    id_type: Literal["auto", "string", "int64"] = Field(
        "auto", description="How ids are compared: auto takes Parquet's column type and reads CSV ids "
                            "as strings (so '007' stays '007'); string or int64 converts both tables.")
    split_fractions: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.6, 0.2, 0.2], min_length=3, max_length=3,
        description="train, val, test shares of the labelled nodes when nodes.split is not given.")
    dangling_edges: Literal["error", "drop"] = Field(
        "error", description="An edge whose source or destination is not in the nodes table: error "
                             "(refused, counted, the first one named) or drop (counted in the manifest).")
    num_classes: Optional[int] = Field(
        None, ge=2, description="Integer labels: the number of classes (default: the largest label + 1).")

    @model_validator(mode="after")
    def _fractions(self) -> "TablesConfig":
        if sum(self.split_fractions) > 1 + 1e-9:
            raise ValueError(f"dataset.tables.splitFractions {self.split_fractions} add up to more than 1")
        return self


class DatasetConfig(Section):
    name: Literal[DATASET_NAMES] = Field(  # type: ignore[valid-type]
        "csbm", description="Built-in dataset, synthetic generator, OGB node dataset (ogbn-*), OGB "
                            "link dataset (ogbl-collab, ogbl-citation2: task link-prediction), "
                            "'arrays' for your own .npy files, 'tables' for Parquet/CSV tables, or "
                            "'file' for a saved PyG Data.")
    root: Optional[str] = Field(
        None, max_length=PATH_MAX, description="Folder holding the datasets (defaults to $GRAPPA_DATA_ROOT, then ./data).")
    download: bool = Field(
        False, description="Allow downloading a built-in or OGB dataset that is not under root.")
    path: Optional[str] = Field(
        None, max_length=PATH_MAX, description="name=file: a torch.save'd torch_geometric.data.Data; name=arrays: the "
                          "folder of .npy files; name=tables: the folder the tables' paths are relative "
                          "to (relative paths: under root).")
    split_seed: int = Field(0, ge=0, description="Seed of the split for datasets without a public one.")
    feature_dtype: Literal["auto", "float32", "float16", "binary", "sparse"] = Field(
        "auto", description="How the chunk store keeps features, on disk, in the page cache and "
                            "on the store's link. auto (default): the smallest lossless one of "
                            "binary, sparse (only where it at least halves the bytes) and float32, "
                            "chosen by one read of the features. float16 halves them (and their "
                            "precision); binary packs features that are all 0 or 1 eight to a "
                            "byte; sparse keeps each row's non-zero (column, value) pairs, padded "
                            "to the fullest row, for mostly-zero features such as word counts. "
                            "Workers compute in float32.")
    add_inverse_edges: Optional[bool] = Field(
        None, description="ogbn-*, ogbl-*, arrays and tables: also store the reverse of every edge "
                          "(default: OGB's own choice per dataset; false for arrays and tables).")
    arrays: ArraysConfig = Field(default_factory=ArraysConfig)
    tables: TablesConfig = Field(default_factory=TablesConfig)
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)

    @model_validator(mode="after")
    def _settings_fit_the_dataset(self) -> "DatasetConfig":
        if self.name in ("file", "arrays", "tables") and not self.path:
            what = {"file": "a saved PyG Data file", "arrays": "the folder of .npy files",
                    "tables": "the folder of the tables"}[self.name]
            raise ValueError(f"dataset.path is required when dataset.name is '{self.name}' ({what})")
        if self.name != "arrays" and self.arrays != ArraysConfig():
            raise ValueError(f"dataset.arrays applies to dataset.name 'arrays' only (name is "
                             f"{self.name!r}): remove it or set name: arrays")
        if self.name != "tables" and self.tables != TablesConfig():
            raise ValueError(f"dataset.tables applies to dataset.name 'tables' only (name is "
                             f"{self.name!r}): remove it or set name: tables")
        if self.add_inverse_edges is not None and self.name not in OGB_DATASETS + ("arrays", "tables"):
            raise ValueError(f"dataset.addInverseEdges applies to ogbn-*, ogbl-*, arrays and tables only; dataset "
                             f"{self.name!r} is already stored with both directions: remove it")
        return self


class PrepareConfig(Section):
    """How `grappa prepare` runs; never part of what the store contains."""

    block_edges: int = Field(
        1 << 22, ge=1 << 10, le=1 << 30,
        description="Edges one process holds at a time: prepare's peak memory is about "
                    "(workers + 1) x 64 bytes x blockEdges plus the runtime, whatever the graph size.")
    workers: Optional[int] = Field(
        None, ge=1, le=64, description="Processes for the edge and finalise passes (default: the "
                                       "CPUs this process may use, at most 4).")


# A user's model: "package.module:function" (or a class), what `model.custom.factory` names.
FACTORY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
# What Grappa passes to a factory itself (models/custom.py): a kwargs entry may not set them.
FACTORY_ARGUMENTS = ("in_channels", "out_channels", "task", "mode")
KWARGS_MAX = 64  # entries of model.custom.kwargs
KWARGS_BYTES = 16384  # their JSON


class CustomModelConfig(Section):
    """A model the user writes (README, "Bring your own model"): a factory called as
    `factory(in_channels=F, out_channels=C, **kwargs)` that returns a torch.nn.Module in PyG's
    conventions, `forward(x, edge_index, ...)`. trainer/grappa/models/custom.py says what it gets."""

    factory: Optional[str] = Field(
        None, max_length=512, pattern=FACTORY_PATTERN,
        description="'package.module:function' (or a class) returning the model, e.g. "
                    "'my_models:make_model' or 'torch_geometric.nn.models:GraphSAGE'. It is called "
                    "with in_channels and out_channels, the kwargs, and, when its signature names "
                    "them and kwargs does not: num_layers (model.layers), hidden_channels "
                    "(model.hidden), dropout (model.dropout), task and mode.")
    kwargs: Annotated[dict[str, Any], WithJsonSchema({
        "x-kubernetes-preserve-unknown-fields": True,
        "description": "Keyword arguments of the factory (JSON values)."})] = Field(
        default_factory=dict, description="Keyword arguments of the factory (JSON values).")
    adjacency: Literal["edge-index", "sparse"] = Field(
        "edge-index", description="What the model's forward receives as edge_index: a [2, E] int64 "
        "tensor (with the per-hop counts PyG's layer trimming uses), or 'sparse', the transposed "
        "adjacency as a torch CSR matrix [N, N] (rows: targets), on which PyG's GCNConv, SAGEConv, "
        "GINConv, GraphConv fuse gather and aggregation into one sparse product (no per-edge "
        "message tensor; no trimming).")
    fast_dropout: bool = Field(
        False, description="Replace each torch.nn.Dropout module of the model by Grappa's dropout, "
        "which draws its mask from 16 random bits per element (models/dropout.py; the same "
        "distribution with p rounded to 1/65536, exact for 0.5) at about a fifth of torch's CPU "
        "cost. Off by default: the user's model runs as written (and its masks match a single "
        "PyG process seeded alike).")
    code_path: Optional[str] = Field(
        None, max_length=PATH_MAX,
        description="A .py file or a package folder holding the factory's module, put on the import "
                    "path first (on Kubernetes: relative paths are under storage.mountPath). "
                    "Default: the module is installed in the image.")

    @field_validator("factory", mode="before")
    @classmethod
    def _factory_form(cls, value: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(FACTORY_PATTERN, value):
            raise ValueError(f"model.custom.factory {value!r}: expected 'package.module:function' "
                             "(a function or class of an importable module, e.g. my_models:make_model)")
        return value

    @model_validator(mode="after")
    def _kwargs_are_keywords(self) -> "CustomModelConfig":
        if self.factory is None:  # an empty section: no custom model
            if self.kwargs or self.code_path or self.adjacency != "edge-index" or self.fast_dropout:
                raise ValueError("model.custom.kwargs, codePath, adjacency and fastDropout need "
                                 "model.custom.factory: name the function that returns the model")
            return self
        kw = self.kwargs
        if len(kw) > KWARGS_MAX:
            raise ValueError(f"model.custom.kwargs has {len(kw)} entries, at most {KWARGS_MAX}")
        for key in kw:
            if not str(key).isidentifier():
                raise ValueError(f"model.custom.kwargs: {key!r} is not a Python keyword name")
            if key in FACTORY_ARGUMENTS:
                raise ValueError(f"model.custom.kwargs.{key} is set by Grappa (in_channels: the "
                                 "feature width, out_channels: the class count, task, mode): remove it")
        try:
            text = json.dumps(kw)
        except (TypeError, ValueError) as err:
            raise ValueError(f"model.custom.kwargs must hold JSON values (numbers, strings, "
                             f"booleans, lists, mappings): {err}") from None
        if len(text) > KWARGS_BYTES:
            raise ValueError(f"model.custom.kwargs is {len(text)} bytes of JSON, at most {KWARGS_BYTES}")
        return self


class ModelConfig(Section):
    arch: Literal["gcn", "sage", "gat", "gin"] = Field(
        "gcn", description="GNN layer type of the built-in models (ignored with model.custom).")
    layers: int = Field(2, ge=1, le=16, description="Number of message-passing layers.")
    hidden: int = Field(128, ge=1, description="Hidden width.")
    dropout: float = Field(0.5, ge=0, lt=1, description="Dropout probability.")
    heads: int = Field(4, ge=1, description="Attention heads (GAT only).")
    custom: Optional[CustomModelConfig] = Field(
        None, description="Your own model (a PyG model from a factory) instead of model.arch; "
                          "trains with strategy grappa, both modes.")

    @model_validator(mode="before")
    @classmethod
    def _layers_from_kwargs(cls, data: Any) -> Any:
        """kwargs.num_layers is the model's depth: model.layers follows it when not given."""
        if isinstance(data, dict) and isinstance(data.get("custom"), dict) and data["custom"].get("factory"):
            depth = (data["custom"].get("kwargs") or {}).get("num_layers")
            if isinstance(depth, int) and not isinstance(depth, bool) and "layers" not in data:
                data = {**data, "layers": depth}
        return data

    @property
    def user_model(self) -> Optional[CustomModelConfig]:
        """model.custom when it names a factory (a section without one is no custom model)."""
        return self.custom if self.custom is not None and self.custom.factory else None

    @model_validator(mode="after")
    def _custom_fits(self) -> "ModelConfig":
        if self.user_model is None:
            return self
        depth = self.custom.kwargs.get("num_layers")
        if depth is not None and depth != self.layers:
            raise ValueError(f"model.custom.kwargs.num_layers ({depth}) differs from model.layers "
                             f"({self.layers}), the depth Grappa samples: keep one of them")
        default = ModelConfig()
        for name in ("arch", "heads"):
            if getattr(self, name) != getattr(default, name):
                raise ValueError(f"model.{name} applies to the built-in models, not to model.custom "
                                 f"(factory {self.custom.factory}): remove it, or pass it in "
                                 "model.custom.kwargs")
        return self

    @property
    def name(self) -> str:
        """What the model is called in messages: the factory, or the built-in architecture."""
        return self.custom.factory if self.user_model else self.arch


class TrainingConfig(Section):
    mode: Literal["full-graph", "mini-batch"] = Field("full-graph", description="Step granularity.")
    epochs: int = Field(100, ge=1, description="Number of epochs.")
    batch_size: int = Field(1000, ge=1, description="Seeds per worker per step (mini-batch).")
    max_steps_per_epoch: Optional[int] = Field(
        None, ge=1, description="Mini-batch: stop an epoch after this many steps (default: when every "
                                "seed has been used once); for time-boxed runs on very large graphs.")
    fanouts: Optional[list[int]] = Field(
        None, max_length=16, description="Neighbours sampled per layer, input layer first; default per depth.")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="Optimizer at the aggregator.")
    lr: float = Field(0.01, gt=0, description="Learning rate.")
    weight_decay: float = Field(5e-4, ge=0, description="L2 penalty.")
    seed: int = Field(0, ge=0, description="Seed of model initialisation, dropout and sampling.")
    eval_every: int = Field(1, ge=1, description="Evaluate every k epochs (and after the last).")
    shard_optimizer: Literal["auto", "on", "off"] = Field(
        "auto", description="Shard the optimizer state over the ring's M = partitions + 1 ranks: each "
                            "updates 1/M of the parameters after a reduce-scatter, then an all-gather "
                            "of the updates (the same bytes as the all-reduce); optimizer CPU and "
                            "state per rank fall by M, the ring's passes cost a little CPU each. "
                            "auto: on from 1,000,000 parameters at 3 <= M <= 9, where it was measured "
                            "to pay (docs/results/shard.md); off: every rank updates the whole model.")
    eval_mode: Optional[Literal["exact", "sampled"]] = Field(
        None, description="exact: every in-neighbour, layer by layer, a bounded block of rows at a "
                          "time, boundary rows read from the other workers' row files on the shared "
                          "volume; sampled: each worker scores "
                          "its own nodes on neighbourhoods sampled from the whole store with the "
                          "training fanouts. Default: exact in full-graph mode, sampled in mini-batch.")
    eval_fraction: float = Field(
        1.0, gt=0, le=1, description="Sampled evaluation: the share of each worker's train/val/test "
                                     "nodes it scores (a fixed, seeded subset).")

    @model_validator(mode="after")
    def _fanouts_positive(self) -> "TrainingConfig":
        if self.fanouts is not None and any(f < 1 for f in self.fanouts):
            raise ValueError("training.fanouts must all be >= 1 (use a large number for 'all')")
        return self


class PlateauConfig(Section):
    patience: int = Field(5, ge=1, description="Evaluations without improvement before a new round.")
    min_delta: float = Field(0.001, ge=0, description="Improvement in validation accuracy that counts.")


class RoundsConfig(Section):
    every: int = Field(
        10, ge=0, description="Epochs per repartition round; 0 keeps fixed partitions (FP).")
    pairing: Literal["sweep", "random"] = Field(
        "sweep", description="How variable chunks move: (r + k) mod K sweep, or seeded random.")
    plateau: Optional[PlateauConfig] = Field(
        None, description="Also start a round when validation accuracy plateaus.")


class GrappaConfig(Section):
    # Defaults chosen from our gradient-fidelity measurements (docs/results/accuracy.md):
    # node-level weights shrunk halfway to the mean cut the error early in training for GCN and
    # SAGE, and cost little at initialisation, where raw weights (lambda = 1) hurt.
    correction: Literal["none", "batch", "node"] = Field(
        "node", description="Coverage correction of the reducer (none = unweighted mean).")
    shrinkage: float = Field(
        0.5, ge=0, le=1, description="lambda: 1 = raw weights, 0 = unweighted mean.")
    chunks: Optional[int] = Field(
        None, ge=1, description="Number of chunks K (default: the number of partitions).")
    partition_seed: int = Field(0, ge=0, description="Seed of the random node-to-chunk assignment.")
    rounds: RoundsConfig = Field(default_factory=RoundsConfig)
    # Measured on the Cora and Amazon-Photo link splits (docs/results/link.md, docs/method.md).
    halo: Optional[Literal["cut", "self", "neighbours"]] = Field(
        None, description="A halo node's in-edges are not on its worker. cut: a layer sees only its "
        "self-loop (the method paper's). self: its in-neighbours are taken as copies of itself "
        "(GCN, SAGE, GIN; GAT is the same either way). neighbours: its in-neighbours the worker owns, "
        "scaled to its degree as a sampled row (undirected graphs: the reverse of its local edges). "
        "Default: neighbours for task link-prediction on an undirected graph, else cut.")


class VarcoConfig(Section):
    """Compression of the exchanged activations for strategy varco (trainer/grappa/varco.py)."""

    compressor: Literal["truncate", "random", "lowrank"] = Field(
        "truncate", description="Columns kept: the first k, a seeded random k, or a rank-k projection.")
    schedule: Literal["linear", "fixed"] = Field(
        "linear", description="linear: r_t = max(rMax - slope t (rMax - rMin) / (T - 2), rMin); "
        "fixed: fixedRatio at every step.")
    r_max: float = Field(128.0, ge=1, description="Compression rate at the first step.")
    r_min: float = Field(1.0, ge=1, description="Final rate; 1 sends everything (exact).")
    slope: float = Field(5.0, gt=0, description="s: rMin is reached after (T - 2) / s steps.")
    total_steps: Optional[int] = Field(
        None, ge=1, description="T (default: the run's total number of steps).")
    fixed_ratio: float = Field(4.0, ge=1, description="Rate of the fixed schedule.")
    compress_input: bool = Field(
        False, description="Also compress the input features (default: hidden activations only).")

    @model_validator(mode="after")
    def _rates_ordered(self) -> "VarcoConfig":
        if self.r_min > self.r_max:
            raise ValueError(f"varco.rMin ({self.r_min}) must be <= varco.rMax ({self.r_max})")
        return self


class LinkConfig(Section):
    """Link prediction (`task: link-prediction`; trainer/grappa/tasks/link_prediction.py): the
    seeded edge split (PyG RandomLinkSplit semantics: validation and test edges are removed from
    message passing; an undirected graph keeps both directions of an edge together), the decoder,
    the training negatives and the evaluation's negatives."""

    val_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of the supervision edges held out for validation "
        "(RandomLinkSplit's num_val); removed from message passing.")
    test_fraction: float = Field(
        0.2, ge=0, lt=1, description="Share held out for testing (RandomLinkSplit's num_test); "
        "removed from message passing.")
    split_seed: int = Field(0, ge=0, description="Seed of the edge split and of the evaluation's negatives.")
    decoder: Literal["dot", "distmult", "mlp"] = Field(
        "dot", description="Score of a pair (u, v) from the embeddings: dot = <h_u, h_v>; distmult = "
        "<h_u, diag(r) h_v> with a learnt r; mlp = a 2-layer MLP of h_u * h_v.")
    negatives: int = Field(
        1, ge=1, le=1000, description="Training negatives per positive edge (u, v): (u, v') with v' "
        "uniform over the worker's owned nodes.")
    eval_negatives: int = Field(
        1000, ge=1, le=100000, description="Negatives per validation/test positive for MRR "
        "(ogbl-citation2's evaluator: 1,000 corrupted destinations per positive).")
    shared_negatives: int = Field(
        10000, ge=1, le=10_000_000, description="One set of negative pairs per split that every "
        "positive is ranked against for Hits@K and AUC (ogbl-collab's evaluator).")


class CheckpointConfig(Section):
    interval: int = Field(10, ge=0, description="Checkpoint every k epochs; 0 disables.")


FETCH_MODES = ("direct", "on-demand", "prefetch")
HALO_ROW_MODES = ("auto", "all", "as-read", "reachable")


class S3Config(Section):
    """The chunk store in S3-compatible object storage (data/s3): prepare uploads it, workers fetch
    their rounds from it by ranged requests, and whatever reads a store whole (evaluation, the
    other strategies) reads a local mirror of it under storeDir. Credentials come from the
    environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, as boto3 reads them); in a pod,
    from the Secret secretName."""

    endpoint: Optional[str] = Field(
        None, max_length=PATH_MAX, pattern=r"^https?://[^/\s]+/?$", description="The service's URL, "
        "e.g. http://seaweedfs.storage:8333 (default: AWS S3 of the region).")
    bucket: Optional[str] = Field(
        None, min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$",
        description="The bucket; it must exist (prepare never creates one). A section without one is "
        "no bucket store.")
    prefix: str = Field("", max_length=PATH_MAX, pattern=r"^([^/\s][^\s]*/)?$", description="Key "
                        "prefix of the store inside the bucket, ending in / (e.g. graphs/cora-8/); "
                        "empty: the bucket's top.")
    region: str = Field("us-east-1", max_length=64, description="The region requests are signed for.")
    secret_name: Optional[str] = Field(
        None, max_length=253, description="Kubernetes only: the Secret whose keys accessKeyIdKey and "
        "secretAccessKeyKey hold the credentials, given to every pod as AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY.")
    access_key_id_key: str = Field("AWS_ACCESS_KEY_ID", max_length=253,
                                   description="The Secret's key holding the access key id.")
    secret_access_key_key: str = Field("AWS_SECRET_ACCESS_KEY", max_length=253,
                                       description="The Secret's key holding the secret access key.")
    run_prefix: Optional[str] = Field(
        None, min_length=2, max_length=PATH_MAX, pattern=r"^[^/\s][^\s]*/$", description="Key prefix "
        "of the run's home in the bucket, ending in / (e.g. runs/cora-8/): the aggregator uploads "
        "runDir's results there (report.json, metrics.jsonl, model.pt, checkpoints) and a restart "
        "with an empty runDir resumes from its checkpoints; exact evaluation's layer rows pass "
        "between the workers through it. Then runDir needs no shared volume. Unset: runDir must be "
        "shared (a GrappaJob sets it: <prefix>runs/<namespace>/<name>/<uid>/).")

    @model_validator(mode="after")
    def _run_home_apart(self) -> "S3Config":
        """The run's keys never among the store's: prepare and a mirror read the store's keys by
        name, and a run's files there would be another store's to a reader listing the prefix."""
        rp = self.run_prefix
        if rp is not None and (rp == self.prefix or self.prefix.startswith(rp)):
            raise ValueError(f"storage.s3.runPrefix {rp!r} holds the store's prefix {self.prefix!r}: "
                             f"give the run a prefix of its own, e.g. {self.prefix}runs/<name>/")
        return self


def bucket_store(s3: Optional[S3Config]) -> Optional[S3Config]:
    """storage.s3 when it names a bucket (a section without one is no bucket store)."""
    return s3 if s3 is not None and s3.bucket else None


def run_home(s3: Optional[S3Config]) -> Optional[S3Config]:
    """storage.s3 when the run lives in its bucket (a bucket and a runPrefix): the one test of
    whether runDir's results and exact evaluation's rows go through the bucket."""
    s3 = bucket_store(s3)
    return s3 if s3 is not None and s3.run_prefix else None


class StorageConfig(Section):
    """How a worker reads its round's data from the chunk store (data/local_copy.py, prefetch.py),
    and where the store lives: storeDir, or an S3 bucket (s3)."""

    fetch: Literal[FETCH_MODES] = Field(  # type: ignore[valid-type]
        "direct", description="How a worker's training rounds read their graph. direct: read the store "
        "through memory maps as the steps need rows. on-demand: at a round's start, copy what the round "
        "needs (its owned chunks, its halo's rows) into localDir, then train the round on that copy; "
        "in mini-batch mode the halo's rows are copied as the steps first read them, since a round's "
        "samples reach few of them. "
        "prefetch: as on-demand, and fetch the next round's data in the background while the current "
        "round trains (at most two rounds' data on local disk). Evaluation (and link prediction's edge "
        "split) reads the store directly whatever this is. Strategy grappa only.")
    halo_rows: Literal[HALO_ROW_MODES] = Field(  # type: ignore[valid-type]
        "auto", description="How a fetched mini-batch round brings its halo's feature rows: all (with "
        "the halo, at the round's start or ahead), as-read (each when a step first reads it: a round's "
        "samples reach few of them), reachable (the halo rows the round's seeds' L-hop in-neighbourhood "
        "can reach come with the round, with prefetch ahead of it, its graph built for that; the rest "
        "as read; node classification), auto (as-read for rows wider than half the gap a bucket "
        "read merges, 32 KiB, which come one request each either way; all for narrower ones, which "
        "come in a few requests a chunk). Full-graph rounds read every row: all.")
    local_dir: Optional[str] = Field(
        None, max_length=PATH_MAX, description="Worker-local folder for fetched round data, one "
        "rank-<r> folder per worker, removed when the job ends (default: <runDir>/local; in a pod, "
        "the operator's emptyDir).")
    s3: Optional[S3Config] = Field(
        None, description="The chunk store in an S3 bucket instead of a shared folder: prepare "
        "uploads it; storeDir then holds each process's local mirror of what it reads whole. "
        "Needs storage.fetch prefetch or on-demand with strategy grappa.")

    @property
    def bucket_store(self) -> Optional[S3Config]:
        return bucket_store(self.s3)

    @property
    def run_home(self) -> Optional[S3Config]:
        return run_home(self.s3)


class TrainConfig(Section):
    """A whole Grappa job as the trainer sees it."""

    strategy: Strategy = Field(  # type: ignore[valid-type]
        "grappa", description="grappa: isolated partitions, gradients only. full: the feature-fetching "
        "baseline (remote features and activations every step, fixed partitions, full-graph mode). "
        "varco: full with compressed activations at a falling rate (see varco). retexo: one "
        "boundary exchange per layer for the whole run, layers trained stage by stage.")
    partitions: int = Field(4, ge=1, le=1024, description="Number of workers P.")
    task: Task = Field(  # type: ignore[valid-type]
        "node-classification", description="What the GNN is trained for: node-classification (a "
        "label per node) or link-prediction (a score per node pair; see link).")
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    grappa: GrappaConfig = Field(default_factory=GrappaConfig)
    varco: VarcoConfig = Field(default_factory=VarcoConfig)
    link: LinkConfig = Field(default_factory=LinkConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    run_dir: str = Field("runs/latest", description="Where reports, metrics and checkpoints go.")
    store_dir: Optional[str] = Field(
        None, description="Chunk store folder (default: <runDir>/store).")
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Prometheus port of the aggregator; workers use +rank. 0 = off.")

    @model_validator(mode="after")
    def _cross_checks(self) -> "TrainConfig":
        chunks = self.grappa.chunks
        if chunks is not None and chunks < self.partitions:
            raise ValueError(
                f"grappa.chunks ({chunks}) must be >= partitions ({self.partitions}): "
                "every worker needs its own base chunk")
        if self.strategy != "grappa" and self.model.user_model is not None:
            raise ValueError(
                f"strategy {self.strategy!r} cannot train model.custom (factory "
                f"{self.model.custom.factory}): it {STRATEGY_NEEDS[self.strategy]}, which needs the "
                "built-in layers (model.arch). A custom model trains with strategy grappa "
                "(full-graph or mini-batch): set strategy: grappa")
        if self.strategy != "grappa":
            self._check_strategy_settings()
        if self.strategy != "varco" and self.varco != VarcoConfig():
            raise ValueError(f"varco settings apply to strategy varco only (strategy is {self.strategy!r}): "
                             "remove them or set strategy: varco")
        self._check_task()
        if self.grappa.halo in ("self", "neighbours") and self.model.user_model is not None:
            raise ValueError(f"grappa.halo self and neighbours change how the built-in layers (model.arch) "
                             f"treat the halo; model.custom (factory {self.model.custom.factory}) sees "
                             "it cut: remove grappa.halo or set it to cut")
        if self.grappa.halo == "neighbours" and self.task != "link-prediction":
            raise ValueError("grappa.halo neighbours needs the graph known to be undirected, which only "
                             "a link-prediction store records: set grappa.halo to self or cut")
        if self.storage.fetch != "direct" and self.strategy != "grappa":
            raise ValueError(f"storage.fetch {self.storage.fetch!r} fetches the rounds of strategy grappa "
                             f"only (strategy is {self.strategy!r}, which reads the store directly): "
                             "remove storage.fetch or set strategy: grappa")
        if self.storage.run_home is not None and self.strategy == "retexo":
            raise ValueError("strategy retexo keeps each worker's stage rows in runDir/retexo for a "
                             "resume, and a run in the bucket (storage.s3.runPrefix) shares no runDir: "
                             "remove storage.s3.runPrefix (a shared runDir), or use strategy grappa or full")
        if self.storage.bucket_store is not None and self.storage.fetch == "direct" and self.strategy == "grappa":
            raise ValueError("storage.fetch direct reads the store through memory maps of a mounted "
                             "folder, which storage.s3 is not: set storage.fetch: prefetch (or on-demand)")
        fan = self.training.fanouts
        if fan is not None and len(fan) != self.model.layers:
            raise ValueError(
                f"training.fanouts has {len(fan)} entries but model.layers is {self.model.layers}: "
                "give one fanout per layer, input layer first")
        return self

    def _check_task(self) -> None:
        """What task link-prediction can run with today; each refusal names the field and the fix."""
        if self.task != "link-prediction":
            if self.dataset.name in OGB_LINK_DATASETS:
                raise ValueError(f"dataset.name {self.dataset.name!r} is an OGB link-prediction dataset (its "
                                 "labels are edges): set task: link-prediction")
            if self.link != LinkConfig():
                raise ValueError(f"link settings apply to task link-prediction only (task is "
                                 f"{self.task!r}): remove them or set task: link-prediction")
            return
        lk = self.link
        if lk.val_fraction + lk.test_fraction >= 1:
            raise ValueError(f"link.valFraction ({lk.val_fraction}) + link.testFraction "
                             f"({lk.test_fraction}) must be < 1 to leave training edges: lower them")
        if self.strategy not in ("grappa", "full"):
            raise ValueError(f"strategy {self.strategy!r} cannot serve task link-prediction yet "
                             "(grappa and full score edges): set strategy: grappa or full")
        if self.sampled_eval:
            raise ValueError("task link-prediction is evaluated exactly (every node's embedding, "
                             "layer by layer): set training.evalMode: exact (mini-batch mode "
                             "defaults to sampled)")
        if self.model.user_model is not None:
            raise ValueError(f"task link-prediction trains the built-in models (model.arch) only "
                             f"for now, not model.custom (factory {self.model.custom.factory}): "
                             "remove model.custom")
        if self.dataset.name not in LINK_DATASETS:
            raise ValueError(f"task link-prediction cannot split dataset.name {self.dataset.name!r}: use "
                             f"one of {', '.join(LINK_DATASETS)}")

    def _check_strategy_settings(self) -> None:
        if self.strategy == "retexo" and self.training.epochs < self.model.layers:
            raise ValueError(f"strategy retexo trains one stage per layer: training.epochs "
                             f"({self.training.epochs}) must be >= model.layers ({self.model.layers})")
        if self.strategy == "retexo" and self.training.shard_optimizer == "on":
            raise ValueError("strategy retexo builds a new model and optimizer per stage, which the "
                             "sharded optimizer does not follow yet: set training.shardOptimizer: "
                             "auto or off (auto leaves it off for retexo)")
        if self.strategy == "retexo" and self.training.eval_mode == "sampled":
            raise ValueError("strategy retexo scores each stage on its fetched rows: remove "
                             "training.evalMode: sampled (or use another strategy)")
        if self.training.mode != "full-graph":
            raise ValueError(
                f"strategy {self.strategy!r} runs in training.mode full-graph only; "
                "set training.mode: full-graph (or strategy: grappa for mini-batches)")
        # Compared with the defaults, not `model_fields_set`: a dumped config (what pods receive)
        # sets every field.
        default = GrappaConfig()
        grappa_only = [f for f in ("correction", "shrinkage", "rounds", "halo")
                       if getattr(self.grappa, f) != getattr(default, f)]
        if grappa_only:
            fields = ", ".join(f"grappa.{f}" for f in grappa_only)
            raise ValueError(
                f"{fields} applies to strategy grappa only (strategy {self.strategy!r} keeps fixed "
                "partitions and needs no correction): remove it or set strategy: grappa")

    @property
    def sampled_eval(self) -> bool:
        mode = self.training.eval_mode
        return mode == "sampled" or (mode is None and self.training.mode == "mini-batch")

    @property
    def halo_mode(self) -> str:
        """grappa.halo resolved as far as the config can: the strategy keeps a directed graph's
        halo cut unless `neighbours` was asked for (then it refuses)."""
        if self.grappa.halo is not None:
            return self.grappa.halo
        return "neighbours" if self.task == "link-prediction" and self.model.user_model is None else "cut"

    @property
    def num_chunks(self) -> int:
        return self.grappa.chunks or self.partitions

    @property
    def fanouts(self) -> list[int]:
        if self.training.fanouts is not None:
            return list(self.training.fanouts)
        return list(DEFAULT_FANOUTS.get(self.model.layers, [10] * self.model.layers))

    @property
    def store_path(self) -> Path:
        return Path(self.store_dir) if self.store_dir else Path(self.run_dir) / "store"

    def local_path(self, rank: int) -> Path:
        """Worker `rank`'s folder for fetched round data (storage.localDir)."""
        return self._local_root / f"rank-{rank}"

    @property
    def _local_root(self) -> Path:
        return Path(self.storage.local_dir) if self.storage.local_dir else Path(self.run_dir) / "local"

    def eval_rows_dir(self, rank: int) -> Path:
        """Where exact evaluation's layer rows are written: runDir/eval-layers, which the workers
        share; with a run home in the bucket (storage.s3.runPrefix), worker `rank`'s own folder,
        since the rows pass between the workers through the bucket (beside rank-<r>, whose
        entries a round's fetch evicts)."""
        if self.storage.run_home is None:
            return Path(self.run_dir) / "eval-layers"
        return self._local_root / f"eval-layers-{rank}"


class ConfigError(ValueError):
    """A configuration a user wrote is invalid; the message names the field and the fix."""


def _section_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The Section class holding the field at `loc` (wire names), or None past a non-section."""
    model: Optional[type[BaseModel]] = TrainConfig
    for part in loc[:-1]:
        if model is None or not isinstance(part, str):
            return None
        _, model = _field(model, part)
    return model


def _did_you_mean(loc: tuple) -> str:
    """' (did you mean training?)' for a misspelt field, from the fields of its section."""
    import difflib
    model = _section_at(loc)
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    names = {f.alias or n: f.alias or n for n, f in model.model_fields.items()}
    names.update({n: f.alias or n for n, f in model.model_fields.items()})  # snake_case too
    close = difflib.get_close_matches(loc[-1], list(names), n=1, cutoff=0.6)
    if not close:
        return f" (the fields here: {', '.join(sorted(set(names.values())))})"
    where = ".".join(str(p) for p in loc[:-1])
    return f" (did you mean {where + '.' if where else ''}{names[close[0]]}?)"


def _message(e: dict, field: str) -> str:
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        return "not a setting" + _did_you_mean(tuple(e["loc"]))
    if e["type"] == "list_type":
        return f"{msg}: write a list in brackets, e.g. [a, b] (on the command line: --set '{field}=[a, b]')"
    return msg


def format_validation_error(err: ValidationError, source: str = "config") -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {field}: {_message(e, field)}")
    return "\n".join(lines)


def validate_config(data: dict, source: str = "config") -> TrainConfig:
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def _field(model: Optional[type[BaseModel]], key: str) -> tuple[str, Optional[type[BaseModel]]]:
    """A key's wire name (camelCase) for either spelling, and the Section class the field holds
    (Optional unwrapped) or None. Unknown keys are kept as written, so the validation error names
    them as the user did."""
    for name, field in (model.model_fields.items() if model else ()):
        if key in (name, field.alias):
            sub = next((c for c in (field.annotation, *get_args(field.annotation))
                        if isinstance(c, type) and issubclass(c, Section)), None)
            return field.alias or name, sub
    return key, None


def canonical(data: dict, model: Optional[type[BaseModel]], where: str = "") -> dict:
    """`data` with every key in its camelCase spelling, recursively, so a file's `evalEvery` and a
    flag's `eval_every` land on the same key (the later one wins). Both spellings of one field in
    the same mapping are refused: which one was meant is a guess."""
    out: dict = {}
    seen: dict[str, str] = {}
    for key, value in data.items():
        name, sub = _field(model, key) if isinstance(key, str) else (key, None)
        if name in seen:
            raise ConfigError(f"{where}{seen[name]} and {where}{key} are the same setting: keep one")
        seen[name] = key
        out[name] = canonical(value, sub, f"{where}{name}.") if sub and isinstance(value, dict) else value
    return out


def _read_file(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} does not exist" if not p.exists() else
                          f"config file {path} is not a file: give a YAML or JSON file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}, line {mark.line + 1} column {mark.column + 1}" if mark else path
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({problem}); fix the file there "
                          "(indent with spaces, quote values holding ':' or '#')") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path} cannot be read ({err}); give a readable YAML file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level (field: value lines), "
                          f"found a {type(data).__name__}")
    return data


def load_config(path: Optional[str] = None, overrides: Optional[dict] = None) -> TrainConfig:
    """Config from a YAML/JSON file, or from $GRAPPA_CONFIG (JSON), with dotted overrides on top.
    Keys may be camelCase or snake_case in the file and in the overrides alike."""
    data: dict = {}
    source = "config"
    if path:
        data = _read_file(path)
        source = str(path)
    elif os.environ.get("GRAPPA_CONFIG"):
        try:
            data = json.loads(os.environ["GRAPPA_CONFIG"])
        except ValueError as err:
            raise ConfigError(f"$GRAPPA_CONFIG is not valid JSON ({err}); it is written by the "
                              "operator or the launcher: recreate the job") from None
        source = "$GRAPPA_CONFIG"
        if not isinstance(data, dict):
            raise ConfigError("$GRAPPA_CONFIG: expected a JSON object; recreate the job")
    return config_with(data, overrides, source)


def config_with(data: dict, overrides: Optional[dict] = None, source: str = "config") -> TrainConfig:
    """`data` (either spelling) with dotted overrides on top, validated."""
    data = canonical(data, TrainConfig)
    for dotted, value in (overrides or {}).items():
        node, model = data, TrainConfig
        *parents, leaf = dotted.split(".")
        for part in parents:
            key, model = _field(model, part)
            if not isinstance(node.get(key), dict):  # absent, or a scalar the override replaces
                node[key] = {}
            node = node[key]
        leaf, sub = _field(model, leaf)
        node[leaf] = canonical(value, sub, f"{dotted}.") if sub and isinstance(value, dict) else value
    return validate_config(data, source)


def dump_config(cfg: TrainConfig) -> str:
    return cfg.model_dump_json(by_alias=True, exclude_none=True)
