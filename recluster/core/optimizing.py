"""Self-optimizing (docs/operations.md, Amoro's ideas on Delta). Pure: blocks, properties and history in; a table's
config, health, the pending work and plans out. No I/O. When each table's turn comes: `scheduling`.

Appended files (level 0: what writers produced) smaller than target_size / fragment_ratio are *fragments*,
the rest *segments*; segments below target_size x min_target_size_ratio are *undersized*. Files of higher
levels were sized by reclustering (clustering.target_rows/target_file_bytes) and are left to it: compacting
them too would undo its cuts. **minor** compacts a partition's fragments into segments, sorted by the
cluster key, so the outputs form one sorted run at level 0 and lower its depth instead of fighting
reclustering; **major** combines undersized segments and rewrites files whose deletion vectors hide more
than duplicate-ratio of their rows (the merge applies the vectors: only live rows are written); **full** rewrites a
whole partition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from recluster.core.blocks import LEVEL_APPENDED, LEVEL_CONSTANT, Block, Partition
from recluster.core.scheduling import OPTIMIZING_TYPES, ProcessType, TableHistory
from recluster.core.selection.plan import MergeTask, Reason, ReclusterPlan, SelectionBounds
from recluster.settings import SettingsError
from recluster.settings_optimizing import SelfOptimizingSettings


@dataclass(frozen=True, slots=True)
class OptimizingConfig:
    """One table's self-optimizing settings: the defaults, overridden by its `self-optimizing.*` properties."""

    enabled: bool
    recluster_enabled: bool
    group: str
    quota: float
    target_size: int
    fragment_ratio: float
    min_target_size_ratio: float
    minor_trigger_file_count: int
    minor_trigger_interval_ms: int
    major_trigger_duplicate_ratio: float
    major_trigger_undersized_count: int
    full_trigger_interval_ms: int
    target_lag_seconds: float | None = None
    """The time-to-clustered target (core/target_lag.py); None: no target."""

    @property
    def fragment_bytes(self) -> float:
        """Files below this size are fragments."""
        return self.target_size / self.fragment_ratio

    @property
    def undersized_bytes(self) -> float:
        """Segments below this size are undersized."""
        return self.target_size * self.min_target_size_ratio


RECLUSTER_ENABLED_PROPERTY = "recluster.enabled"
PROPERTY_NAMES: Mapping[str, str] = {
    "enabled": "self-optimizing.enabled",
    "recluster_enabled": RECLUSTER_ENABLED_PROPERTY,
    "group": "self-optimizing.group",
    "quota": "self-optimizing.quota",
    "target_size": "self-optimizing.target-size",
    "fragment_ratio": "self-optimizing.fragment-ratio",
    "min_target_size_ratio": "self-optimizing.min-target-size-ratio",
    "minor_trigger_file_count": "self-optimizing.minor.trigger.file-count",
    "minor_trigger_interval_ms": "self-optimizing.minor.trigger.interval",
    "major_trigger_duplicate_ratio": "self-optimizing.major.trigger.duplicate-ratio",
    "major_trigger_undersized_count": "self-optimizing.major.trigger.undersized-count",
    "full_trigger_interval_ms": "self-optimizing.full.trigger.interval",
    "target_lag_seconds": "self-optimizing.target-lag-seconds",
}
"""Table property of each config field (Amoro's names; intervals in milliseconds)."""

_POSITIVE = {"quota", "target_size", "min_target_size_ratio", "major_trigger_duplicate_ratio", "target_lag_seconds"}
_OPTIONAL_FLOAT = {"target_lag_seconds"}
"""Fields whose default may be None: their property is a number of seconds, or `none` to turn the default off."""


def _parse_property(name: str, kind: type, text: str) -> Any:
    value: Any
    if kind is bool:
        if text.strip().lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return text.strip().lower() == "true"
    if name in _OPTIONAL_FLOAT and text.strip().lower() == "none":
        return None
    value = kind(text.strip())
    if kind is float and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if name in _POSITIVE and value <= 0:
        raise ValueError("must be greater than 0")
    if name == "fragment_ratio" and value <= 1:
        raise ValueError("must be greater than 1")
    if name in ("minor_trigger_file_count", "major_trigger_undersized_count") and value < 2:
        raise ValueError("must be at least 2")
    return value


