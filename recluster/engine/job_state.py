"""What the streaming job keeps per table between micro-batches, and the status it reports."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from recluster.core.benefit import PauseReason
from recluster.core.discovery import EffectiveProperty
from recluster.core.keys import ClusterKey
from recluster.core.metrics import ClusteringState
from recluster.core.outcomes import OutcomeTotals
from recluster.core.selection.plan import Policy
from recluster.core.target_lag import LagSummary, LagTracker
from recluster.delta.log_state import SnapshotLog
from recluster.delta.snapshot import TableSnapshot

if TYPE_CHECKING:
    from recluster.engine.job_benefit import TableBenefit

log = logging.getLogger("recluster.job")


@dataclass(frozen=True, slots=True)
class LevelStatus:
    level: int
    blocks: int
    average_depth: float
    threshold: float


@dataclass(frozen=True, slots=True)
class TableStatus:
    """What the job has done for one table: shown by `demo`, logged once per micro-batch.

    tasks, conflicts, failures and bytes are totals since the job started; depth and levels are the state
    at `version` (a batch's own merges show up in the next batch, when their commit comes back).
    """

    table: str
    version: int
    levels: tuple[LevelStatus, ...]
    average_depth: float
    tasks: int = 0
    conflicts: int = 0
    failures: int = 0
    bytes_written: int = 0
    bytes_appended: int = 0
    pending: bool = False
    error: str | None = None
    error_kind: str | None = None
    """The kind of `error` (recluster.core.errors.ErrorKind: table, data, storage, unknown)."""
    policy: str = Policy.LEVELS
    """The selection policy serving the table (settings, or its `recluster.policy` property)."""
    settings: tuple[EffectiveProperty, ...] = ()
    """Its effective `recluster.*` properties and where each came from (docs/discovery.md#inherited-settings)."""
    lag: LagSummary | None = None
    """Its time-to-clustered figures against its target_lag (core/target_lag.py)."""
    benefit: TableBenefit | None = None
    """What the logged queries skipped on it against the bytes rewritten (docs/benefit.md); None without logs."""

    def __str__(self) -> str:
        levels = " ".join(f"L{s.level}={s.blocks}/{s.average_depth:.2f}/{s.threshold:.1f}" for s in self.levels)
        text = (
            f"recluster table={self.table} version={self.version} policy={self.policy} depth={self.average_depth:.3f} "
            f"levels[blocks/avg/threshold]=({levels}) tasks={self.tasks} conflicts={self.conflicts} "
            f"written={self.bytes_written} appended={self.bytes_appended} pending={self.pending}"
        )
        text += f" lag=({self.lag})" if self.lag else ""
        text += f" benefit=({self.benefit})" if self.benefit else ""
        return text + (f" error_kind={self.error_kind} error={self.error!r}" if self.error else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready status, as served by the job's /status endpoint."""
        return {
            "table": self.table,
            "version": self.version,
            "policy": self.policy,
            "average_depth": self.average_depth,
            "levels": [
                {"level": s.level, "blocks": s.blocks, "average_depth": s.average_depth, "threshold": s.threshold}
                for s in self.levels
            ],
            "totals": {
                "merges": self.tasks,
                "conflicts": self.conflicts,
                "failures": self.failures,
                "bytes_written": self.bytes_written,
                "bytes_appended": self.bytes_appended,
            },
            "pending": self.pending,
            "error": self.error,
            "error_kind": self.error_kind,
            "settings": [{"key": p.key, "value": p.value, "origin": p.origin} for p in self.settings],
            "lag": self.lag.to_dict() if self.lag else None,
            "benefit": self.benefit.to_dict() if self.benefit else None,
        }


@dataclass
class TrackedTable:
    """The job's view of one table: key, layout and the incremental clustering state at `version`."""

    uri: str
    key: ClusterKey
    partition_columns: tuple[str, ...]
    properties: dict[str, str]
    state: ClusteringState
    version: int
    data_schema: pa.Schema
    storage_options: dict[str, str] = field(repr=False)
    pending: bool = False
    awaiting_version: int = -1
    """The last version our own rewrites committed: no new plan until the state has caught up with it."""
    totals: OutcomeTotals = field(default_factory=OutcomeTotals)
    """What our commits did since the job started (kept on reload)."""
    bytes_appended: int = 0
    """Bytes other writers appended since the job started (kept on reload)."""
    quiet_until: float = 0.0
    """Epoch seconds until which the table, healthy when last scheduled, needs no look without a new commit."""
    log: SnapshotLog | None = field(default=None, repr=False)
    """The log at `version`, kept current from the commits the job applies: replayed at most once per version
    (docs/architecture.md#the-log-state)."""
    settings: tuple[EffectiveProperty, ...] = ()
    """Its effective `recluster.*` properties and where each came from (its own, or inherited: docs/discovery.md)."""
    lag: LagTracker = field(default_factory=LagTracker)
    """Its foreign data commits not clustered yet and its last lags (kept on reload)."""
    benefit: TableBenefit | None = None
    """Its benefit as the job last counted it (engine/job_benefit.py; kept on reload): its pause stops reclustering."""

    @property
    def paused(self) -> PauseReason | None:
        """Why reclustering is paused (no query read it in `benefit.pause_after_days`), None when it is not."""
        return self.benefit.paused if self.benefit else None

    def snapshot(self) -> TableSnapshot:
        return TableSnapshot(
            self.uri,
            self.version,
            self.key,
            self.partition_columns,
            tuple(self.state.blocks),
            self.properties,
            self.data_schema,
            self.storage_options,
            self.log,
        )
