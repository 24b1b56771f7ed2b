"""The GrappaJob API: a pydantic model that embeds `grappa.config` sections (single source of truth).

The CRD schema is generated from `GrappaJobSpec`/`GrappaJobStatus` (see crdgen.py); the operator
validates every spec it reads with the same model, so the API server and the operator agree.
"""
from __future__ import annotations

import copy
from typing import Annotated, Any, Iterator, Literal, Optional, Union

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator
from pydantic.fields import FieldInfo

from grappa.config import (
    FETCH_MODES,
    HALO_ROW_MODES,
    OGB_DATASETS,
    OGB_LINK_DATASETS,
    PATH_MAX,
    ArraysConfig,
    CheckpointConfig,
    DatasetConfig,
    GrappaConfig,
    LinkConfig,
    ModelConfig,
    PrepareConfig,
    S3Config,
    Section,
    StorageConfig,
    Strategy,
    TablesConfig,
    Task,
    TrainConfig,
    TrainingConfig,
    VarcoConfig,
    bucket_store,
)

from . import cel, quantities, settings
from .errors import SpecError

# k8s quantities ("500m", "2Gi", 1); x-kubernetes-int-or-string with the quantity pattern in the CRD.
Quantity = Annotated[Union[int, str], AfterValidator(quantities.check), WithJsonSchema(quantities.SCHEMA)]


class Resources(Section):
    requests: dict[str, Quantity] = Field(default_factory=dict, description="Resource requests.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Resource limits.")


class Toleration(Section):
    key: Optional[str] = Field(None, description="Taint key; empty with operator Exists matches all.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: Optional[str] = Field(None, description="Taint value for operator Equal.")
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        None, description="Taint effect to match; empty matches all.")
    toleration_seconds: Optional[int] = Field(
        None, ge=0, description="For NoExecute: how long the pod stays bound after the taint.")


class EnvVar(Section):
    name: str = Field(..., min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
                      description="Variable name.")
    value: Optional[str] = Field(None, description="Literal value.")
    value_from: Optional[dict[str, Any]] = Field(
        None, description="A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, ...).")


class TemplateMetadata(Section):
    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")


# A PodSpec is free-form in the CRD except where it holds quantities, which the API server checks
# at admission like the role's own resources (the pods would be refused later, far from the field).
_QUANTITY_MAP = {"type": "object", "additionalProperties": quantities.SCHEMA}
_RESOURCES = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
              "properties": {"requests": _QUANTITY_MAP, "limits": _QUANTITY_MAP}}
_CONTAINERS = {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                          "properties": {"resources": _RESOURCES}}}
# A pod's `overhead` is Kubernetes' to set: admission fills it from the pod's RuntimeClass and
# refuses a pod whose overhead differs from the RuntimeClass's (or that has one without a
# RuntimeClass that defines it). A CRD cannot read a RuntimeClass, so no rule here can tell the
# runnable case from the refused one: a template overhead is refused at `kubectl apply`, and the
# RuntimeClass's overhead still applies to the pods (Kueue adds it from runtimeClassName).
OVERHEAD_REFUSED = (
    "overhead cannot be set in a template: Kubernetes sets a pod's overhead from its RuntimeClass "
    "(runtimeClassName) and refuses a pod whose overhead differs, and this CRD cannot read the "
    "RuntimeClass to compare; remove overhead (the RuntimeClass's own overhead applies to the pods)")
# The rule sits on `overhead` itself, so the API server names that field; it runs only when the
# field is present, and refuses it whatever it holds.
_OVERHEAD = {**_QUANTITY_MAP, **cel.validations(cel.rule("false", OVERHEAD_REFUSED))}
_TEMPLATE_SPEC = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
    "containers": _CONTAINERS, "initContainers": _CONTAINERS, "overhead": _OVERHEAD, "resources": _RESOURCES}}


def template_quantities(spec: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) of every quantity in a template's PodSpec (the paths _TEMPLATE_SPEC types)."""
    def amounts(where: str, res: Any) -> Iterator[tuple[str, Any]]:
        for kind in ("requests", "limits"):
            for name, value in ((res or {}).get(kind) or {}).items() if isinstance(res, dict) else ():
                yield f"{where}.{kind}.{name}", value
    # Only well-shaped parts: a list where a list belongs (a mistyped one is the API server's and
    # the template check's to name, not a TypeError here).
    for key in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(key) if isinstance(spec.get(key), list) else []):
            if isinstance(c, dict):
                yield from amounts(f"{key}[{i}].resources", c.get("resources"))
    overhead = spec.get("overhead")
    for name, value in overhead.items() if isinstance(overhead, dict) else ():
        yield f"overhead.{name}", value
    yield from amounts("resources", spec.get("resources"))


