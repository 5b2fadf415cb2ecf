"""Scenario 1: concurrent DML while a merge is between its write and its commit.

Every write (appends and the concurrent change) goes to the table and to a shadow table recluster never
touches; at the end both must hold the same rows. The change is injected deterministically: a wrapper around
`commit_task` applies it after the merge wrote its outputs and before the commit, in `recluster run` and in the
streaming job alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import recluster.engine.rounds
from jobs.autorecluster import start_job, stop_gracefully
from recluster.core.outcomes import CommitStatus
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, Settings, TableSettings
from recluster.settings_job import StreamSettings
from tests.helpers import row_multiset
from tests.reliability.checks import assert_intact, run_final, scaled

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SETTINGS = Settings(clustering=ClusteringSettings(target_rows=1_500, max_tasks_per_round=2))


class Mirrored:
    """A table and its shadow: every write goes to both; only the table is reclustered."""

    def __init__(self, root: Path, seed: int) -> None:
        self.path, self.shadow = root / "table", root / "shadow"
        self.rng = np.random.default_rng(seed)
        self.batches = 0

    def append(self, rows: int = 500, **extra: pa.Array) -> None:
        keys = self.rng.integers(0, 10**6, rows)
        data = pa.table(
            {
                "k": pa.array(keys, pa.int64()),
                "batch": pa.array([self.batches] * rows, pa.int32()),
                "s": pa.array([f"v{x % 13}" for x in keys.tolist()]),
                **extra,
            }
        )
        self.batches += 1
        for path in (self.path, self.shadow):
            create = not (path / "_delta_log").exists()
            write_deltalake(str(path), data, mode="append", schema_mode="merge")
            if create:
                set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})

    def both(self, change: Callable[[DeltaTable], object]) -> None:
        for path in (self.path, self.shadow):
            change(DeltaTable(str(path)))


def _merge_source(table: DeltaTable) -> pa.Table:
    """Rows of batch 0 with a changed payload (matched: updated) plus new keys (not matched: inserted)."""
    rows = table.to_pyarrow_table(filters=[("batch", "=", 0)]).sort_by("k").slice(0, 40)
    matched = rows.set_column(rows.schema.get_field_index("s"), "s", pa.array(["merged"] * rows.num_rows))
    new = pa.table(
        {
            "k": pa.array(range(2 * 10**6, 2 * 10**6 + 10), pa.int64()),
            "batch": pa.array([99] * 10, pa.int32()),
            "s": pa.array(["inserted"] * 10),
        }
    )
    return pa.concat_tables([matched.select(["k", "batch", "s"]), new])


def _merge(table: DeltaTable) -> None:
    source = _merge_source(table)
    (
        table.merge(source, predicate="t.k = s.k AND t.batch = s.batch", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def concurrent_changes(mirrored: Mirrored) -> dict[str, Callable[[], None]]:
    """The concurrent writes of the issue, each applied to the table and its shadow."""
    return {
        "delete": lambda: mirrored.both(lambda t: t.delete("batch = 1")),
        "update": lambda: mirrored.both(lambda t: t.update(updates={"s": "'updated'"}, predicate="batch = 2")),
        "merge": lambda: mirrored.both(_merge),
        "compaction": lambda: mirrored.both(lambda t: t.optimize.compact()),  # a rewrite with dataChange=false
        "append": lambda: mirrored.append(300),
        "new_column": lambda: mirrored.append(300, extra=pa.array([1.5] * 300)),
        "table_property": lambda: mirrored.both(
            lambda t: set_table_properties(t.table_uri, {"delta.dataSkippingNumIndexedCols": "2"})
        ),
    }


# What the commit of the merge the change raced must do: conflict when the change rewrote an input file.
CONFLICTS = {
    "delete": True,
    "update": True,
    "merge": True,
    "compaction": True,
    "append": False,
    "new_column": None,
    "table_property": None,
}


def inject_before_commit(monkeypatch: pytest.MonkeyPatch, changes: list[Callable[[], None]]) -> list[CommitStatus]:
    """Apply the next pending change between each merge's write and its commit; returns the commit outcomes."""
    real_commit = recluster.engine.rounds.commit_task
    lock = threading.Lock()
    statuses: list[CommitStatus] = []

    def commit_after_change(*args: object, **kwargs: object) -> object:
        with lock:
            change = changes.pop(0) if changes else None
            if change is not None:
                change()
            outcome = real_commit(*args, **kwargs)  # type: ignore[arg-type]
            if change is not None:
                statuses.append(outcome.status)
            return outcome

    monkeypatch.setattr(recluster.engine.rounds, "commit_task", commit_after_change)
    return statuses


@pytest.mark.parametrize("change", list(CONFLICTS))
def test_recluster_run_with_a_concurrent_change_between_merge_and_commit(tmp_path, spark, monkeypatch, change):
    mirrored = Mirrored(tmp_path, seed=len(change))
    for _ in range(4):
        mirrored.append()
    statuses = inject_before_commit(monkeypatch, [concurrent_changes(mirrored)[change]])

    result = run_final(mirrored.path, spark, SETTINGS)

    assert len(statuses) == 1, "the change was injected between a merge and its commit"
    if CONFLICTS[change] is not None:
        assert (statuses[0] is CommitStatus.CONFLICT) == CONFLICTS[change], statuses
    assert result.totals.failures == 0
    assert result.stop_reason == "within_threshold", result
    assert_intact(mirrored.path, row_multiset(DeltaTable(str(mirrored.shadow)).to_pyarrow_table()))


def test_streaming_job_with_every_concurrent_change_mid_merge(tmp_path, spark, monkeypatch):
    mirrored = Mirrored(tmp_path, seed=5)
    mirrored.append()
    changes = concurrent_changes(mirrored)
    pending = [changes[name] for name in CONFLICTS] * scaled(1, 5)
    statuses = inject_before_commit(monkeypatch, pending)
    settings = Settings(
        clustering=ClusteringSettings(target_rows=1_500),
        stream=StreamSettings(
            checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        tables=[TableSettings(uri=str(mirrored.path))],
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for _ in range(12 * scaled(1, 5)):
            if not pending:
                break
            mirrored.append()
            query.processAllAvailable()
        assert not pending, "every change was injected mid-merge"
        for _ in range(3):  # the job settles on the changed table
            mirrored.append()
            query.processAllAvailable()
    finally:
        stop_gracefully(query, handler)
    status = handler.status[str(mirrored.path)]
    assert status.error is None and status.failures == 0, status
    assert statuses.count(CommitStatus.CONFLICT) >= 4, statuses  # delete, update, merge, compaction hit the inputs
    assert_intact(mirrored.path, row_multiset(DeltaTable(str(mirrored.shadow)).to_pyarrow_table()))
