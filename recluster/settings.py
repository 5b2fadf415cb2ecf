"""All configuration, typed, in one place (docs/operations.md).

Resolution order, highest first: CLI overrides (`--set section.field=value`), environment variables
(`RECLUSTER_` prefix, `__` between nested names, e.g. `RECLUSTER_CLUSTERING__DEPTH_RATIO=0.2`), the YAML
file (`--config FILE`), then the defaults below. Per-table values come from the table property named in
each field's docstring when the table sets it.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from recluster.core.selection.plan import Policy
from recluster.settings_input import SettingsError as SettingsError
from recluster.settings_input import describe_validation_error as describe_validation_error
from recluster.settings_input import override_value, read_config_file

GIB = 1 << 30
MIB = 1 << 20

CLUSTER_BY_PROPERTY = "recluster.clusterBy"
"""Table property holding the cluster key, written by `ALTER TABLE t CLUSTER BY (a, b)`."""
CURVE_PROPERTY = "recluster.curve"
"""Table property holding the curve of a multi-column key (`hilbert`, `zorder`, `linear`): `CLUSTER BY ... USING`."""
RANGES_PROPERTY = "recluster.curveRanges"
"""Table property in which recluster before issue 41 named a curve key's range bounds (`_recluster/ranges-<id>.json`);
read until new bounds are sampled, never written: bounds are named under `_recluster/` (delta/ranges.py)."""
POLICY_PROPERTY = "recluster.policy"
"""Table property choosing the selection policy of one table (`levels` or `absorb`)."""

PRESET_BETAS: dict[str, float] = {"quality": 0.2, "economy": 1.0}
"""`selection.preset`: the beta each preset stands for (their measured effect: docs/performance.md)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusteringSettings(_Section):
    """How selection and merges behave (docs/concepts.md#selection-policies-6)."""

    depth_ratio: float = Field(0.1, gt=0)
    """Level threshold = clamp(blocks_in_level * depth_ratio, 1, max_depth_threshold)."""
    max_depth_threshold: float = Field(16.0, ge=1)
    """The highest a level's threshold gets, however many files the level has."""
    target_rows: int = Field(1_000_000, gt=0)
    """Rows per output file (a key value is never split unless it alone exceeds this)."""
    target_file_bytes: int = Field(256 * MIB, gt=0)
    """Upper bound on output file size, applied on top of target_rows."""
    max_merge_bytes: int = Field(4 * GIB, gt=0)
    """Upper bound on the input bytes of one merge task."""
    max_merge_files: int = Field(512, ge=2)
    """Upper bound on the input files of one merge task."""
    max_tasks_per_round: int = Field(4, ge=1)
    """Independent tasks (disjoint key ranges) of one round run concurrently, at most this many."""
    max_final_rounds: int = Field(100, ge=1)
    """FINAL stops after this many rounds even if it still makes progress."""
    curve: Literal["hilbert", "zorder", "linear"] | None = None
    """How a multi-column key orders rows; None: the table property `recluster.curve`, else hilbert for two or
    more key columns and linear (lexicographic) for one."""


class ParquetSettings(_Section):
    """How merge outputs are written (`merge.parquet.*`): like the best writers, ZSTD by default."""

    codec: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"
    """Compression codec of the outputs."""
    level: int | None = None
    """Compression level of the codec (None: the codec's default; zstd 1-22)."""
    row_group_rows: int = Field(1_048_576, gt=0)
    """Rows per Parquet row group."""
    dictionary: bool = True
    """Dictionary-encode columns (pyarrow falls back to plain encoding when a dictionary grows too big)."""


class MergeSettings(_Section):
    parquet: ParquetSettings = ParquetSettings()
    in_process_max_bytes: int = Field(256 * MIB, ge=0)
    """Tasks of at most this many input bytes run the merge kernel in the process in one piece (no JVM, no Spark
    job). Bigger ones are range-partitioned: where `placement` says."""
    placement: Literal["auto", "process", "spark"] = "auto"
    """Where tasks above in_process_max_bytes run. `spark`: in Spark tasks (the same ranges, Arrow pieces moved
    by Spark's shuffle). `process`: in this process, ranges spilled to local disk, `threads` at a time (memory
    bounded by the output file size, not the task's). `auto`: the process when spark.master is local (the same
    cores, measured faster: bench/output_bench.py), else Spark."""
    threads: int | None = Field(None, ge=1)
    """Ranges (and output files) the in-process kernel works on at once; None: the machine's cores."""
    spill_dir: str | None = None
    """Where the in-process kernel spills its ranges (None: the system's temporary directory)."""

    @property
    def resolved_threads(self) -> int:
        return self.threads or os.cpu_count() or 1


