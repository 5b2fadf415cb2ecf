"""One replay of a table's log per snapshot version, shared by everything that needs the raw log at that version
(docs/architecture.md#the-log-state): the liquid clustering domain, the deletion vectors, the row ids of a merge's
inputs and the state a commit starts from."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence

from deltalake import DeltaTable

from recluster.delta.log import CommitEntry
from recluster.delta.replay import LogState, replay_log


class SnapshotLog:
    """The log of one version of a table, replayed on first use, once, whoever asks first (the threads of one
    round included); later versions advance its state (`LogState.advanced`)."""

    def __init__(
        self, uri: str, storage_options: Mapping[str, str] | None, version: int, state: LogState | None = None
    ) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self.version = version
        self._state = state
        self._lock = threading.Lock()

    def state(self) -> LogState:
        with self._lock:
            if self._state is None:
                self._state = replay_log(self.uri, self.storage_options, self.version)
            return self._state

    def advanced(self, commits: Sequence[CommitEntry]) -> SnapshotLog:
        """The log after `commits` (the versions after this one, in order): its state advanced with their actions
        when this one was replayed and every commit carries its actions (commits read from the log do; rows of the
        Delta-log trigger don't), else replayed on first use at the new version. Never two replays of one version."""
        if not commits:
            return self
        version = commits[-1].version
        replayed = self._state
        if replayed is None or any(not c.actions for c in commits):
            return SnapshotLog(self.uri, self.storage_options, version)
        return SnapshotLog(self.uri, self.storage_options, version, replayed.advanced(commits))

    def __repr__(self) -> str:
        return f"SnapshotLog(uri={self.uri!r}, version={self.version}, replayed={self._state is not None})"


_BY_TABLE: dict[int, SnapshotLog] = {}
"""id of an open DeltaTable -> the log of its version (dropped when the table object is)."""
_BY_TABLE_LOCK = threading.Lock()


def table_log(table: DeltaTable, location: str, storage_options: Mapping[str, str] | None) -> SnapshotLog:
    """The log of `table` at its current version, one per table object and version: resolving a liquid key and
    loading the snapshot of the same opened table share one replay."""
    version = table.version()
    with _BY_TABLE_LOCK:
        found = _BY_TABLE.get(id(table))
        if found is None or found.version != version or found.uri != location:
            if found is None:
                weakref.finalize(table, _BY_TABLE.pop, id(table), None)
            found = _BY_TABLE[id(table)] = SnapshotLog(location, storage_options, version)
        return found
