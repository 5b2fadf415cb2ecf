"""What readers see of the running job (recluster/engine/job_status.py) and where the job plans
(recluster/engine/planning.py): immutable views replaced whole, and one plan per process, made after the range
bounds are current and cut to the batch budget."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.status_json import StatusJson
from recluster.core.optimizing import optimizing_config
from recluster.core.scheduling import ProcessType
from recluster.delta.log import read_commits
from recluster.delta.log_writer import set_table_properties
from recluster.delta.replay import replays
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_schedule import loader_of
from recluster.engine.job_state import LevelStatus, TableStatus
from recluster.engine.job_status import StatusBoard, follow_statuses
from recluster.engine.job_tables import JobTables
from recluster.engine.planning import plan_process, recluster_plan
from recluster.settings import CLUSTER_BY_PROPERTY, POLICY_PROPERTY, Settings, TableSettings
from recluster.settings_job import StreamSettings
from tests.helpers import row_multiset


def status(table: str, version: int, tasks: int = 0) -> TableStatus:
    return TableStatus(table, version, (LevelStatus(0, 3, 2.0, 1.0),), 2.0, tasks=tasks)


def test_a_view_is_replaced_whole_and_never_changes_under_a_reader() -> None:
    board = StatusBoard()
    board.publish([status("a", 1), status("b", 1)])
    before = board.view
    after = board.publish([status("a", 2)])
    assert before.statuses["a"].version == 1 and after.statuses["a"].version == 2  # the old view is unchanged
    assert after.statuses["b"] is before.statuses["b"] and after.sequence == before.sequence + 1
    with pytest.raises(TypeError):
        after.statuses["c"] = status("c", 1)  # type: ignore[index]
    dropped = board.publish(dropped=["a"])
    assert "a" in dropped.statuses and "a" not in dropped.snapshots


def test_status_json_serializes_only_the_tables_whose_status_changed() -> None:
    """The /status body is the envelope and every table's status, sorted, on one compact line; a table's JSON is
    kept while its status object is the same, and a replaced or dropped status is never served stale."""
    calls: list[str] = []

    class Counted(TableStatus):
        __slots__ = ()

        def to_dict(self) -> dict[str, object]:
            calls.append(self.table)
            return super().to_dict()

    def counted(table: str, version: int) -> TableStatus:
        return Counted(table, version, (LevelStatus(0, 3, 2.0, 1.0),), 2.0)

    cache = StatusJson()
    a, b, c = counted("b", 1), counted("a", 1), counted("c", 1)
    first = cache.body({"healthy": True, "fleet": {}}, [a, b, c])
    assert first.endswith("}\n") and first.count("\n") == 1 and '": ' not in first
    decoded = json.loads(first)
    assert decoded["healthy"] is True and decoded["fleet"] == {}
    assert decoded["tables"] == [s.to_dict() for s in (b, a, c)]
    assert sorted(calls) == ["a", "a", "b", "b", "c", "c"]  # the three serialized once (the assert read them again)
    calls.clear()
    newer = counted("a", 2)
    second = json.loads(cache.body({"healthy": False}, [a, newer]))  # "a" replaced, "c" dropped
    assert calls == ["a"] and second["healthy"] is False
    assert [(t["table"], t["version"]) for t in second["tables"]] == [("a", 2), ("b", 1)]
    assert json.loads(cache.body({}, []))["tables"] == []


def test_readers_wait_for_news_and_followers_see_every_publication() -> None:
    board = StatusBoard()
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def record(published: TableStatus) -> None:
        seen.append((published.table, published.version))
        if published.version == 50:
            done.set()

    stop = follow_statuses(board, record)
    start = board.view.sequence
    writer = threading.Thread(target=lambda: [board.publish([status("t", v)]) for v in range(1, 51)])
    writer.start()
    assert board.wait_newer(start, 10).sequence > start
    writer.join()
    assert done.wait(10)
    stop.set()
    versions = [v for _, v in seen]
    assert versions == sorted(versions) and versions[-1] == 50  # in order, the last one always seen


def test_a_curve_keys_first_batch_plans_once_after_its_bounds_and_keeps_the_budget(tmp_path: Path) -> None:
    """The first merge of a curve key samples its range bounds; the plan that runs is made on them and cut to the
    batch budget (it used to be planned again after the bounds, without the budget)."""
    path = tmp_path / "t"
    rng = np.random.default_rng(3)
    for append in range(12):  # three partitions: three independent tasks
        days = pa.array(rng.integers(0, 3000, 2000).astype("datetime64[D]"), pa.date32())
        names = [f"s{v:07d}" for v in rng.integers(0, 10**6, 2000)]
        batch = pa.table({"p": [append % 3] * 2000, "b": names, "day": days})
        write_deltalake(str(path), batch, mode="append", partition_by=["p"])
    expected = row_multiset(DeltaTable(str(path)).to_pyarrow_table())
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "b,day"})
    settings = Settings(
        clustering={"target_rows": 1000},  # type: ignore[arg-type]
        stream=StreamSettings(checkpoint_location=str(tmp_path / "checkpoint"), max_tasks_per_batch=1),
        tables=[TableSettings(uri=str(path))],
    )
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    tracked = handler.tables.track(str(path), None)
    config = optimizing_config(tracked.properties, settings.self_optimizing)
    assert tracked.key.bounds is None  # no bounds yet: the first plan samples them
    planned = plan_process(
        ProcessType.RECLUSTER, tracked.snapshot(), loader_of(tracked), settings=settings, config=config, max_tasks=1
    )
    assert planned.snapshot.key.bounds is not None and planned.plan.read_version == planned.snapshot.version
    unbudgeted = recluster_plan(planned.snapshot, settings)
    assert len(unbudgeted.tasks) == 3 and planned.plan.tasks == unbudgeted.tasks[:1] and planned.work_left

    handler.tracked[str(path)] = tracked
    reports = handler.reports.run_scheduled({str(path): True})
    (report,) = reports
    handler.reports.publish(reports)
    assert report.status.tasks == 1 and report.status.pending  # one task ran, the rest is left for the next batch
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == expected
    assert handler.board.view.snapshots[str(path)].version == tracked.version


def test_the_job_replays_a_tables_log_at_most_once_per_version(tmp_path: Path) -> None:
    """The job keeps a table's log state current from the commits it applies: every batch at one version shares one
    replay, commits read from the log advance the state without one, rows of the Delta-log trigger (no actions)
    leave one replay for the new version."""
    path = tmp_path / "t"
    for seed in range(3):
        write_deltalake(str(path), pa.table({"k": np.random.default_rng(seed).integers(0, 1000, 100)}), mode="append")
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    uri = str(path)
    tables = JobTables(Settings(), [TableSettings(uri=uri)])
    tracked = tables.tracked[uri] = tables.track(uri, None)
    before = replays()
    for _ in range(3):  # three batches at the same version
        tracked.snapshot().log_state()
    assert replays() - before == 1

    write_deltalake(uri, pa.table({"k": [1, 2, 3]}), mode="append")
    read = list(read_commits(uri, tracked.version + 1, tracked.version + 1, {}))
    tables.apply(uri, read)
    state = tracked.snapshot().log_state()
    assert replays() - before == 1 and state.version == tracked.version == read[-1].version  # advanced, not replayed

    write_deltalake(uri, pa.table({"k": [4]}), mode="append")
    (row,) = read_commits(uri, tracked.version + 1, tracked.version + 1, {})
    tables.apply(uri, [dataclasses.replace(row, actions=())])  # as the Delta-log trigger's rows come
    for _ in range(2):
        tracked.snapshot().log_state()
    assert replays() - before == 2


def test_a_table_with_a_malformed_property_keeps_its_error_and_is_left_alone(tmp_path: Path) -> None:
    """A bad `recluster.policy` is shown with the table and no work runs on it; a batch with new commits does not hide
    the error behind a plain status."""
    path = tmp_path / "t"
    for seed in range(4):
        write_deltalake(str(path), pa.table({"k": np.random.default_rng(seed).integers(0, 1000, 100)}), mode="append")
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k", POLICY_PROPERTY: "no-such-policy"})
    uri = str(path)
    settings = Settings(
        stream=StreamSettings(checkpoint_location=str(tmp_path / "checkpoint")), tables=[TableSettings(uri=uri)]
    )
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    handler.tracked[uri] = handler.tables.track(uri, None)
    version = DeltaTable(uri).version()
    handler.reports.publish(handler.reports.run_scheduled({uri: True}))
    status = handler.status[uri]
    assert status.error is not None and "no-such-policy" in status.error and status.tasks == 0
    assert DeltaTable(uri).version() == version  # nothing was rewritten