class SelectionSettings(_Section):
    """Which selection policy plans the rounds (docs/concepts.md), and the `absorb` policy's one knob."""

    policy: Policy = Policy.ABSORB
    """`absorb` (overlap-aware ratio rule; the default: shallower than `levels` at equal rewriting on the
    benchmark) or `levels` (Databend's per-level thresholds); per table, the table property
    `recluster.policy` overrides it."""
    beta: float = Field(0.35, gt=0)
    """absorb: a run absorbs all newer runs once they hold beta x the rows of its files they overlap.
    Lower: shallower tables, more rewriting (default chosen by `python -m bench.compare --suite absorb`)."""
    preset: Literal["quality", "economy"] | None = None
    """Sets beta: quality = 0.2, economy = 1.0 (overrides `beta`)."""
    target_depth: float | None = Field(None, ge=1)
    """absorb: scale beta by target_depth / average_depth (at most 8x either way), so the table is held
    near this depth instead of at a fixed ratio."""

    @property
    def resolved_beta(self) -> float:
        return PRESET_BETAS[self.preset] if self.preset else self.beta


def resolve_selection(
    selection: SelectionSettings,
    properties: Mapping[str, str],
    *,
    policy: str | None = None,
    beta: float | None = None,
) -> SelectionSettings:
    """The selection for one table: `policy`/`beta` (CLI) over the table property over the settings."""
    chosen = policy or properties.get(POLICY_PROPERTY) or selection.policy
    if chosen not in tuple(Policy):
        source = "--policy" if policy else f"table property {POLICY_PROPERTY}"
        raise SettingsError(f"{source} must be one of {', '.join(Policy)} (got {chosen!r})")
    if beta is not None and not beta > 0:
        raise SettingsError(f"--beta must be a positive number (got {beta!r})")
    updates: dict[str, Any] = {"policy": chosen}
    if beta is not None:
        updates.update(beta=beta, preset=None)
    return selection.model_copy(update=updates)


class SparkSettings(_Section):
    master: str = "local[*]"
    """The Spark master: `local[*]`, `spark://host:7077`, `k8s://...` (set by `kubernetes.enabled`)."""
    app_name: str = "recluster"
    """The Spark application's name."""
    shuffle_partitions: int = Field(8, ge=1)
    """`spark.sql.shuffle.partitions` of the session."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration, passed through unchanged."""
    log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = "ERROR"
    """Level of Spark's own loggers once a session runs (startup chatter is silenced by recluster's log4j2 config)."""


class CommitSettings(_Section):
    max_attempts: int = Field(20, ge=1)
    """Attempts of one commit: each follows another writer's commit that took our version, or a storage error
    (backed off); a conflict with a concurrent delete/update is final, never retried in place."""
    deadline_seconds: float = Field(120.0, gt=0)
    """A commit not written within this time gives up (its outputs are deleted, the next round re-plans)."""
    backoff_seconds: float = Field(0.5, ge=0)
    """First wait after a storage error; doubled (with jitter) on each further error."""
    max_backoff_seconds: float = Field(8.0, ge=0)
    """The longest wait between two attempts."""
    allow_unsafe_single_writer: bool = False
    """Commit to S3 tables without `conditional_put` or a locking provider. S3 then has no atomic
    put-if-absent, so two writers committing the same version overwrite each other: only safe when nothing
    else ever writes to the table while recluster runs."""


