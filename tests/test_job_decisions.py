"""Decisions before merges (docs/streaming.md#decisions-before-merges): a micro-batch publishes every table's status
at its new version before any merge of the batch runs, so a commit's decision never waits behind another table's
merge. The merge is held where the crash tests hold it (`recluster.engine.rounds.write_task`,
tests/reliability/phased_watch.py), the job's handler driven directly (no Spark: merges run in the process)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deltalake import DeltaTable

import recluster.engine.rounds
from recluster.core.selection.plan import Policy
from recluster.delta.log import read_commits
from recluster.engine.handler import ReclusterHandler
from tests.helpers import Rows, append_random, job_settings, row_multiset

HOLD_SECONDS = 300.0


def test_a_commit_is_decided_while_another_tables_merge_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy, quiet = tmp_path / "busy", tmp_path / "quiet"
    rng = np.random.default_rng(44)
    for table in (busy, quiet):
        append_random(table, rng, 0)
    settings = job_settings(tmp_path / "checkpoint", [busy, quiet], Policy.LEVELS)
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    for table in (busy, quiet):
        handler.tracked[str(table)] = handler.tables.track(str(table), None)
    for table in (busy, quiet):  # overlapping appends: both tables have a merge due
        append_random(table, rng, 1)
    newest = {str(t): DeltaTable(str(t)).version() for t in (busy, quiet)}
    commits = [c for t in (busy, quiet) for c in read_commits(str(t), 1, newest[str(t)], {})]
    rows_before = {t: row_multiset(DeltaTable(str(t)).to_pyarrow_table()) for t in (busy, quiet)}

    merging, release = threading.Event(), threading.Event()
    write_task = recluster.engine.rounds.write_task

    def held(*args: Any, **kwargs: Any) -> Any:
        merging.set()
        assert release.wait(HOLD_SECONDS), "the test never released the merge"
        return write_task(*args, **kwargs)

    monkeypatch.setattr(recluster.engine.rounds, "write_task", held)
    batch = threading.Thread(target=handler, args=(Rows(commits), 1))
    batch.start()
    try:
        assert merging.wait(HOLD_SECONDS), "no merge started"
        shown = handler.status
        for uri, version in newest.items():  # both decided (work due) while the batch's first merge is held
            assert shown[uri].version == version and shown[uri].pending
            assert handler.tracked[uri].totals.tasks == 0
    finally:
        release.set()
        batch.join(HOLD_SECONDS)
    assert not batch.is_alive()
    for table in (busy, quiet):  # the held merge, then the other, ran and committed every row
        assert handler.tracked[str(table)].totals.tasks >= 1
        assert DeltaTable(str(table)).version() > newest[str(table)]
        assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == rows_before[table]