class PodTemplate(Section):
    """A PodTemplate-style override, merged under the fields the operator owns (podtemplate.py)."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata, description="Pod labels and annotations.")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="core/v1 PodSpec fields for these pods (affinity, topologySpreadConstraints, "
                    "volumes, imagePullSecrets, securityContext, runtimeClassName, initContainers, "
                    "sidecar containers, and volumeMounts/envFrom of the `grappa` container); "
                    "fields the operator owns are refused, naming the field.",
        json_schema_extra=_TEMPLATE_SPEC)

    @field_validator("spec")
    @classmethod
    def _quantities(cls, spec: dict[str, Any]) -> dict[str, Any]:
        bad = [f"{path}: {value!r} is not {quantities.HINT}" for path, value in template_quantities(spec)
               if quantities.parse(value) is None]
        if "overhead" in spec:  # the CRD's rule, for a job stored under a CRD without it
            bad.append(f"overhead: {OVERHEAD_REFUSED}")
        if bad:
            raise ValueError("; ".join(bad))
        return spec


class PodSettings(Section):
    """Settings of one kind of pod (aggregator or workers)."""

    image: Optional[str] = Field(
        None, min_length=1, max_length=512,
        description="Trainer image (the Dockerfile's `trainer` target). Default: the operator's "
                    "(chart value trainerImage), read when the pods are (re)created.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="Image pull policy.")
    resources: Resources = Field(
        default_factory=Resources,
        description="Container resources. GPUs (nvidia.com/gpu and other GPU resources) are granted "
                    "but not used: the trainer runs on CPU only (gloo, no CUDA device), and a job "
                    "requesting one gets a GPUNotUsed Warning Event.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=256, description="Extra environment variables.",
        json_schema_extra=cel.validations(cel.rule(
            f"self.all(e, !(e.name in {cel.literal(list(settings.RESERVED_ENV))}))",
            f"env names {', '.join(settings.RESERVED_ENV)} are set by the operator (rendezvous) "
            "and cannot be overridden: rename the variable")))
    service_account_name: Optional[str] = Field(
        None, min_length=1, max_length=253,
        description="Service account. Aggregator default: a per-job account that may only patch "
                    "this job's status (bound to that Role when you name your own). Workers "
                    "default: the namespace's default account, token not mounted.")
    priority_class_name: Optional[str] = Field(None, description="Priority class of the pods.")
    template: PodTemplate = Field(default_factory=PodTemplate,
                                  description="Pod template override (labels, affinity, volumes, ...).")


class RunPolicy(Section):
    backoff_limit: int = Field(3, ge=0, le=1000,
                               description="Group restarts allowed before the job fails.")
    active_deadline_seconds: Optional[int] = Field(
        None, ge=1, description="Fail the job when it runs longer than this since it started.")
    pre_running_deadline_seconds: Optional[int] = Field(
        600, ge=1, description="Fail the job when a pod stays Pending longer than this.")
    ttl_seconds_after_finished: Optional[int] = Field(
        None, ge=0, description="Delete the job this long after it Succeeded or Failed.")
    clean_pod_policy: Literal["All", "Running", "None"] = Field(
        "Running", description="Pods deleted when the job finishes: All, the still Running ones, or None.")
    suspend: bool = Field(False, description="Delete the pods and keep the job; false resumes it "
                                             "from the latest checkpoint.")


class SchedulingPolicy(Section):
    gang: bool = Field(False, description="Gang-schedule the P+1 pods through a PodGroup.")
    provider: Literal["volcano", "scheduler-plugins"] = Field(
        "volcano", description="Which PodGroup API to use when gang is true.")
    scheduler_name: Optional[str] = Field(
        None, description="Scheduler of the pods (default: volcano / scheduler-plugins-scheduler "
                          "when gang is true, else the cluster default).")
    queue: Optional[str] = Field(None, description="Volcano queue.")
    priority_class_name: Optional[str] = Field(None, description="Priority class of the PodGroup.")
    schedule_timeout_seconds: Optional[int] = Field(
        None, ge=1, description="scheduler-plugins: how long the gang may wait.")


ONE_STORAGE_SOURCE = ("set exactly one of claimName or hostPath, or neither with s3.bucket (the "
                      "chunk store and the run then live in the bucket)")
RUN_PREFIX_SET_BY_OPERATOR = ("storage.s3.runPrefix is the operator's to set (<prefix>runs/<namespace>/"
                              "<name>/<uid>/, when the job has no volume): remove it")


class Storage(Section):
    """Where datasets, the chunk store and the run's results live: a shared volume (claimName or
    hostPath), or with neither, the S3 bucket of s3 (store and run; every pod keeps its files on
    an emptyDir)."""

    # CEL rules, so the API server refuses a job without a source at admission, not only the operator.
    model_config = ConfigDict(**Section.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "has(self.claimName) != has(self.hostPath) || (!has(self.claimName) && has(self.s3) "
                 "&& has(self.s3.bucket))", "message": ONE_STORAGE_SOURCE},
        {"rule": "!has(self.s3) || !has(self.s3.runPrefix)", "message": RUN_PREFIX_SET_BY_OPERATOR}]})

    claim_name: Optional[str] = Field(
        None, min_length=1, max_length=253, description="PersistentVolumeClaim (ReadWriteMany when pods spread over nodes).")
    host_path: Optional[str] = Field(
        None, min_length=1, max_length=4096, pattern=r"^/", description="Node folder, for single-node dev clusters.")
    mount_path: str = Field(settings.DEFAULT_MOUNT_PATH, max_length=4096, pattern=r"^/[^:]*$",
                            description="Where the volume is mounted in every pod; runDir is "
                                        "<mountPath>/<namespace>/<job>/<uid>.")
    fetch: Literal[FETCH_MODES] = Field(  # type: ignore[valid-type]
        StorageConfig.model_fields["fetch"].default,
        description=StorageConfig.model_fields["fetch"].description.replace(
            "into localDir", f"into an emptyDir at {settings.LOCAL_DATA_PATH} in each worker pod"))
    halo_rows: Literal[HALO_ROW_MODES] = Field(  # type: ignore[valid-type]
        StorageConfig.model_fields["halo_rows"].default,
        description=StorageConfig.model_fields["halo_rows"].description)
    s3: Optional[S3Config] = Field(
        None, description="The chunk store in an S3 bucket instead of on this volume: the prepare "
        "pod uploads it, workers fetch their rounds from it (storage.fetch prefetch or on-demand), "
        f"and each pod keeps what it reads whole in an emptyDir at {settings.LOCAL_DATA_PATH}. "
        "Credentials: the Secret s3.secretName, given to every pod as AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY.")

    @property
    def bucket_store(self) -> Optional[S3Config]:
        return bucket_store(self.s3)

    @property
    def volume(self) -> bool:
        """A shared volume is mounted (else the job lives in the bucket of s3)."""
        return self.claim_name is not None or self.host_path is not None

    @model_validator(mode="after")
    def _one_source(self) -> "Storage":  # the CEL rules' twins
        both = self.claim_name is not None and self.host_path is not None
        if both or (not self.volume and self.bucket_store is None):
            raise ValueError(f"storage: {ONE_STORAGE_SOURCE}")
        if self.s3 is not None and self.s3.run_prefix is not None:
            raise ValueError(RUN_PREFIX_SET_BY_OPERATOR)
        return self


def _with_rules(info: FieldInfo, *rules: dict[str, str]) -> FieldInfo:
    """A copy of a trainer field with CEL rules added to its CRD schema."""
    out = copy.deepcopy(info)
    out.json_schema_extra = cel.validations(*rules)
    return out


# ---- CEL twins of the cross-field rules (grappa.config validators, desired.check_runnable) ----

_GRAPPA_ONLY = ["correction", "shrinkage", "rounds", "halo"]  # TrainConfig._check_strategy_settings
_POWERS = cel.literal([2 ** k for k in range(31)])  # rmat: 2^scale nodes (scale <= 30)
_NODES = cel.literal(settings.KNOWN_NODE_COUNTS)
_NODE_TABLE = ", ".join(f"{k} {v}" for k, v in settings.KNOWN_NODE_COUNTS.items())


def _fits_nodes(count: str, field: str) -> dict[str, str]:
    """`count` (a CEL int) is at most the dataset's nodes, where the spec or the table knows them."""
    return cel.rule(
        f"(!(self.dataset.name in {_NODES}) || {count} <= {_NODES}[self.dataset.name])"
        f" && (self.dataset.name != 'csbm' || {count} <= self.dataset.synthetic.numNodes)"
        f" && (self.dataset.name != 'rmat' || {count} <= {_POWERS}[self.dataset.synthetic.scale])",
        f"spec.{field} exceeds the dataset's nodes ({_NODE_TABLE}; csbm: "
        "dataset.synthetic.numNodes; rmat: 2^dataset.synthetic.scale): lower it", f".{field}")


