"""Late rows from anywhere in the past (issue 20): the main run and the late run (`selection.late_run`), in the model
and on real tables."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recluster.core.blocks import file_age, parse_data_file_name
from recluster.core.selection.absorb import decide_absorb
from recluster.core.selection.plan import Reason
from recluster.core.selection.runs import recover_runs
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY
from tests.absorb_model import ModelTable, absorb_bounds
from tests.helpers import WATERMARK_SETTINGS, event_batch, late_batch, main_json, no_spark, row_multiset


def written_run(path: str) -> str | None:
    written = parse_data_file_name(path)
    return None if written is None else written.run_id


def assert_runs_sorted(blocks: list) -> None:
    """Every run `absorb` wrote (the main run, the late run) is sorted and its files do not overlap."""
    for run in recover_runs(blocks):
        if run.horizon_ms is not None:
            ordered = sorted(run.files, key=lambda b: b.min_key)
            assert all(a.max_key < b.min_key for a, b in itertools.pairwise(ordered)), f"run {run.age_ms} overlaps"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(12, 40),
    st.sampled_from([0.02, 0.05, 0.2]),
    st.sampled_from([400, 1_000, 3_000]),
    st.integers(0, 2**32 - 1),
)
def test_the_late_run_never_loses_a_row_and_both_runs_stay_sorted(appends, share, target_rows, seed):
    """Late rows from anywhere, every append drained: the keys never change, the main run and the late run each
    stay one sorted run, and the late run's absorbs put the rows above the main run's top into the main run."""
    rng = np.random.default_rng(seed)
    table = ModelTable(target_rows)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=target_rows)
    reasons = set()
    for index in range(appends):
        table.append(late_batch(rng, index, 500, share, None))
        keys = table.all_keys()
        for _round in range(20):
            plan = table.plan(bounds)
            if plan.empty:
                break
            for task in plan.tasks:
                reasons.add(task.reason)
                written = table.merge(task)
                if task.upper_run is not None:  # the main run's new files begin above its untouched top
                    main_age = int(task.upper_run.run_id, 16)
                    extended = [table.blocks[p] for p in written if file_age(table.blocks[p])[0] == main_age]
                    assert all(b.min_values[0] > task.upper_run.above for b in extended)
            assert np.array_equal(table.all_keys(), keys), "rows lost or duplicated"
            assert_runs_sorted(table.clustered)
    assert Reason.LATE_RUN_ABSORB in reasons or appends < 15, reasons


def test_the_decision_is_the_same_from_the_log_alone() -> None:
    """The decision reads nothing but the files: the same files in any order decide the same (a restart)."""
    rng = np.random.default_rng(4)
    table = ModelTable(5_000)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=5_000)
    seen = set()
    for index in range(60):
        table.append(late_batch(rng, index, 1_000, 0.05, None))
        blocks = table.clustered
        first = decide_absorb(recover_runs(blocks), 0.35, 5_000)
        again = decide_absorb(recover_runs(list(reversed(blocks))), 0.35, 5_000)
        assert str(first[1]) == str(again[1])
        assert (first[0] is None) == (again[0] is None)
        if first[0] is not None and again[0] is not None:
            assert {b.path for b in first[0].files} == {b.path for b in again[0].files}
        if first[1] is not None:
            seen.add(first[1].reason)
        table.round(bounds)
    assert {Reason.LATE_RUN_ABSORB, Reason.LATE_RUN_REWRITE} <= seen, seen


def test_late_rows_from_anywhere_on_a_real_table_keep_every_row_in_two_sorted_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timestamp key, 5% of the rows late by any amount: the merges write the main run's new files and the late
    run's in one task (the kernel names each output by where it starts: the main run's above the value, the late
    run's up to it), every row is kept, both runs read back from the log sorted, and `info` shows the decision."""
    path = tmp_path / "events"
    rng = np.random.default_rng(30)
    appended = []
    split = 0
    for index in range(30):
        appended.append(event_batch(rng, index, 400, lateness=None))
        write_deltalake(str(path), appended[-1], mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "ts"})
        loader = snapshot_loader(str(path), WATERMARK_SETTINGS, None)
        before = {b.path for b in loader().blocks}
        result = recluster_table(str(path), loader, settings=WATERMARK_SETTINGS, spark_factory=no_spark)
        assert result.totals.failures == 0, result.to_dict()
        blocks = list(loader().blocks)
        added = [b for b in blocks if b.path not in before]
        for task in (t for plan in result.plans for t in plan.tasks if t.upper_run is not None):
            upper = task.upper_run
            assert upper is not None
            runs_of = {b.path: written_run(b.path) for b in added}
            main = [b for b in added if runs_of[b.path] == upper.run_id]
            late = [b for b in added if runs_of[b.path] == task.output_run]
            assert main and all(b.min_values[0] > upper.above for b in main)
            assert all(b.min_values[0] <= upper.above for b in late)
            split += bool(late)
        assert_runs_sorted([b for b in blocks if b.clustered])
    assert split >= 3, "no absorb wrote into both runs"
    appended.append(event_batch(rng, 30, 400, lateness=None))
    write_deltalake(str(path), appended[-1], mode="append")
    config = tmp_path / "config.yaml"
    config.write_text("clustering: {target_rows: 1500}\nselection: {policy: absorb}\n")
    (time_like,) = main_json(capsys, "info", str(path), "--config", str(config))["time_like"]
    assert time_like["reason"] in ("late_run_rent", "late_run_absorb", "late_run_rewrite"), time_like
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_daily_partitions_with_late_rows_from_anywhere_keep_every_row(tmp_path: Path) -> None:
    """Partitioned by day, 5% of the rows late by any amount (into past days' partitions): every row is kept and
    every run absorb wrote reads back sorted."""
    path = tmp_path / "daily"
    rng = np.random.default_rng(31)
    appended = []
    for index in range(40):
        appended.append(event_batch(rng, index, 300, lateness=None))
        write_deltalake(str(path), appended[-1], mode="append", partition_by=["day"])
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "ts"})
        loader = snapshot_loader(str(path), WATERMARK_SETTINGS, None)
        result = recluster_table(str(path), loader, settings=WATERMARK_SETTINGS, spark_factory=no_spark)
        assert result.totals.failures == 0, result.to_dict()
    blocks = [b for b in loader().blocks if b.clustered]
    for day in {b.partition for b in blocks}:
        assert_runs_sorted([b for b in blocks if b.partition == day])
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
