"""The Delta log as typed records: one `CommitEntry` per commit, read from the JSON commit files.

The engine checks commits with it before every rewrite, the job applies them to its state, and the streaming
sources in triggers/ emit them as rows (`CommitEntry.row`, in the column order of `SCHEMA`) and read them back
(`CommitEntry.from_row`): one definition of a commit for everyone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recluster.delta.storage import commit_file_exists, read_last_checkpoint, read_log_actions

LOG_GAP = "LOG_GAP"
"""Operation of the entry standing for commits cleaned from the log before they were read."""

PRODUCER = "recluster"
PRODUCER_KEY = "recluster.producer"
"""commitInfo key our rewrites carry: triggers and the job recognise (and skip) our own commits by it."""
TASK_ID_KEY = "recluster.taskId"
"""commitInfo key of a rewrite's task id: a retry finds its own earlier commit by it (idempotent commits)."""

SCHEMA = (
    "table string, version long, timestamp long, operation string, producer string, "
    "files_added int, files_removed int, bytes_added long, adds string, removes array<string>, "
    "metadata_changed boolean"
)
"""Spark schema of a commit row (the streaming sources' output)."""


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """One commit of one table: what it added (the raw add actions) and removed (paths as logged)."""

    table: str
    version: int
    timestamp: int | None
    operation: str
    producer: str | None
    adds: tuple[Mapping[str, Any], ...]
    removes: tuple[str, ...]
    metadata_changed: bool
    """It carried a metaData or protocol action (or its commits are gone: a gap)."""
    task_id: str | None = None
    """The task id of a rewrite of ours (commitInfo `recluster.taskId`); not carried in rows."""
    actions: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    """Every action as logged (read from the log only; not carried in rows): what advances a log state."""

    @property
    def is_gap(self) -> bool:
        return self.operation == LOG_GAP

    @property
    def bytes_added(self) -> int:
        return sum(int(add.get("size", 0)) for add in self.adds)

    @classmethod
    def gap(cls, table: str, version: int) -> CommitEntry:
        return cls(table, version, None, LOG_GAP, None, (), (), True)

    @classmethod
    def from_actions(cls, table: str, version: int, actions: Sequence[Mapping[str, Any]]) -> CommitEntry:
        info: Mapping[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        return cls(
            table=table,
            version=version,
            timestamp=info.get("timestamp"),
            operation=info.get("operation", "UNKNOWN"),
            producer=info.get(PRODUCER_KEY),
            adds=tuple(a["add"] for a in actions if "add" in a),
            removes=tuple(a["remove"]["path"] for a in actions if "remove" in a),
            metadata_changed=any("metaData" in a or "protocol" in a for a in actions),
            task_id=info.get(TASK_ID_KEY),
            actions=tuple(actions),
        )

    def row(self) -> tuple[Any, ...]:
        """The entry as a row of `SCHEMA`."""
        return (
            self.table,
            self.version,
            self.timestamp,
            self.operation,
            self.producer,
            len(self.adds),
            len(self.removes),
            self.bytes_added,
            json.dumps(list(self.adds)),
            list(self.removes),
            self.metadata_changed,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CommitEntry:
        """An entry back from a row of `SCHEMA` (a Spark Row's asDict())."""
        return cls(
            table=row["table"],
            version=int(row["version"]),
            timestamp=row["timestamp"],
            operation=row["operation"],
            producer=row["producer"],
            adds=tuple(json.loads(row["adds"] or "[]")),
            removes=tuple(row["removes"] or ()),
            metadata_changed=bool(row["metadata_changed"]),
        )


def read_commits(table: str, first: int, last: int, storage_options: Mapping[str, str] | None) -> Iterator[CommitEntry]:
    """The commits first..last of a table from its JSON log files; a gap entry for each one no longer there (any
    other storage error is raised: a 5xx answer or a reset says nothing about whether the file is there)."""
    for version in range(first, last + 1):
        try:
            actions = read_log_actions(table, version, storage_options)
        except FileNotFoundError:  # cleaned up behind a checkpoint; any other storage error is raised, never a gap
            yield CommitEntry.gap(table, version)
            continue
        yield CommitEntry.from_actions(table, version, actions)


def commits_after(table: str, after: int, storage_options: Mapping[str, str] | None) -> list[CommitEntry]:
    """The commits after version `after`, read by name one by one until the next is absent: what the writer of the
    next version must check, without listing the log or reopening the table. When the one right after `after` is
    absent but `_last_checkpoint` names a later version, the log was cleaned behind it: one gap entry for it; when
    `after` itself is gone from the log (the table deleted and created again at its path, with fewer versions), a
    gap entry for `after`: a commit planned on the old table must not become the new one's next version
    (docs/guarantees.md#a-table-recreated-under-the-job). A storage error reading either is raised: the next
    version may not be written on a guess."""
    entries: list[CommitEntry] = []
    while True:
        version = after + 1 + len(entries)
        try:
            actions = read_log_actions(table, version, storage_options)
        except FileNotFoundError:
            break
        entries.append(CommitEntry.from_actions(table, version, actions))
    if entries:
        return entries
    hint = read_last_checkpoint(table, storage_options)
    if hint is not None and hint[0] > after:
        return [CommitEntry.gap(table, after + 1)]
    if after >= 0 and not commit_file_exists(table, after, storage_options):
        return [CommitEntry.gap(table, after)]
    return entries
