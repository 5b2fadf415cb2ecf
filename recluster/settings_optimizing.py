"""Settings of self-optimizing (docs/operations.md): the defaults of the `self-optimizing.*` table properties, the
optimizer groups, scheduled maintenance and the benefit accounting (docs/benefit.md). Sections of
`settings.Settings`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from recluster.settings_input import MIB, Section


class OptimizerGroup(Section):
    """A named share of the cluster for optimizing and reclustering (docs/operations.md): one Spark FAIR pool."""

    policy: Literal["quota", "balanced"] = "quota"
    """quota: the table with the lowest quota occupation first; balanced: the longest since last optimized first."""
    max_concurrent_tasks: int = Field(2, ge=1)
    """Merge tasks of this group running at once (a table's plan never runs more tasks in parallel)."""
    cores: int = Field(1, ge=1)
    """The pool's minShare and weight: the cores Spark's FAIR scheduler guarantees the group under load."""


class MaintenanceSettings(Section):
    """Expiry of old versions, log cleanup, checkpoints and orphan cleanup, per table on a schedule."""

    interval_seconds: float = Field(24 * 3600.0, ge=0)
    """How often the job maintains each table; 0 turns scheduled maintenance off."""
    first_within_seconds: float = Field(3600.0, ge=0)
    """A table with no maintenance in the history is first maintained within this long of the job taking it up, at
    a point fixed by its URI: a job that takes up thousands of tables does not maintain them all at once. 0: at
    once."""
    retention_hours: float = Field(168.0, ge=0)
    """Vacuum retention; never below the table's `delta.deletedFileRetentionDuration` (the larger wins)."""
    orphan_safety_age_seconds: float = Field(24 * 3600.0, ge=0)
    """Only files of ours older than this are orphan candidates (a running rewrite has young outputs)."""
    checkpoint_every_versions: int = Field(100, ge=1)
    """Write a checkpoint when the newest one is this many versions behind."""


class SelfOptimizingSettings(Section):
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
    target_lag_seconds: float | None = Field(None, gt=0)
    """Time-to-clustered target: seconds from a data commit until its rows sit in files that meet the depth target.
    The job measures the lag (p50, p95) and runs tables with a target earliest deadline first; None: no target."""
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


class BenefitSettings(Section):
    """What clustering saves the queries that read the tables (docs/benefit.md): the job reads Spark event logs on
    its tick and counts, per table, the files and bytes the logged scans skipped against the bytes it rewrote."""

    event_logs: list[str] = Field(default_factory=list)
    """Spark event logs to read, as `recluster advise` takes them: local paths or object-store prefixes (each a file
    or a directory of them, `spark.eventLog.dir`); empty: no logged figures and no pause, only the modelled figure
    of one query on each table's key."""
    read_interval_seconds: float = Field(300.0, gt=0)
    """How often the job looks for new or grown event log files (only those are read again) and counts the figures."""
    pause_after_days: float | None = Field(None, gt=0)
    """Stop reclustering and optimizing a table no logged query read in this many days (maintenance goes on; it
    resumes at the next query seen); None: never pause. Needs `event_logs`."""

    @field_validator("event_logs", mode="before")
    @classmethod
    def _split_locations(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [location.strip() for location in value.split(",") if location.strip()]
        return value

    @model_validator(mode="after")
    def _check(self) -> BenefitSettings:
        if self.pause_after_days is not None and not self.event_logs:
            raise ValueError("benefit.pause_after_days needs benefit.event_logs: without logs no query is ever seen")
        return self
