"""The estimate in the table's units (docs/commands.md#recluster-estimate): model runs scaled back to rows, bytes,
files, days and seconds.

Bytes are rows x the bytes per row the table's appends have (x the bytes a merge writes per byte it reads);
compute seconds are the merges' fixed seconds plus the bytes rewritten over the merge speed; per-day figures are
the newer half of the modelled appends at the history's pace; storage churn is the bytes removed per day kept until
vacuum (the table's `delta.deletedFileRetentionDuration`, 7 days by default).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recluster.core.estimate.project import ModelRun, ModelScale, Strategy
from recluster.core.estimate.shape import HistoryShape

MB = 1_000_000


@dataclass(frozen=True, slots=True)
class Calibration:
    """The merge kernel on a copy of the table's newest files: its speed, its fixed seconds per merge, and the
    bytes it writes per byte it reads (sorted rows in bigger files compress differently from appends)."""

    mb_per_second: float
    fixed_seconds: float
    """Seconds of a merge besides its bytes (reading footers, writing and closing files)."""
    written_per_read: float
    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True, slots=True)
class InitialCost:
    """What a first FINAL rewrites and how long it takes. Its first round is the product's FINAL plan on the
    table's files; its rounds and the bytes of all of them come from the same FINAL on the model (the first
    round's bytes x the model's rows rewritten / its first round's). Seconds: two snapshot loads (timed as estimate
    loads it), per merge the fixed seconds, the bytes at the merge speed (commits are not counted)."""

    files: int
    """Files the first round rewrites (and `rows`, `first_round_bytes`, `files_written`: its rows, bytes, outputs)."""
    rows: int
    first_round_bytes: int
    files_written: int
    rounds: int
    bytes: int
    """Bytes all rounds rewrite."""
    seconds: float


@dataclass(frozen=True, slots=True)
class PerDay:
    """The steady state: per day at the history's pace of appends."""

    appends: float
    bytes_rewritten: float
    merges: float
    compute_seconds: float
    files_added: float
    files_removed: float
    storage_churn_bytes: float
    """Bytes of removed files still stored until vacuum deletes them (bytes removed per day x retention days)."""


@dataclass(frozen=True, slots=True)
class StrategyEstimate:
    """One way of maintaining the table over a history like the one learned from."""

    name: str
    description: str
    bytes_rewritten: int
    """Bytes the merges write over the modelled history."""
    write_amplification: float
    """Rows rewritten / rows appended over the modelled history."""
    merges: int
    time_averaged_depth: float
    files: int
    files_read_per_predicate: Mapping[str, float]
    """Per key column: files a point predicate reads after stats pruning, at the end (a key of more than two
    columns: its first only, see `recluster/core/estimate/project.py`)."""
    per_day: PerDay


@dataclass(frozen=True, slots=True)
class ProjectedCost:
    """What the job keeps of an estimate when it takes a table up, to set against what happens since."""

    version: int
    at: float
    """Epoch seconds."""
    policy: str
    written_per_appended: float
    """Bytes the policy rewrites per byte appended, over the modelled history."""
    time_averaged_depth: float
    bytes_rewritten_per_day: float
    merges_per_day: float

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ProjectedCost:
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class EstimateVsActual:
    """A table's projection next to what happened since (from the log: bytes appended, bytes recluster wrote,
    its merges; the depth now)."""

    projected: ProjectedCost
    days: float
    bytes_appended: int
    bytes_rewritten: int
    merges: int
    average_depth: float

    @property
    def written_per_appended(self) -> float | None:
        return self.bytes_rewritten / self.bytes_appended if self.bytes_appended else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "projected": dataclasses.asdict(self.projected),
            "actual": {
                "days": self.days,
                "bytes_appended": self.bytes_appended,
                "bytes_rewritten": self.bytes_rewritten,
                "merges": self.merges,
                "written_per_appended": self.written_per_appended,
                "average_depth": self.average_depth,
            },
        }