TABLES_PAIRS_MESSAGE = (
    "spec.predict.pairs and spec.predict.queries name nodes by the dataset's own numbering, which a graph "
    "from tables (dataset.name: tables) does not have: remove them (predictions.parquet keys every node's "
    "embedding by the nodes table's id)")

PREDICT_NEEDS_VOLUME = ("spec.predict reads its model and writes its outputs on the job's volume: set "
                        "storage.claimName or hostPath (a model in a bucket: `grappa predict --model "
                        "s3://...`)")

RETEXO_NEEDS_VOLUME = ("strategy retexo keeps its workers' stage rows in the run directory: give the job a "
                       "volume (storage.claimName or hostPath), or use strategy grappa or full")

SPEC_RULES = [
    cel.rule("self.strategy != 'retexo' || has(self.storage.claimName) || has(self.storage.hostPath)",
             RETEXO_NEEDS_VOLUME, ".strategy"),
    cel.rule("!has(self.predict) || has(self.storage.claimName) || has(self.storage.hostPath)",
             PREDICT_NEEDS_VOLUME, ".storage"),
    cel.rule("!has(self.grappa.chunks) || self.grappa.chunks >= self.partitions",
             "grappa.chunks must be >= partitions: every worker needs its own base chunk",
             ".grappa.chunks"),
    cel.rule("!has(self.training.fanouts) || size(self.training.fanouts) == self.model.layers",
             "training.fanouts needs one entry per model layer (model.layers), input layer first",
             ".training.fanouts"),
    cel.rule("!has(self.training.fanouts) || self.training.fanouts.all(f, f >= 1)",
             "training.fanouts must all be >= 1 (use a large number for 'all')", ".training.fanouts"),
    cel.rule("self.strategy == 'grappa' || !has(self.model.custom) || !has(self.model.custom.factory)",
             "model.custom trains with strategy grappa only: full, varco and retexo exchange or "
             "train the built-in layers (model.arch) one by one; set strategy: grappa",
             ".model.custom"),
    cel.rule("self.strategy == 'grappa' || self.training.mode == 'full-graph'",
             "strategies full, varco and retexo run in training.mode full-graph only: set "
             "training.mode: full-graph (or strategy: grappa for mini-batches)", ".training.mode"),
    cel.rule("self.strategy != 'retexo' || self.training.epochs >= self.model.layers",
             "strategy retexo trains one stage per layer: training.epochs must be >= model.layers",
             ".training.epochs"),
    cel.rule("self.strategy != 'retexo' || !has(self.training.evalMode) "
             "|| self.training.evalMode != 'sampled'",
             "strategy retexo scores each stage on its fetched rows: remove training.evalMode: "
             "sampled (or use another strategy)", ".training.evalMode"),
    cel.rule(f"self.strategy == 'grappa' || "
             f"({cel.at_defaults(GrappaConfig, 'self.grappa', _GRAPPA_ONLY)})",
             "grappa.correction, grappa.shrinkage, grappa.rounds and grappa.halo apply to strategy grappa "
             "only (other strategies keep fixed partitions): remove them or set strategy: grappa",
             ".grappa"),
    cel.rule("!has(self.grappa.halo) || self.grappa.halo == 'cut' || !has(self.model.custom) "
             "|| !has(self.model.custom.factory)",
             "grappa.halo self and neighbours change how the built-in layers (model.arch) treat the "
             "halo; model.custom sees it cut: remove grappa.halo or set it to cut", ".grappa.halo"),
    cel.rule("!has(self.grappa.halo) || self.grappa.halo != 'neighbours' || self.task == 'link-prediction'",
             "grappa.halo neighbours needs the graph known to be undirected, which only a "
             "link-prediction store records: set grappa.halo to self or cut", ".grappa.halo"),
    cel.rule("self.strategy == 'grappa' || !has(self.storage.fetch) || self.storage.fetch == 'direct'",
             "storage.fetch fetches the rounds of strategy grappa only (other strategies read the store "
             "directly): remove storage.fetch or set strategy: grappa", ".storage.fetch"),
    cel.rule("!has(self.storage.s3) || !has(self.storage.s3.bucket) || self.strategy != 'grappa' || "
             "(has(self.storage.fetch) && self.storage.fetch != 'direct')",
             "storage.fetch direct reads the store through memory maps of the volume, which "
             "storage.s3 is not: set storage.fetch: prefetch (or on-demand)", ".storage.fetch"),
    cel.rule(f"self.strategy == 'varco' || ({cel.at_defaults(VarcoConfig, 'self.varco')})",
             "varco settings apply to strategy varco only: remove them or set strategy: varco",
             ".varco"),
    # task link-prediction: what it runs with today (TrainConfig._check_task)
    cel.rule(f"self.task == 'link-prediction' || ({cel.at_defaults(LinkConfig, 'self.link')})",
             "link settings apply to task link-prediction only: remove them or set task: "
             "link-prediction", ".link"),
    cel.rule("self.task != 'link-prediction' || !has(self.link) || "
             "(has(self.link.valFraction) ? self.link.valFraction : 0.1) + "
             "(has(self.link.testFraction) ? self.link.testFraction : 0.2) < 1.0",
             "link.valFraction + link.testFraction must be < 1 to leave training edges: lower them",
             ".link"),
    cel.rule("self.task != 'link-prediction' || self.strategy in ['grappa', 'full']",
             "task link-prediction is served by strategies grappa and full only so far: set "
             "strategy: grappa or full", ".strategy"),
    cel.rule("self.task != 'link-prediction' || (has(self.training.evalMode) ? "
             "self.training.evalMode == 'exact' : self.training.mode == 'full-graph')",
             "task link-prediction is evaluated exactly: set training.evalMode: exact (mini-batch "
             "mode defaults to sampled)", ".training.evalMode"),
    cel.rule("self.task != 'link-prediction' || !has(self.model.custom) || !has(self.model.custom.factory)",
             "task link-prediction trains the built-in models (model.arch) only for now: remove "
             "model.custom", ".model.custom"),
    cel.rule(f"self.task == 'link-prediction' || !(self.dataset.name in {cel.literal(list(OGB_LINK_DATASETS))})",
             "dataset.name ogbl-* is an OGB link-prediction dataset (its labels are edges): set task: "
             "link-prediction", ".dataset.name"),
    # link prediction on a graph from tables: pairs/queries files hold the dataset's own node
    # numbers, which tables do not have (their ids are the user's); GrappaJobSpec._train_config_checks
    cel.rule("!has(self.predict) || self.dataset.name != 'tables' || "
             "(!has(self.predict.pairs) && !has(self.predict.queries))",
             TABLES_PAIRS_MESSAGE, ".predict"),
    cel.rule("self.metricsPort == 0 || self.metricsPort != self.masterPort",
             "masterPort must differ from metricsPort: the aggregator listens on both",
             ".masterPort"),
    _fits_nodes("self.partitions", "partitions"),
    cel.rule(f"!has(self.grappa.chunks) || ({_fits_nodes('self.grappa.chunks', 'grappa.chunks')['rule']})",
             _fits_nodes("", "grappa.chunks")["message"], ".grappa.chunks"),
]