def optimizing_config(properties: Mapping[str, str], defaults: SelfOptimizingSettings) -> OptimizingConfig:
    """The table's config; a malformed property is a SettingsError naming the property and its value."""
    values: dict[str, Any] = {"recluster_enabled": True}
    for spec in fields(OptimizingConfig):
        values.setdefault(spec.name, getattr(defaults, spec.name, None))
        prop = PROPERTY_NAMES[spec.name]
        if prop not in properties:
            continue
        kind = float if spec.name in _OPTIONAL_FLOAT else type(values[spec.name])
        try:
            values[spec.name] = _parse_property(spec.name, kind, properties[prop])
        except ValueError as error:
            reason = str(error) if kind is bool or "must" in str(error) else f"expected {kind.__name__}"
            raise SettingsError(f"invalid table property {prop}={properties[prop]!r}: {reason}") from None
    if values["group"] not in defaults.groups:
        raise SettingsError(
            f"table property {PROPERTY_NAMES['group']}={values['group']!r} names no optimizer group "
            f"(configured: {', '.join(sorted(defaults.groups))})"
        )
    return OptimizingConfig(**values)


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """File-size and deleted-row pressure of one partition."""

    partition: Partition
    files: int
    bytes: int
    fragments: int
    undersized: int
    deletion_vector_files: int
    deleted_rows: int = 0
    rows: int = 0
    heavy_deletion_files: int = 0
    """Files whose deletion vectors hide more than major.trigger.duplicate-ratio of their rows."""
    oldest_fragment_ms: int = 0
    """When the oldest fragment was written (0: unknown): minor's interval counts from it on a table never
    minor-optimized."""

    @property
    def segments(self) -> int:
        return self.files - self.fragments


@dataclass(frozen=True, slots=True)
class TableHealth:
    partitions: tuple[PartitionHealth, ...]

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)

    @property
    def fragments(self) -> int:
        return sum(p.fragments for p in self.partitions)

    @property
    def undersized(self) -> int:
        return sum(p.undersized for p in self.partitions)

    @property
    def deletion_vector_files(self) -> int:
        return sum(p.deletion_vector_files for p in self.partitions)

    @property
    def small_file_pressure(self) -> float:
        """Share of files that are fragments minor could combine (0 healthy; one small file alone in its
        partition is no pressure: there is nothing to combine it with)."""
        extra = sum(max(p.fragments - 1, 0) for p in self.partitions)
        return extra / self.files if self.files else 0.0

    @property
    def deleted_row_pressure(self) -> float:
        """Share of the rows in data files that deletion vectors hide."""
        rows = sum(p.rows for p in self.partitions)
        return sum(p.deleted_rows for p in self.partitions) / rows if rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "fragments": self.fragments,
            "segments": self.files - self.fragments,
            "undersized_segments": self.undersized,
            "deletion_vector_files": self.deletion_vector_files,
            "heavy_deletion_files": sum(p.heavy_deletion_files for p in self.partitions),
            "small_file_pressure": round(self.small_file_pressure, 4),
            "deleted_row_pressure": round(self.deleted_row_pressure, 4),
        }


def _by_partition(blocks: Iterable[Block]) -> list[tuple[Partition, list[Block]]]:
    """Blocks grouped by partition, partitions in a stable order (NULL partition values first)."""
    groups: dict[Partition, list[Block]] = {}
    for block in blocks:
        groups.setdefault(block.partition, []).append(block)
    return sorted(groups.items(), key=lambda item: [(name, value is not None, value or "") for name, value in item[0]])


def _is_fragment(block: Block, config: OptimizingConfig) -> bool:
    return block.level == LEVEL_APPENDED and block.bytes < config.fragment_bytes


def _is_undersized(block: Block, config: OptimizingConfig) -> bool:
    return block.level == LEVEL_APPENDED and config.fragment_bytes <= block.bytes < config.undersized_bytes


def _has_heavy_deletes(block: Block, config: OptimizingConfig) -> bool:
    """Deletion vectors hide more than major.trigger.duplicate-ratio of the file's rows: major purges them."""
    return block.deleted_rows > block.rows * config.major_trigger_duplicate_ratio


def table_health(blocks: Iterable[Block], config: OptimizingConfig) -> TableHealth:
    return TableHealth(
        tuple(
            PartitionHealth(
                partition,
                len(group),
                sum(b.bytes for b in group),
                sum(_is_fragment(b, config) for b in group),
                sum(_is_undersized(b, config) for b in group),
                sum(b.has_deletion_vector for b in group),
                sum(b.deleted_rows for b in group),
                sum(b.rows for b in group),
                sum(_has_heavy_deletes(b, config) for b in group),
                min((b.modified_ms for b in group if _is_fragment(b, config)), default=0),
            )
            for partition, group in _by_partition(blocks)
        )
    )


@dataclass(frozen=True, slots=True)
class PendingWork:
    """The optimizing a table needs now and why (None: nothing is due)."""

    type: ProcessType | None
    reason: str


