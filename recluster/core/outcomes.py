"""What commits did, as values: the status of one task's commit and the totals of many. Pure.

One definition of the counters for every report: `run --json`, `optimize --json`, the metrics record's actions and
the job's status.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from recluster.core.blocks import WrittenFile
from recluster.core.selection.plan import MergeTask


class CommitStatus(StrEnum):
    COMMITTED = "committed"
    CONFLICT = "conflict"
    """A concurrent delete/update touched an input: outputs deleted, the next round re-plans."""
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    task: MergeTask
    status: CommitStatus
    version: int | None
    written: tuple[WrittenFile, ...]
    reason: str = ""

    def __str__(self) -> str:
        version = f" version={self.version}" if self.version is not None else ""
        reason = f" reason={self.reason}" if self.reason else ""
        files = f"files_in={len(self.task.files)} files_out={len(self.written)}"
        return f"commit status={self.status}{version} {files}{reason}"


@dataclass(frozen=True, slots=True)
class OutcomeTotals:
    """What a set of commit outcomes did."""

    tasks: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    rows_rewritten: int = 0
    conflicts: int = 0
    failures: int = 0

    def plus(self, outcome: CommitOutcome) -> OutcomeTotals:
        if outcome.status is CommitStatus.COMMITTED:
            return OutcomeTotals(
                self.tasks + 1,
                self.files_removed + len(outcome.task.files),
                self.files_added + len(outcome.written),
                self.bytes_read + outcome.task.bytes,
                self.bytes_written + sum(f.bytes for f in outcome.written),
                self.rows_rewritten + outcome.task.rows,
                self.conflicts,
                self.failures,
            )
        if outcome.status is CommitStatus.CONFLICT:
            return OutcomeTotals(**{**self.to_dict(), "conflicts": self.conflicts + 1})
        return OutcomeTotals(**{**self.to_dict(), "failures": self.failures + 1})

    def __add__(self, other: OutcomeTotals) -> OutcomeTotals:
        return OutcomeTotals(**{name: value + getattr(other, name) for name, value in self.to_dict().items()})

    @classmethod
    def of(cls, outcomes: list[CommitOutcome] | tuple[CommitOutcome, ...]) -> OutcomeTotals:
        totals = cls()
        for outcome in outcomes:
            totals = totals.plus(outcome)
        return totals

    def to_dict(self) -> dict[str, int]:
        return asdict(self)