_ARRAYS_EMPTY = {side: f"(!has(self.arrays.{side}) || size(self.arrays.{side}) == 0)" for side in ("src", "dst")}
_SIZE = {side: f"(has(self.arrays.{side}) ? size(self.arrays.{side}) : 0)" for side in ("src", "dst")}
DATASET_RULES = [
    cel.rule("!(self.name in ['file', 'arrays', 'tables']) || (has(self.path) && size(self.path) > 0)",
             "dataset.path is required when dataset.name is 'file' (a saved PyG Data file), "
             "'arrays' (the folder of .npy files) or 'tables' (the folder of the tables)", ".path"),
    cel.rule(f"self.name == 'tables' || !has(self.tables) || ({cel.at_defaults(TablesConfig, 'self.tables')})",
             "dataset.tables applies to dataset.name 'tables' only: remove it or set name: tables",
             ".tables"),
    cel.rule(f"self.name == 'arrays' || !has(self.arrays) || ({cel.at_defaults(ArraysConfig, 'self.arrays')})",
             "dataset.arrays applies to dataset.name 'arrays' only: remove it or set name: arrays",
             ".arrays"),
    cel.rule(f"!has(self.addInverseEdges) || self.name in {cel.literal(list(OGB_DATASETS) + ['arrays', 'tables'])}",
             "dataset.addInverseEdges applies to ogbn-*, ogbl-*, arrays and tables only; other datasets are already "
             "stored with both directions: remove it", ".addInverseEdges"),
    cel.rule(f"!has(self.arrays) || ({_ARRAYS_EMPTY['src']} && {_ARRAYS_EMPTY['dst']}) "
             "|| !has(self.arrays.edges)",
             "dataset.arrays: give either edges or src/dst, not both", ".arrays.edges"),
    cel.rule(f"!has(self.arrays) || {_SIZE['src']} == {_SIZE['dst']}",
             "dataset.arrays: pair every src file with one dst file (src and dst have as many "
             "entries)", ".arrays.src"),
    cel.immutable("spec.dataset"),
]

