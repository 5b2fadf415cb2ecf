"""Scheduled maintenance in the streaming job (issue 23): it runs outside the lock micro-batches take, is spread
over ticks by a per-pass budget, and falls due for each table at its own jittered time. No Spark: the handler is
driven directly, maintenance replaced by a stand-in that records calls (and can be held)."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import pytest

import recluster.engine.handler as handler_module
import recluster.engine.job_maintenance as job_maintenance
import recluster.engine.job_schedule as job_schedule
from recluster.core.optimizing import PartitionHealth, TableHealth, optimizing_config, pending_optimizing, quiet_until
from recluster.core.scheduling import ProcessStatus, ProcessType, TableHistory
from recluster.delta.maintenance import maintain_table
from recluster.engine.job_maintenance import MAINTENANCE_JITTER, maintenance_jitter, uri_share
from recluster.settings_optimizing import SelfOptimizingSettings
from tests.helpers import handler_with_tables


def test_maintenance_never_holds_the_lock_micro_batches_need(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handler = handler_with_tables(tmp_path, 1)
    entered, release = threading.Event(), threading.Event()

    def held(uri: str, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60)
        return maintain_table(uri, *args, **kwargs)

    monkeypatch.setattr(job_maintenance, "maintain_table", held)
    tick = threading.Thread(target=handler.tick)
    tick.start()
    try:
        assert entered.wait(60), "the tick did not start the table's maintenance"
        assert handler.lock.acquire(blocking=False), "a micro-batch would wait for the maintenance"
        handler.lock.release()
        assert not handler.idle.is_set()  # a graceful stop still waits for the maintenance to end
    finally:
        release.set()
        tick.join(60)
    assert handler.idle.is_set()
    assert handler.history is not None
    done = [r for r in handler.history.records() if r.type is ProcessType.MAINTENANCE]
    assert [r.status for r in done] == [ProcessStatus.RUNNING, ProcessStatus.SUCCESS]


def test_a_pass_stops_at_its_budget_and_the_next_ticks_maintain_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = handler_with_tables(tmp_path, 5)
    maintained: list[str] = []
    clock = [0.0]

    def counted(uri: str, *args: Any, **kwargs: Any) -> Any:
        if uri in handler.tracked:  # (the job's own history table is maintained too, once per interval)
            maintained.append(uri)
            clock[0] += 2.0  # each maintenance "takes" two seconds of the pass's budget
        return maintain_table(uri, *args, **kwargs)

    monkeypatch.setattr(job_maintenance, "maintain_table", counted)
    monkeypatch.setattr(job_maintenance, "MAINTENANCE_PASS_SECONDS", 3.0)
    real_monotonic = handler_module.time.monotonic
    monkeypatch.setattr(handler_module.time, "monotonic", lambda: real_monotonic() + clock[0])
    passes = []
    while len(maintained) < 5 and len(passes) < 10:
        before = len(maintained)
        handler.last_tick = 0.0
        handler.tick()
        passes.append(len(maintained) - before)
    assert passes[0] == 2, passes  # started at 0 s and 2 s; the third would start past the 3 s budget
    assert sorted(maintained) == sorted(handler.tracked) and sum(passes) == 5  # each table once, none left
    assert handler.history is not None
    succeeded = [r.table for r in handler.history.records() if r.status is ProcessStatus.SUCCESS]
    assert sorted(succeeded) == sorted(handler.tracked)


def test_tables_never_maintained_are_first_maintained_spread_over_the_first_hour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job taking up many tables with no maintenance on record does not maintain them all at once: each at its
    own point (from its URI) within `first_within_seconds` of its take-up, then every interval."""
    at_once = handler_with_tables(tmp_path, 12)
    maintenance = at_once.settings.self_optimizing.maintenance.model_copy(update={"first_within_seconds": 3600.0})
    settings = at_once.settings.model_copy(
        update={"self_optimizing": at_once.settings.self_optimizing.model_copy(update={"maintenance": maintenance})}
    )
    handler = handler_module.ReclusterHandler(settings, settings.tables, spark=None)
    handler.tracked.update(at_once.tracked)
    maintained: list[str] = []

    def counted(uri: str, *args: Any, **kwargs: Any) -> Any:
        if uri in handler.tracked:
            maintained.append(uri)
        return maintain_table(uri, *args, **kwargs)

    monkeypatch.setattr(job_maintenance, "maintain_table", counted)
    start = job_maintenance.time.time()
    seen: list[list[str]] = []
    for offset in (0.0, 1800.0, 3600.0, 7200.0):
        monkeypatch.setattr(job_maintenance.time, "time", lambda offset=offset: start + offset)
        handler.maintenance.run_due(handler.tracked)
        seen.append(sorted(maintained))
    due = {offset: sorted(u for u in handler.tracked if uri_share(u) * 3600.0 <= offset) for offset in (1800, 3600)}
    assert seen == [[], due[1800], due[3600], due[3600]]  # each once, the last ones an hour after the take-up
    assert 0 < len(due[1800]) < len(handler.tracked) == len(due[3600])


