"""All configuration, typed (docs/operations.md): `Settings` and how it is loaded, the sections of selection, merges,
Spark, commits and tables; the streaming job's sections in `settings_job`, self-optimizing's in `settings_optimizing`.

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

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from recluster.core.selection.plan import Policy
from recluster.settings_discovery import DiscoverySettings
from recluster.settings_input import GIB, MIB, Section, override_value, read_config_file
from recluster.settings_input import SettingsError as SettingsError
from recluster.settings_input import describe_validation_error as describe_validation_error
from recluster.settings_job import HttpSettings, KafkaSettings, KubernetesSettings, StreamSettings
from recluster.settings_optimizing import BenefitSettings, SelfOptimizingSettings

CLUSTER_BY_PROPERTY = "recluster.clusterBy"
"""Table property holding the cluster key, written by `ALTER TABLE t CLUSTER BY (a, b)`."""
CURVE_PROPERTY = "recluster.curve"
"""Table property holding the curve of a multi-column key (`hilbert`, `zorder`, `linear`): `CLUSTER BY ... USING`."""
RANGES_PROPERTY = "recluster.curveRanges"
"""Table property in which recluster before the `_recluster/` pointers named a curve key's range bounds
(`_recluster/ranges-<id>.json`); read until new bounds are sampled, never written: bounds are named under `_recluster/`
(delta/ranges.py)."""
POLICY_PROPERTY = "recluster.policy"
"""Table property choosing the selection policy of one table (`levels` or `absorb`)."""

PRESET_BETAS: dict[str, float] = {"quality": 0.2, "economy": 1.0}
"""`selection.preset`: the beta each preset stands for (their measured effect: docs/performance.md)."""


class ClusteringSettings(Section):
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


class SmallTableSettings(Section):
    """Tables (partitions) whose files fit in one target file (`clustering.target_rows` and `target_file_bytes`):
    not reclustered at every append, compacted once enough files gather (docs/concepts.md#small-tables)."""

    compact_files: int = Field(50, ge=0)
    """Files such a partition gathers before one task compacts them into one; 0: off (planned like any table).
    50 is Delta's auto compaction minimum (`spark.databricks.delta.autoCompact.minNumFiles`)."""


class ParquetSettings(Section):
    """How merge outputs are written (`merge.parquet.*`): like the best writers, ZSTD by default."""

    codec: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"
    """Compression codec of the outputs."""
    level: int | None = None
    """Compression level of the codec (None: the codec's default; zstd 1-22)."""
    row_group_rows: int = Field(1_048_576, gt=0)
    """Rows per Parquet row group."""
    dictionary: bool = True
    """Dictionary-encode columns (pyarrow falls back to plain encoding when a dictionary grows too big)."""


class MergeSettings(Section):
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


class SelectionSettings(Section):
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


class SparkSettings(Section):
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


class CommitSettings(Section):
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


class TableSettings(Section):
    uri: str
    """The table: a path, `file://`, `s3://`, `gs://`, `abfss://` or `az://` URI, or a name `db.table` /
    `catalog.db.table` found through the Spark session's catalog (docs/discovery.md#tables-by-name)."""
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


_CONFIG_FILE: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("config_file")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECLUSTER_", env_nested_delimiter="__", extra="forbid", frozen=True)

    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    """delta-rs storage options for every table (per-table options are merged on top): credentials, endpoint,
    region, `conditional_put`; they may hold secrets, so they are never printed or logged."""
    clustering: ClusteringSettings = ClusteringSettings()
    small_tables: SmallTableSettings = SmallTableSettings()
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
    discovery: DiscoverySettings = DiscoverySettings()
    """Tables the job finds in catalogs and under storage roots, besides `tables` (docs/discovery.md)."""
    benefit: BenefitSettings = BenefitSettings()
    """Event logs the job reads to count what clustering saves queries, and the pause of unread tables."""

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