GRAPPA_RULES = [
    cel.rule("has(self.chunks) == has(oldSelf.chunks) && (!has(self.chunks) || self.chunks == oldSelf.chunks)",
             "spec.grappa.chunks cannot change once the job exists (its chunk store is built for "
             "it): delete the job and create it again", ".chunks"),
    cel.rule("self.partitionSeed == oldSelf.partitionSeed",
             "spec.grappa.partitionSeed cannot change once the job exists (its chunk store is "
             "built for it): delete the job and create it again", ".partitionSeed"),
]


class PredictSpec(Section):
    """A predict job: apply a trained model to every node of the spec's dataset (`grappa predict`
    run by the job's pods) instead of training. The outputs go to <runDir>/predictions."""

    model: str = Field(..., min_length=1, max_length=PATH_MAX,
                       description="The model file: an absolute path on the storage volume (a training "
                                   "job's status.artifacts.model) or one relative to storage.mountPath.")
    scores: bool = Field(False, description="Also write scores.npy: class probabilities, float16.")
    embeddings: Optional[int] = Field(
        None, ge=1, le=16, description="Also write embeddings.npy: the output of this layer (1..L).")
    embedding_dtype: Literal["float16", "float32"] = Field("float16", description="dtype of embeddings.npy.")
    evaluate: bool = Field(True, description="Also score the dataset's splits (status.result.testAcc; a "
                                             "link-prediction model: testMrr, testHits50, testAuc).")
    # a link-prediction model (its embeddings are written whatever `embeddings` says)
    pairs: Optional[str] = Field(None, min_length=1, max_length=PATH_MAX, description=(
        "Link-prediction models: a file of node pairs (.npy [2, E] or [E, 2], or text 'u v' lines) on the "
        "volume; their scores go to pair_scores.npy."))
    queries: Optional[str] = Field(None, min_length=1, max_length=PATH_MAX, description=(
        "Link-prediction models: a file of query node ids; their topK best candidates go to topk.npy "
        "and topk_scores.npy."))
    candidates: Optional[str] = Field(None, min_length=1, max_length=PATH_MAX, description=(
        "Link-prediction models: the candidate node ids for queries (default: every node)."))
    top_k: Optional[int] = Field(None, ge=1, le=100000, description="Candidates kept per query node (default 10).")

    @model_validator(mode="after")
    def _a_model_file(self) -> "PredictSpec":  # the CEL rule's twin
        if not self.model.endswith(".pt"):
            raise ValueError(f"spec.predict.model must name a model file ending in .pt (got "
                             f"{self.model!r}): a training job's status.artifacts.model, or one of its checkpoints")
        if self.queries is None and (self.candidates is not None or self.top_k is not None):
            raise ValueError("spec.predict.candidates and topK choose the best candidates of spec.predict.queries: "
                             "add queries, or remove them")
        return self