def test_jitter_is_stable_per_table_and_spreads_tables_over_its_range() -> None:
    shares = [maintenance_jitter(f"s3://lake/table-{index}") for index in range(2_000)]
    assert shares == [maintenance_jitter(f"s3://lake/table-{index}") for index in range(2_000)]
    assert all(0 <= share < MAINTENANCE_JITTER for share in shares)
    assert min(shares) < 0.05 * MAINTENANCE_JITTER and max(shares) > 0.95 * MAINTENANCE_JITTER


def test_idle_tables_are_not_looked_at_until_a_commit_or_their_quiet_time_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event-driven scheduling: a pass evaluates only tables with new commits, work left over, or whose quiet time
    (their next interval trigger) has come; 10,000 idle tables then cost nothing per trigger."""
    handler = handler_with_tables(tmp_path, 3)
    looked: list[int] = []
    real_health = job_schedule.table_health

    def counted(blocks: Any, config: Any) -> Any:
        looked.append(1)
        return real_health(blocks, config)

    monkeypatch.setattr(job_schedule, "table_health", counted)
    handler.reports.run_scheduled({})
    assert len(looked) == 3  # the first pass looks at every table
    assert all(t.quiet_until == math.inf for t in handler.tracked.values())  # one file each: no trigger can fire
    looked.clear()
    for _ in range(5):
        handler.reports.run_scheduled({})
    assert looked == []  # idle: nothing evaluated
    first, second, _ = handler.tracked
    handler.reports.run_scheduled({first: True})  # a commit on one table: that table only
    assert len(looked) == 1
    looked.clear()
    now = handler_module.time.time()
    handler.tracked[second].quiet_until = now + 10
    monkeypatch.setattr(handler_module.time, "time", lambda: now + 11)
    handler.reports.run_scheduled({})  # the second table's quiet time is over: looked at again, the others not
    assert len(looked) == 1


def test_quiet_until_is_the_next_interval_trigger() -> None:
    """A healthy table stays so until minor's (or full's) interval since its last run: no sooner, no later."""
    config = optimizing_config({}, SelfOptimizingSettings())
    fragments = TableHealth(
        (PartitionHealth((), files=3, bytes=300, fragments=3, undersized=0, deletion_vector_files=0),)
    )
    single = TableHealth((PartitionHealth((), files=1, bytes=100, fragments=1, undersized=0, deletion_vector_files=0),))
    history = TableHistory(last={ProcessType.MINOR: 1_000.0})
    until = quiet_until(fragments, config, history)
    assert until == 1_000.0 + config.minor_trigger_interval_ms / 1000
    assert pending_optimizing(fragments, config, history, now=until - 1).type is None
    assert pending_optimizing(fragments, config, history, now=until).type is ProcessType.MINOR
    assert quiet_until(single, config, history) == math.inf  # one file: no interval trigger has work


def test_history_rows_are_written_by_the_tick_not_by_the_work_that_makes_them(tmp_path: Path) -> None:
    """The job's history store defers its writes: rows appended (from a micro-batch or the maintenance pass) are in
    the summaries at once and reach the history table only when a tick flushes them, in one commit; a failed flush
    keeps them."""
    from recluster.delta.history import read_rows

    handler = handler_with_tables(tmp_path, 2)
    history = handler.history
    assert history is not None and history.deferred
    before = read_rows(history.location, history.storage_options)
    count_before = 0 if before is None else before.num_rows
    with handler.lock:  # what a micro-batch holds: the rows its processes append stay in memory
        handler.tick()  # (a tick skips scheduling while the lock is held, and maintains outside it)
    rows = [r for r in history.records() if r.type is ProcessType.MAINTENANCE]
    assert len(rows) == 4  # two tables, a start row and an end row each
    written = read_rows(history.location, history.storage_options)
    assert written is not None and written.num_rows == count_before + 4  # the tick flushed them, once
    history.append(rows[0])  # as a micro-batch's process does: in the summaries, not yet in the table
    assert len(history.records()) == len(rows) + 1
    unflushed = read_rows(history.location, history.storage_options)
    assert unflushed is not None and unflushed.num_rows == count_before + 4
    good_location = history.location
    history.location = str(tmp_path / "not-a-dir" / "\0bad")
    handler.flush_history()  # logged, not raised; the row is kept
    history.location = good_location
    assert history.flush() == 1
    again = read_rows(history.location, history.storage_options)
    assert again is not None and again.num_rows == count_before + 5