@dataclass(frozen=True, slots=True)
class TableEstimate:
    """`recluster estimate`'s answer for one table."""

    table: str
    version: int
    key: tuple[str, ...]
    policy: str
    shape: HistoryShape
    scale: ModelScale
    merge_mb_per_second: float
    calibration: Calibration | None
    """None: the merge speed was given."""
    retention_days: float
    initial: InitialCost
    strategies: tuple[StrategyEstimate, ...]
    notes: tuple[str, ...]
    seconds: float = 0.0

    @property
    def configured(self) -> StrategyEstimate:
        """The configured policy's estimate (the first one)."""
        return self.strategies[0]

    def projected(self, at: float) -> ProjectedCost:
        ours = self.configured
        return ProjectedCost(
            version=self.version,
            at=at,
            policy=self.policy,
            written_per_appended=ours.bytes_rewritten / max(self.shape.bytes, 1),
            time_averaged_depth=ours.time_averaged_depth,
            bytes_rewritten_per_day=ours.per_day.bytes_rewritten,
            merges_per_day=ours.per_day.merges,
        )

    def to_dict(self) -> dict[str, Any]:
        shape = dataclasses.asdict(self.shape)
        shape.update(
            kind=str(self.shape.kind),
            rows_per_append=self.shape.rows_per_append,
            bytes_per_row=self.shape.bytes_per_row,
            appends_per_day=self.shape.appends_per_day,
        )
        return {
            "table": self.table,
            "version": self.version,
            "key": list(self.key),
            "policy": self.policy,
            "history": shape,
            "model": {**dataclasses.asdict(self.scale), "sampled": self.scale.sampled},
            "merge_mb_per_second": self.merge_mb_per_second,
            "calibration": None if self.calibration is None else dataclasses.asdict(self.calibration),
            "retention_days": self.retention_days,
            "initial": dataclasses.asdict(self.initial),
            "strategies": {s.name: _strategy_dict(s) for s in self.strategies},
            "notes": list(self.notes),
            "seconds": self.seconds,
        }


def _strategy_dict(estimate: StrategyEstimate) -> dict[str, Any]:
    data = dataclasses.asdict(estimate)
    data.pop("name")
    data["files_read_per_predicate"] = dict(estimate.files_read_per_predicate)
    return data


def strategy_name(strategy: Strategy, policy: str, every: int) -> tuple[str, str]:
    """(name, description) of a strategy as the output shows it."""
    return {
        Strategy.POLICY: (policy, f"recluster, policy {policy}, after every append"),
        Strategy.NONE: ("none", "no clustering"),
        Strategy.COMPACT: (f"compact_every_{every}", f"delta-rs optimize.compact every {every} appends"),
        Strategy.FULL_SORT: (
            f"full_sort_every_{every}",
            f"a full sort (recluster FINAL, OPTIMIZE ZORDER) every {every} appends",
        ),
    }[strategy]


def scaled(
    run: ModelRun,
    *,
    shape: HistoryShape,
    scale: ModelScale,
    key: Sequence[str],
    policy: str,
    every: int,
    mb_per_second: float,
    fixed_seconds: float,
    written_per_read: float,
    retention_days: float,
) -> StrategyEstimate:
    """A model run in the table's units: bytes rewritten are the bytes written (rows at the appends' bytes per
    row, times the calibration's bytes written per byte read)."""
    bytes_per_model_row = shape.bytes_per_row * scale.rows_scale * written_per_read
    per_append = scale.commits_per_append
    days_per_append = per_append / shape.appends_per_day
    steady_days = max(run.steady_appends * days_per_append, 1e-12)
    rewritten_per_day = run.steady_rows_rewritten * bytes_per_model_row / steady_days
    name, description = strategy_name(run.strategy, policy, every)
    return StrategyEstimate(
        name=name,
        description=description,
        bytes_rewritten=round(run.rows_rewritten * bytes_per_model_row),
        write_amplification=run.rows_rewritten / max(run.rows_appended, 1),
        merges=run.merges,
        time_averaged_depth=run.time_averaged_depth,
        files=run.final_files,
        files_read_per_predicate=dict(zip(key, run.files_read, strict=False)),
        per_day=PerDay(
            appends=shape.appends_per_day,
            bytes_rewritten=rewritten_per_day,
            merges=run.steady_merges / steady_days,
            compute_seconds=run.steady_merges / steady_days * fixed_seconds + rewritten_per_day / (mb_per_second * MB),
            files_added=run.steady_files_added / steady_days,
            files_removed=run.steady_files_removed / steady_days,
            storage_churn_bytes=rewritten_per_day * retention_days,
        ),
    )