class GrappaJobSpec(Section):
    """What a user writes under `spec:`; the training sections are `grappa.config`'s models."""

    # Cross-field rules as CEL (the API server refuses at admission); _train_config_checks and
    # desired.check_runnable are their twins for the operator and `grappa train`.
    model_config = ConfigDict(**Section.model_config, json_schema_extra=cel.validations(*SPEC_RULES))

    strategy: Strategy = _with_rules(TrainConfig.model_fields["strategy"],  # type: ignore[valid-type]
                                     cel.immutable("spec.strategy"))
    partitions: int = _with_rules(TrainConfig.model_fields["partitions"],  # the trainer's bounds
                                  cel.immutable("spec.partitions"))
    task: Task = _with_rules(TrainConfig.model_fields["task"],  # type: ignore[valid-type]
                             cel.immutable("spec.task"))
    dataset: DatasetConfig = Field(default_factory=DatasetConfig,
                                   description="Dataset; relative root/path resolve under the storage mount.",
                                   json_schema_extra=cel.validations(*DATASET_RULES))
    model: ModelConfig = Field(default_factory=ModelConfig, description="GNN model.",
                               json_schema_extra=cel.validations(cel.immutable("spec.model")))
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="Training loop.")
    grappa: GrappaConfig = Field(default_factory=GrappaConfig,
                                 description="Reducer correction and repartition rounds.",
                                 json_schema_extra=cel.validations(*GRAPPA_RULES))
    varco: VarcoConfig = Field(default_factory=VarcoConfig,
                               description="Activation compression (strategy varco only).",
                               json_schema_extra=cel.validations(cel.rule(
                                   "self.rMin <= self.rMax", "varco.rMin must be <= varco.rMax", ".rMin")))
    link: LinkConfig = Field(default_factory=LinkConfig,
                             description="Link prediction: split, decoder, negatives (task link-prediction only).",
                             json_schema_extra=cel.validations(cel.immutable("spec.link")))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig,
                                         description="Checkpoints (written under runDir on the storage volume).")
    prepare: PrepareConfig = Field(default_factory=PrepareConfig,
                                   description="How the prepare pod streams the dataset into the chunk store.")
    storage: Storage = Field(..., description="Shared volume mounted in every pod, or the S3 bucket "
                             "the store and the run live in.",
                             json_schema_extra=cel.validations(cel.immutable("spec.storage")))
    metrics_port: int = Field(9400, ge=0, le=65535,
                              description="Prometheus port of every trainer pod; 0 = off.")
    master_port: int = Field(29500, ge=1, le=65535, description="Rendezvous port on the aggregator.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restarts, deadlines, cleanup.")
    scheduling_policy: SchedulingPolicy = Field(default_factory=SchedulingPolicy,
                                                description="Gang scheduling (off by default).")
    aggregator: PodSettings = Field(default_factory=PodSettings, description="Aggregator pod (rank 0).")
    worker: PodSettings = Field(default_factory=PodSettings, description="Worker pods (ranks 1..P).")
    predict: Optional[PredictSpec] = Field(
        None, description="Make this a predict job: the pods apply this model file to every node of "
                          "spec.dataset (P workers, exact layer-wise inference; the aggregator pod "
                          "coordinates) instead of training. The model and training sections do not apply.",
        json_schema_extra=cel.validations(cel.immutable("spec.predict"), cel.rule(
            "self.model.endsWith('.pt')", "spec.predict.model must name a model file ending in .pt: a "
            "training job's status.artifacts.model, or one of its checkpoints", ".model"), cel.rule(
            "has(self.queries) || (!has(self.candidates) && !has(self.topK))",
            "spec.predict.candidates and topK choose the best candidates of spec.predict.queries: add "
            "queries, or remove them", ".queries")))

    @model_validator(mode="after")
    def _train_config_checks(self) -> "GrappaJobSpec":
        # Same cross-field rules as the trainer (chunks >= partitions, one fanout per layer).
        self.to_train_config(run_dir="/tmp/check")
        p = self.predict
        if p is not None and self.dataset.name == "tables" and (p.pairs is not None or p.queries is not None):
            raise ValueError(TABLES_PAIRS_MESSAGE)
        if p is not None and not self.storage.volume:
            raise ValueError(PREDICT_NEEDS_VOLUME)
        if self.strategy == "retexo" and not self.storage.volume:
            raise ValueError(RETEXO_NEEDS_VOLUME)
        return self

    def to_train_config(self, run_dir: str, store_dir: Optional[str] = None) -> TrainConfig:
        return TrainConfig(
            strategy=self.strategy,
            partitions=self.partitions,
            task=self.task,
            link=self.link,
            dataset=self.dataset.model_copy(deep=True),
            model=self.model,
            training=self.training,
            grappa=self.grappa,
            varco=self.varco,
            checkpoint=self.checkpoint,
            prepare=self.prepare,
            storage=StorageConfig(fetch=self.storage.fetch, halo_rows=self.storage.halo_rows, s3=self.storage.s3),
            run_dir=run_dir,
            store_dir=store_dir,
            metrics_port=self.metrics_port,
        )