def interval_due_times(
    health: TableHealth, config: OptimizingConfig, history: TableHistory
) -> dict[ProcessType, float]:
    """When the interval triggers of full and minor optimizing fall due for this layout (epoch seconds); a
    trigger that is off or has nothing to do is absent. The one place these two rules live."""
    due: dict[ProcessType, float] = {}
    if config.full_trigger_interval_ms >= 0 and health.files > 1:
        due[ProcessType.FULL] = history.last.get(ProcessType.FULL, 0.0) + config.full_trigger_interval_ms / 1000
    with_fragments = [p for p in health.partitions if p.fragments >= 2]
    if config.minor_trigger_interval_ms >= 0 and with_fragments:
        # Never minor-optimized: the interval counts from the oldest fragment, not from 1970 (a new table's second
        # append would trigger a minor at once: docs/operations.md#self-optimizing).
        oldest = min(p.oldest_fragment_ms for p in with_fragments) / 1000
        due[ProcessType.MINOR] = history.last.get(ProcessType.MINOR, oldest) + config.minor_trigger_interval_ms / 1000
    return due


def quiet_until(health: TableHealth, config: OptimizingConfig, history: TableHistory) -> float:
    """Until when a table that `pending_optimizing` found healthy stays so without a new commit: its next interval
    trigger, or forever. The streaming job leaves it untouched until then (idle tables cost nothing per trigger)."""
    return min(interval_due_times(health, config, history).values(), default=math.inf) if config.enabled else math.inf


def pending_optimizing(
    health: TableHealth, config: OptimizingConfig, history: TableHistory, *, now: float
) -> PendingWork:
    """Amoro's triggers: full on its interval (off by default), major on undersized segments, minor on
    enough fragments or its interval since the last minor."""
    if not config.enabled:
        return PendingWork(None, "disabled")
    intervals = interval_due_times(health, config, history)
    if now >= intervals.get(ProcessType.FULL, math.inf):
        return PendingWork(ProcessType.FULL, "full_interval")
    if any(p.undersized >= config.major_trigger_undersized_count for p in health.partitions):
        return PendingWork(ProcessType.MAJOR, "undersized_segments")
    if any(p.heavy_deletion_files for p in health.partitions):
        return PendingWork(ProcessType.MAJOR, "deleted_rows")
    if any(p.fragments >= config.minor_trigger_file_count for p in health.partitions):
        return PendingWork(ProcessType.MINOR, "fragment_count")
    if now >= intervals.get(ProcessType.MINOR, math.inf):
        return PendingWork(ProcessType.MINOR, "minor_interval")
    return PendingWork(None, "healthy")


def _sort_key(block: Block) -> tuple[bool, bytes, str]:
    return (block.clustered, block.min_key or b"", block.path)


def _chunked_tasks(
    partition: Partition, files: Sequence[Block], reason: Reason, bounds: SelectionBounds, target_size: int
) -> list[MergeTask]:
    """Tasks of at most the byte and file bounds over `files` in key order. A chunk is kept only when its
    outputs (cut at target_size) are fewer than its inputs, or it purges deleted rows: every process then lowers
    the file count or the deleted rows, so compaction can never loop on files that compress below the target."""
    tasks: list[MergeTask] = []
    chunk: list[Block] = []

    def close() -> None:
        fewer = len(chunk) >= 2 and math.ceil(sum(b.bytes for b in chunk) / target_size) < len(chunk)
        if fewer or any(b.deleted_rows for b in chunk):
            level = max(0, max(b.level for b in chunk))
            tasks.append(MergeTask(partition, level, level, tuple(chunk), reason, 0))

    for block in sorted(files, key=_sort_key):
        if chunk and (
            sum(b.bytes for b in chunk) + block.bytes > bounds.max_task_bytes or len(chunk) >= bounds.max_task_files
        ):
            close()
            chunk = []
        chunk.append(block)
    close()
    return tasks


def plan_optimizing(
    table: str,
    version: int,
    blocks: Sequence[Block],
    config: OptimizingConfig,
    kind: ProcessType,
    bounds: SelectionBounds,
) -> ReclusterPlan:
    """The merge tasks of one optimizing process, per partition, bounded like every merge.

    Outputs keep the highest input level (clamped at 0), so compacted data never moves down a level.
    """
    if kind not in OPTIMIZING_TYPES:
        raise ValueError(f"{kind} is not an optimizing type")
    reason = {ProcessType.MINOR: Reason.MINOR, ProcessType.MAJOR: Reason.MAJOR, ProcessType.FULL: Reason.FULL}[kind]
    tasks: list[MergeTask] = []
    for partition, group in _by_partition(blocks):
        usable = [b for b in group if b.level != LEVEL_CONSTANT]
        if kind is ProcessType.MINOR:
            chosen = [b for b in usable if _is_fragment(b, config)]
        elif kind is ProcessType.MAJOR:
            heavy = [b for b in group if _has_heavy_deletes(b, config)]
            chosen = [*heavy, *(b for b in usable if _is_undersized(b, config) and b not in heavy)]
        else:
            chosen = [*usable, *(b for b in group if b.level == LEVEL_CONSTANT and b.deleted_rows)]
        tasks.extend(_chunked_tasks(partition, chosen, reason, bounds, config.target_size))
    return ReclusterPlan(table, version, kind is ProcessType.FULL, tuple(tasks[: bounds.max_tasks]))