class TableSettings(_Section):
    uri: str
    """The table: a path, `file://`, `s3://`, `gs://`, `abfss://` or `az://` URI."""
    cluster_by: list[str] | None = None
    """Overrides the table property `recluster.clusterBy`."""
    curve: Literal["hilbert", "zorder", "linear"] | None = None
    """Overrides the table property `recluster.curve` (and clustering.curve)."""
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options of this table, merged over the global ones (may hold secrets: never printed)."""

    @field_validator("cluster_by", mode="before")
    @classmethod
    def _split_columns(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [c.strip() for c in value.split(",") if c.strip()]
        return value


class OptimizerGroup(_Section):
    """A named share of the cluster for optimizing and reclustering (docs/operations.md): one Spark FAIR pool."""

    policy: Literal["quota", "balanced"] = "quota"
    """quota: the table with the lowest quota occupation first; balanced: the longest since last optimized first."""
    max_concurrent_tasks: int = Field(2, ge=1)
    """Merge tasks of this group running at once (a table's plan never runs more tasks in parallel)."""
    cores: int = Field(1, ge=1)
    """The pool's minShare and weight: the cores Spark's FAIR scheduler guarantees the group under load."""


class MaintenanceSettings(_Section):
    """Expiry of old versions, log cleanup, checkpoints and orphan cleanup, per table on a schedule."""

    interval_seconds: float = Field(24 * 3600.0, ge=0)
    """How often the job maintains each table; 0 turns scheduled maintenance off."""
    retention_hours: float = Field(168.0, ge=0)
    """Vacuum retention; never below the table's `delta.deletedFileRetentionDuration` (the larger wins)."""
    orphan_safety_age_seconds: float = Field(24 * 3600.0, ge=0)
    """Only files of ours older than this are orphan candidates (a running rewrite has young outputs)."""
    checkpoint_every_versions: int = Field(100, ge=1)
    """Write a checkpoint when the newest one is this many versions behind."""


class SelfOptimizingSettings(_Section):
    """Defaults of the `self-optimizing.*` table properties and the optimizer groups (docs/operations.md; Amoro names).

    A table property of the same name (with dashes and dots, e.g. `self-optimizing.minor.trigger.file-count`)
    overrides the default for that table; intervals are milliseconds as in Amoro.
    """

    enabled: bool = True
    """Minor, major and full optimizing and maintenance of the tables."""
    group: str = "default"
    """The optimizer group a table belongs to (one of `groups`)."""
    quota: float = Field(0.5, gt=0)
    """Share of one core-hour per hour the table may spend on rewrites (occupation = busy time / (1 h x quota))."""
    target_size: int = Field(128 * MIB, gt=0)
    """Size of the files optimizing writes (segments)."""
    fragment_ratio: float = Field(8.0, gt=1)
    """Files smaller than target_size / fragment_ratio are fragments."""
    min_target_size_ratio: float = Field(0.75, gt=0, le=1)
    """Segments smaller than target_size x this are undersized (major optimizing combines them)."""
    minor_trigger_file_count: int = Field(12, ge=2)
    """Minor optimizing runs when a partition has this many fragments."""
    minor_trigger_interval_ms: int = 3_600_000
    """Minor also runs when this long passed since the last minor and there are >= 2 fragments; < 0: off."""
    major_trigger_duplicate_ratio: float = Field(0.1, gt=0, le=1)
    """Major runs when deleted rows (deletion vectors) hide more than this share of a segment's rows."""
    major_trigger_undersized_count: int = Field(4, ge=2)
    """Major runs when a partition has this many undersized segments."""
    full_trigger_interval_ms: int = -1
    """Full optimizing of every partition at this interval; < 0: off."""
    groups: dict[str, OptimizerGroup] = Field(default_factory=lambda: {"default": OptimizerGroup()})
    """The optimizer groups by name, each one Spark FAIR scheduler pool."""
    history_location: str | None = None
    """A Delta table where every process is appended (queryable with Spark); None: `history` under the
    stream's checkpoint location, so one directory holds all of the job's state."""
    quota_window_seconds: float = Field(3600.0, gt=0)
    """The window over which quota occupation is measured (Amoro: the last hour)."""
    maintenance: MaintenanceSettings = MaintenanceSettings()
    tick_seconds: float = Field(10.0, gt=0)
    """How often the job checks time-based triggers (intervals, maintenance) between micro-batches."""

    @model_validator(mode="after")
    def _check(self) -> SelfOptimizingSettings:
        if self.group not in self.groups:
            raise ValueError(f"self_optimizing.group {self.group!r} is not one of the groups {sorted(self.groups)}")
        return self


class KafkaSettings(_Section):
    """The Kafka commit-event source and the metrics topic (docs/streaming.md)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    """The Kafka brokers, `host:port[,host:port...]`."""
    commits_topic: str = "recluster.commits"
    """The topic of commit events (`stream.source: kafka`)."""
    metrics_topic: str | None = None
    """Where one metrics record per touched table goes after each micro-batch; None: not published."""
    starting_offsets: Literal["earliest", "latest"] = "latest"
    """Where a new checkpoint starts reading the commits topic."""
    max_events_per_batch: int = Field(10_000, ge=1)
    """Commit events one micro-batch reads at most."""
    metrics_buffer_records: int = Field(10_000, ge=1)
    """Records kept while the broker is unreachable; the oldest are dropped (and counted) beyond this."""
    client_options: dict[str, str] = Field(default_factory=dict)
    """Extra kafka-python client settings (security_protocol, sasl_mechanism, ...)."""
    reader: Literal["python", "spark"] = "python"
    """What reads the commits topic. `python`: recluster's own source (kafka-python, no jars). `spark`: Spark's
    Kafka source, which needs `spark-sql-kafka-0-10` on the classpath (`spark.conf` `spark.jars.packages` or
    `spark.jars`); `client_options` are handed to it in the Java client's names (docs/kafka.md)."""


def default_state_dir() -> str:
    """Where the job keeps its checkpoint and history by default: `$XDG_STATE_HOME/recluster`, else
    `~/.local/state/recluster` — never the current directory of a one-off command."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "recluster")


class StreamSettings(_Section):
    source: Literal["delta-log", "kafka"] = "delta-log"
    """What triggers the job: polling the watched tables' Delta logs, or commit events on Kafka."""
    checkpoint_location: str = Field(default_factory=lambda: os.path.join(default_state_dir(), "checkpoint"))
    """The Spark checkpoint of the job; the history table lives under it unless set on its own. Default:
    `$XDG_STATE_HOME/recluster/checkpoint`, else `~/.local/state/recluster/checkpoint` (never the working directory)."""
    trigger_interval_seconds: float = Field(1.0, gt=0)
    """The streaming query's processing-time trigger."""
    starting_version: Literal["latest", "earliest"] | int = "latest"
    """Where the job starts reading each log on its first start (a checkpoint then keeps its offsets): `latest`,
    `earliest` or a version number."""
    max_commits_per_batch: int = Field(1000, ge=1)
    """Commits one micro-batch reads at most."""
    max_tasks_per_batch: int = Field(4, ge=1)
    """Merge tasks one micro-batch runs at most; the rest is pending for the next."""
    max_bytes_per_batch: int = Field(8 * GIB, gt=0)
    """Input bytes one micro-batch merges at most; the rest is pending for the next."""
    table_retry_seconds: float = Field(10.0, gt=0)
    """After a table's work fails (its error shown with the table), it is tried again after this long, doubled for
    each further failure in a row; the other tables go on meanwhile."""
    table_retry_max_seconds: float = Field(600.0, gt=0)
    """The longest wait before a failing table is tried again."""


class KubernetesSettings(_Section):
    """Spark on Kubernetes (client mode: this process is the driver, executors are pods; docs/operations.md).

    When enabled, `recluster watch` derives the Spark master and the `spark.kubernetes.*`, driver and executor
    settings from this section (recluster/k8s.py); keys set in `spark.conf` still win over the derived ones.
    """

    enabled: bool = False
    """Run Spark on Kubernetes: derive the master and the `spark.kubernetes.*` settings from this section."""
    api_server: str = "https://kubernetes.default.svc"
    """The API server as seen from the driver pod; the Spark master becomes `k8s://<api_server>`."""
    namespace: str = "default"
    """Where executor pods are created: the driver pod's namespace."""
    container_image: str | None = None
    """Executor image: the driver's own image, so both run the same Python, pyspark and recluster."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Pull policy of the executor image."""
    service_account: str = "recluster"
    """Service account allowed to manage executor pods, services, config maps and volume claims."""
    driver_service: str = "recluster-driver"
    """Headless service selecting the driver pod; executors reach the driver at its DNS name."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, part of the driver's host name."""
    driver_port: int = Field(7078, ge=1, le=65535)
    """`spark.driver.port`: executors connect to the driver here (the Service exposes it)."""
    block_manager_port: int = Field(7079, ge=1, le=65535)
    """`spark.driver.blockManager.port` (the Service exposes it)."""
    executor_instances: int = Field(2, ge=0)
    """Fixed number of executors when dynamic allocation is off."""
    dynamic_allocation: bool = False
    """Scale executors with the work (with shuffle tracking: no external shuffle service on Kubernetes)."""
    min_executors: int = Field(0, ge=0)
    """With dynamic allocation: the fewest executors."""
    max_executors: int = Field(4, ge=1)
    """With dynamic allocation: the most executors."""
    executor_cores: int = Field(1, ge=1)
    """Cores of each executor pod."""
    executor_memory: str = "2g"
    """Heap of each executor (`spark.executor.memory`)."""
    executor_pod_template_file: str | None = None
    """Executor pod template (security context, volumes, credentials): a path readable by the driver."""
    event_log_dir: str | None = None
    """Spark event log (for the history server) on durable storage; None: no event log."""

    @model_validator(mode="after")
    def _check(self) -> KubernetesSettings:
        if self.enabled and not self.container_image:
            raise ValueError("kubernetes.container_image is required when kubernetes.enabled is true")
        if self.min_executors > self.max_executors:
            raise ValueError("kubernetes.min_executors must not exceed kubernetes.max_executors")
        return self

    @property
    def driver_host(self) -> str:
        """The driver's DNS name: the headless service in the driver's namespace."""
        return f"{self.driver_service}.{self.namespace}.svc.{self.cluster_domain}"


class HttpSettings(_Section):
    """The job's HTTP endpoints: /healthz, /readyz, /metrics (Prometheus), /status, and the status pages (`/`,
    `/tables/<name>`, `/api/tables`; jobs/health.py, jobs/pages.py)."""

    port: int | None = Field(None, ge=0, le=65535)
    """None: no HTTP server; 0: any free port."""
    host: str = "127.0.0.1"
    """Where the server binds: this machine only unless configured (a pod sets 0.0.0.0 for its probes)."""
    progress_timeout_seconds: float = Field(900.0, gt=0)
    """/healthz fails when the query made no progress for this long; must exceed the longest micro-batch."""


_CONFIG_FILE: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("config_file")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECLUSTER_", env_nested_delimiter="__", extra="forbid", frozen=True)

    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options for every table (per-table options are merged on top): credentials, endpoint,
    region, `conditional_put`; they may hold secrets, so they are never printed or logged."""
    clustering: ClusteringSettings = ClusteringSettings()
    merge: MergeSettings = MergeSettings()
    selection: SelectionSettings = SelectionSettings()
    spark: SparkSettings = SparkSettings()
    commit: CommitSettings = CommitSettings()
    stream: StreamSettings = Field(default_factory=StreamSettings)
    kafka: KafkaSettings = KafkaSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    http: HttpSettings = HttpSettings()
    self_optimizing: SelfOptimizingSettings = SelfOptimizingSettings()
    tables: list[TableSettings] = Field(default_factory=list)
    """The tables to watch (and the default list of `status`), each with its own key and storage options."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, InitSettingsSource(settings_cls, _CONFIG_FILE.get({}))


def _override_path(name: str) -> list[str]:
    """Split `section.field[.key]` along the settings models; below a mapping field the rest is one key
    (`spark.conf.spark.sql.shuffle.partitions` sets conf["spark.sql.shuffle.partitions"])."""
    parts = name.split(".")
    model: type[BaseModel] = Settings
    for index, part in enumerate(parts):
        info = model.model_fields.get(part)
        annotation = info.annotation if info else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            continue
        return [*parts[:index], part, ".".join(parts[index + 1 :])] if index + 1 < len(parts) else parts
    return parts


def _nest_overrides(overrides: Iterable[str]) -> dict[str, Any]:
    """`section.field=value` strings to a nested dict; values stay strings for pydantic to validate."""
    nested: dict[str, Any] = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"override {item!r} is not of the form section.field=value")
        *parents, leaf = _override_path(name.strip())
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = override_value(value)
    return nested


def load_settings(config_file: str | Path | None = None, overrides: Iterable[str] = ()) -> Settings:
    """Settings from defaults, the YAML file, the environment and CLI overrides, validated."""
    file_data = read_config_file(Path(config_file)) if config_file else {}
    token = _CONFIG_FILE.set(file_data)
    try:
        return Settings(**_nest_overrides(overrides))
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None
    finally:
        _CONFIG_FILE.reset(token)


def history_location(settings: Settings) -> str:
    """Where the optimizing history table lives (self_optimizing.history_location, default under the checkpoint)."""
    configured = settings.self_optimizing.history_location
    return configured or settings.stream.checkpoint_location.rstrip("/") + "/history"


def table_storage_options(settings: Settings, table: TableSettings | None) -> Mapping[str, str]:
    return {**settings.storage_options, **(table.storage_options if table else {})}