# ---- status (written by the operator, progress/result by the aggregator) -------------------

Phase = Literal["Queued", "Pending", "Preparing", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
CONDITION_TYPES = ("Created", "Queued", "Running", "Restarting", "Succeeded", "Failed", "Suspended")


class Condition(Section):
    type: Literal[CONDITION_TYPES] = Field(..., description="Condition type.")  # type: ignore[valid-type]
    status: Literal["True", "False", "Unknown"] = Field(..., description="True, False or Unknown.")
    reason: Optional[str] = Field(None, description="CamelCase reason.")
    message: Optional[str] = Field(None, description="Human-readable detail.")
    last_transition_time: Optional[str] = Field(None, description="When status last changed (RFC 3339).")


class Progress(Section):
    """Patched by the aggregator after every epoch (docs/architecture.md)."""

    epoch: Optional[int] = Field(None, description="Epochs completed.")
    epochs_total: Optional[int] = None
    round: Optional[int] = Field(None, description="Repartition round the aggregator applies.")
    loss: Optional[float] = None
    train_acc: Optional[float] = None
    val_acc: Optional[float] = None
    test_acc: Optional[float] = None
    val_mrr: Optional[float] = Field(None, description="Task link-prediction: validation MRR at the last evaluation.")
    test_mrr: Optional[float] = Field(None, description="Task link-prediction: test MRR at the last evaluation "
                                                        "(at the end: of the best-validation epoch).")
    test_hits50: Optional[float] = Field(None, description="Task link-prediction: test Hits@50 at the last evaluation.")
    test_auc: Optional[float] = Field(None, description="Task link-prediction: test AUC at the last evaluation.")
    best_val: Optional[float] = Field(None, description="Best validation accuracy (link-prediction: MRR) so far.")
    best_epoch: Optional[int] = None
    epoch_seconds: Optional[float] = None
    train_bytes_per_epoch: Optional[int] = None
    eval_bytes_per_epoch: Optional[int] = None
    eta_seconds: Optional[float] = None
    updated_at: Optional[str] = None
    finished: Optional[bool] = None


class Result(Section):
    test_acc: Optional[float] = None
    best_val: Optional[float] = None
    best_epoch: Optional[int] = None
    # task link-prediction: the best-validation epoch's test ranking metrics (OGB's evaluators)
    test_mrr: Optional[float] = None
    test_hits10: Optional[float] = None
    test_hits50: Optional[float] = None
    test_hits100: Optional[float] = None
    test_auc: Optional[float] = None


class RoundRecord(Section):
    round: int
    pairing_seed: int
    effective_epoch: int
    reason: str = Field(..., description="initial, every or plateau.")
    decided_at: Optional[str] = None


class Rounds(Section):
    """Owned by the operator: the latest repartition decision and its history."""

    current: int = Field(..., description="Latest decided round.")
    pairing_seed: int
    effective_epoch: int = Field(..., description="First epoch the round is meant to apply to.")
    history: list[RoundRecord] = Field(default_factory=list)
    note: Optional[str] = Field(None, description="Why no rounds are scheduled, when they are not.")
    val_history: list[list[float]] = Field(
        default_factory=list, description="(epoch, valAcc) seen in the current round, for plateau.")


class ReplicaStatus(Section):
    desired: int = 0
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class Replicas(Section):
    aggregator: ReplicaStatus = Field(default_factory=ReplicaStatus)
    worker: ReplicaStatus = Field(default_factory=ReplicaStatus)


class QueueStatus(Section):
    local_queue: Optional[str] = Field(None, description="Kueue LocalQueue (label kueue.x-k8s.io/queue-name).")
    workload: Optional[str] = Field(None, description="The Kueue Workload filed for the job.")
    cluster_queue: Optional[str] = Field(None, description="ClusterQueue that admitted it.")
    admitted: bool = Field(False, description="Kueue admitted the aggregator and the workers.")


class Artifacts(Section):
    model: Optional[str] = Field(None, description="The self-describing model file (best-validation "
                                                   "parameters and what rebuilds the model).")
    report: Optional[str] = Field(None, description="report.json: history, result, traffic.")
    plot: Optional[str] = Field(None, description="Loss and accuracy per epoch (PNG).")
    checkpoints: Optional[str] = Field(None, description="Directory of the resumable checkpoints.")
    logs: Optional[str] = Field(None, description="Directory of the trainers' logs.")
    # a predict job's outputs (row v of every .npy is node v of the dataset)
    predictions: Optional[str] = Field(None, description="Predict jobs: predictions.npy, int32 class per node.")
    scores: Optional[str] = Field(None, description="Predict jobs: scores.npy, float16 class probabilities.")
    embeddings: Optional[str] = Field(None, description="Predict jobs: embeddings.npy, the chosen layer's output.")
    manifest: Optional[str] = Field(None, description="Predict jobs: manifest.json, what each file holds.")
    pair_scores: Optional[str] = Field(None, description="Link-prediction predict jobs: pair_scores.npy, "
                                                         "float32 score per pair of spec.predict.pairs.")
    topk: Optional[str] = Field(None, description="Link-prediction predict jobs: topk.npy, int64 [Q, K] best "
                                                  "candidates per query node.")
    topk_scores: Optional[str] = Field(None, description="Link-prediction predict jobs: topk_scores.npy, their scores.")
    evaluation: Optional[str] = Field(None, description="Predict jobs: evaluation.json, accuracy per split.")
    table: Optional[str] = Field(None, description="Predict jobs on a graph from tables: predictions.parquet, "
                                                   "one row per node keyed by the nodes table's own id.")


MAX_DISRUPTIONS = 20  # status.disruptionHistory keeps the newest


class DisruptionRecord(Section):
    """One stop that was not the job's fault; the job resumed from its checkpoint."""

    time: str = Field(..., description="When the operator saw it (RFC 3339).")
    source: Literal["Kueue", "Kubernetes"] = Field(
        ..., description="Kueue (an eviction: preemption, a stopped queue, deactivation) or Kubernetes "
                         "(a pod evicted, preempted or its node lost).")
    reason: str = Field(..., description="Kueue's eviction reason (e.g. Preempted) or the pod's "
                                         "DisruptionTarget reason (e.g. EvictionByEvictionAPI).")
    message: Optional[str] = None
    epoch: Optional[int] = Field(None, description="Epochs completed when the operator saw the stop "
                                                   "(status.progress.epoch): the job resumes from its "
                                                   "checkpoint of that epoch, or of one finished before "
                                                   "its SIGTERM.")


class GrappaJobStatus(Section):
    phase: Optional[Phase] = Field(None, description="Current phase.")
    reason: Optional[str] = Field(None, description="Why the job is in this phase.")
    message: Optional[str] = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: Optional[int] = None
    restarts: int = Field(0, description="Group restarts so far (attempt number of the pods).")
    disruptions: int = Field(0, description="Restarts caused by evictions or preemptions (not "
                             "counted against backoffLimit).")
    queue_evictions: int = Field(0, description="Times Kueue evicted the job (preemption, a stopped "
                                 "queue, deactivation); each resumed from the checkpoint once readmitted.")
    disruption_history: list[DisruptionRecord] = Field(
        default_factory=list, max_length=MAX_DISRUPTIONS,
        description=f"The newest {MAX_DISRUPTIONS} Kueue evictions and pod disruptions, oldest first.")
    prepared: bool = Field(False, description="The chunk store was prepared.")
    replicas: Replicas = Field(default_factory=Replicas)
    start_time: Optional[str] = None
    running_time: Optional[str] = Field(None, description="When the group first ran.")
    completion_time: Optional[str] = None
    active_since: Optional[str] = Field(
        None, description="Start of the activeDeadlineSeconds clock: creation, resume or admission.")
    queue: Optional[QueueStatus] = None
    run_dir: Optional[str] = Field(None, description="Run directory on the job's volume, or (a job "
                                   "without one) the s3:// URI of the run's home in the bucket.")
    artifacts: Optional[Artifacts] = Field(None, description="Paths of the run's outputs on the volume, "
                                           "or their s3:// URIs (a job without one).")
    blocked_since: Optional[str] = Field(
        None, description="Since when the API server refuses a child for now (quota in use).")
    progress: Optional[Progress] = None
    rounds: Optional[Rounds] = None
    result: Optional[Result] = None


def parse_spec(spec: Any) -> GrappaJobSpec:
    """Validate a spec read from the API server; SpecError names every bad field."""
    if not isinstance(spec, dict):
        raise SpecError("InvalidSpec", "spec: expected a mapping")
    try:
        return GrappaJobSpec.model_validate(spec)
    except ValidationError as err:
        raise SpecError("InvalidSpec", "invalid spec: " + describe_errors(err)) from None


def describe_errors(err: ValidationError, prefix: str = "spec") -> str:
    """'spec.a.b: message; spec.c: message' (field paths in wire names, as the user wrote them)."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]))
        parts.append(f"{loc}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
