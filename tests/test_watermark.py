"""absorb on time-like keys (issue 20): the lateness watermark and the rent-or-buy trigger, in the model (the real
selection over modelled files, against brute-force checks) and on real Delta tables (rows unchanged, decisions
read back from the log alone)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recluster.core.selection import time_like_decisions
from recluster.core.selection.absorb import decide_absorb
from recluster.core.selection.plan import Reason
from recluster.core.selection.runs import recover_runs
from recluster.delta.log_writer import set_table_properties
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, SelectionSettings, Settings
from tests.absorb_model import ModelTable, absorb_bounds
from tests.helpers import (
    WATERMARK_SETTINGS,
    WIDTH,
    cli_environment,
    event_batch,
    late_batch,
    main_json,
    row_multiset,
    run_rounds,
)


def overlapping_pairs(blocks: list) -> list:
    return [
        (a.path, b.path)
        for a, b in itertools.combinations(blocks, 2)
        if a.min_key <= b.max_key and b.min_key <= a.max_key
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends=st.integers(4, 30),
    rows=st.integers(20, 120),
    share=st.sampled_from([0.0, 0.05, 0.2]),
    lateness=st.sampled_from([1, 3, 6, None]),
    per_file=st.integers(2, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_watermark_absorbs_lose_nothing_and_keep_the_main_run_sorted_and_cut(
    appends: int, rows: int, share: float, lateness: int | None, per_file: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    table = ModelTable(rows * per_file)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=rows * per_file)
    everything = []
    for index in range(appends):
        everything.append(late_batch(rng, index, rows, share, lateness))
        table.append(everything[-1])
        plan = table.plan(bounds)
        assert time_like_decisions(table.clustered, bounds) == plan.watermarks  # what info shows
        for task in plan.tasks:
            written = table.merge(task)
            cuts = [c for _, d in plan.watermarks if d.cut for c in (d.watermark,)]
            for path, cut in itertools.product(written, cuts):  # no output straddles the watermark
                keys = table.keys[path]
                assert keys.max() < cut or keys.min() >= cut, (path, cut)
        assert np.array_equal(table.all_keys(), np.sort(np.concatenate(everything))), "rows lost or duplicated"
        main = recover_runs(table.clustered)[0]
        if main.horizon_ms is not None:
            assert not overlapping_pairs(list(main.files)), "the main run overlaps itself"


def test_closed_files_stay_closed_while_appends_are_no_later_than_the_lag() -> None:
    """5% of rows late by up to 4 appends: files an absorb wrote below its watermark are left alone by the
    absorbs that follow (the watermark trails the learned lag by LAG_MARGIN: without it a few were rewritten); the
    lag learned is about 4 appends of key width; rows are rewritten well under 2.5 times (the ratio rule: about
    3.6)."""
    rng = np.random.default_rng(11)
    table = ModelTable(10_000)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=10_000)
    closed: set[str] = set()
    for index in range(60):
        table.append(late_batch(rng, index, 2_000, 0.05, 4))
        plan = table.plan(bounds)
        cuts = [d.watermark for _, d in plan.watermarks if d.cut and d.reason is Reason.WATERMARK_ABSORB]
        for task in plan.tasks:
            written = table.merge(task)
            closed.update(p for p in written for cut in cuts if table.keys[p].max() < cut)
    _, decision = decide_absorb(recover_runs(table.clustered), 0.35, table.target_rows)
    assert decision is not None and 2 * WIDTH < decision.lag <= 4 * WIDTH
    assert len(closed) >= 8
    assert closed <= set(table.blocks), "closed files were rewritten"
    assert table.rewritten / table.appended < 2.5


def test_random_keys_keep_the_ratio_rule_and_unbounded_lateness_gets_a_late_run() -> None:
    late_reasons = {Reason.LATE_RUN_ABSORB, Reason.LATE_RUN_REWRITE, Reason.LATE_RUN_RENT}
    for kind in ("random", "unbounded"):
        rng = np.random.default_rng(3)
        table = ModelTable(10_000)
        bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=10_000)
        reasons = set()
        for index in range(40):
            keys = rng.integers(0, 1 << 40, 2_000) if kind == "random" else late_batch(rng, index, 2_000, 0.05, None)
            table.append(keys)
            expected = table.all_keys()
            plan = table.round(bounds)
            assert np.array_equal(table.all_keys(), expected), "rows lost or duplicated"
            if index >= 10:  # once the table is ten appends wide, late rows from anywhere make it not time-like
                reasons |= {w.reason for _, w in plan.watermarks} | {t.reason for t in plan.tasks}
                runs = recover_runs(table.clustered)
                main = runs[0].files
                assert all(a.max_key < b.min_key for a, b in itertools.pairwise(main)), "the main run overlaps"
        if kind == "random":
            assert not reasons & (late_reasons | {Reason.WATERMARK_ABSORB, Reason.WATERMARK_RENT}), reasons
        else:  # the late run takes the appends; it merges into the main run now and then
            assert reasons & {Reason.WATERMARK_ABSORB, Reason.WATERMARK_RENT} == set(), reasons
            assert {Reason.LATE_RUN_ABSORB, Reason.LATE_RUN_REWRITE} <= reasons, reasons


# ---- real tables -------------------------------------------------------------------------------------------------

HOUR = dt.timedelta(hours=1)


def test_a_long_late_heavy_sequence_on_a_real_table_keeps_every_row_and_decides_from_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events"
    rng = np.random.default_rng(20)
    appended = []
    cuts = 0
    for index in range(30):
        appended.append(event_batch(rng, index, 500))
        write_deltalake(str(path), appended[-1], mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "ts"})
        if index == 20:  # a restart here: a fresh process plans from the log alone and decides the same
            planned = run_rounds(
                path,
                None,
                WATERMARK_SETTINGS,
                dry_run=True,
            )
            config = tmp_path / "config.yaml"
            config.write_text("clustering: {target_rows: 1500}\nselection: {policy: absorb}\n")
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "recluster.cli",
                    "run",
                    str(path),
                    "--dry-run",
                    "--config",
                    str(config),
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                env=cli_environment({"XDG_STATE_HOME": str(tmp_path / "state")}),
            )
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["plans"] == [str(p) for p in planned.plans]
            assert "time-like partition=- watermark=" in str(planned.plans[0])
            info = main_json(capsys, "info", str(path), "--config", str(config))
            (time_like,) = info["time_like"]
            assert time_like["reason"] in ("watermark_absorb", "watermark_rent") and time_like["lag"]
        result = run_rounds(
            path,
            None,
            WATERMARK_SETTINGS,
        )
        cuts += sum(any(d.cut for _, d in plan.watermarks) and bool(plan.tasks) for plan in result.plans)
    assert cuts >= 2, "no absorb was cut at the watermark"
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_daily_partitions_with_late_rows_into_past_days_keep_every_row(tmp_path: Path) -> None:
    """Partitioned by day: the newest day is time-like on its own; late rows land in past days' partitions."""
    path = tmp_path / "daily"
    rng = np.random.default_rng(21)
    appended = []
    decided = set()
    for index in range(36):
        appended.append(event_batch(rng, index, 300, lateness=8))
        write_deltalake(str(path), appended[-1], mode="append", partition_by=["day"])
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "ts"})
        result = run_rounds(
            path,
            None,
            WATERMARK_SETTINGS,
        )
        decided.update(dict(p)["day"] for plan in result.plans for p, _ in plan.watermarks)
    assert decided, "no partition was time-like"
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


KEY_TYPES = {
    "decimal": (pa.decimal128(12, 2), lambda hours: [Decimal(int(h * 100)) / 100 for h in hours]),
    "date": (pa.date32(), lambda hours: [dt.date(2026, 1, 1) + dt.timedelta(days=int(h)) for h in hours]),
    "timestamp_s": (pa.timestamp("s"), lambda hours: [dt.datetime(2026, 1, 1) + h * HOUR for h in hours]),
    "float": (pa.float64(), lambda hours: [float(h) for h in hours]),
}


@pytest.mark.parametrize("kind", sorted(KEY_TYPES))
def test_watermark_cuts_work_for_every_subtractable_key_type(kind: str, tmp_path: Path) -> None:
    """The watermark is a value of the key column's type (a decimal of its scale, a day, a whole second...): merges
    cut there without failing, every row kept."""
    arrow_type, make = KEY_TYPES[kind]
    path = tmp_path / kind
    rng = np.random.default_rng(22)
    appended, cuts = [], 0
    settings = Settings(clustering=ClusteringSettings(target_rows=600), selection=SelectionSettings(policy="absorb"))
    for index in range(16):
        hours = late_batch(rng, index, 300, 0.05, 3) / WIDTH * 24 + rng.random(300) / 7
        appended.append(pa.table({"key": pa.array(make(hours), arrow_type), "n": np.arange(300) + 300 * index}))
        write_deltalake(str(path), appended[-1], mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "key"})
        result = run_rounds(path, None, settings)
        assert result.totals.failures == 0, result.to_dict()
        cuts += sum(any(d.cut for _, d in plan.watermarks) and bool(plan.tasks) for plan in result.plans)
    assert cuts >= 1, f"{kind}: no absorb was cut at the watermark"
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def kept_table(rng: np.random.Generator, appends: int, lateness: int) -> ModelTable:
    """A model table of `appends` appends of 2,000 rows (5% late by up to `lateness`), a round after each."""
    table = ModelTable(10_000)
    bounds = dataclasses.replace(absorb_bounds(0.35), target_rows=10_000)
    for index in range(appends):
        table.append(late_batch(rng, index, 2_000, 0.05, lateness))
        table.round(bounds)
    return table


def test_a_backlog_of_appends_is_absorbed_without_pricing_each_one() -> None:
    """After a long stop (more than MAX_COUNTED_APPENDS appends waiting) the head is absorbed at once; the
    decision of a normal wait prices every append (its accumulator is the depth sum the model recomputes)."""
    from recluster.core.block_table import BlockTable
    from recluster.core.metrics import table_mean_depth
    from recluster.core.selection.watermark import MAX_COUNTED_APPENDS

    rng = np.random.default_rng(5)
    table = kept_table(rng, 12, lateness=2)
    runs = recover_runs(table.clustered)
    main = runs[0].files
    appends = []
    for index in range(12, 12 + MAX_COUNTED_APPENDS + 1):
        table.append(late_batch(rng, index, 50, 0.05, 2))
        appends.append([table.blocks[f"part-{table.serial:05d}-append.parquet"]])
    _, backlog = decide_absorb(recover_runs(table.clustered), 0.35, table.target_rows)
    assert backlog is not None and backlog.reason is Reason.WATERMARK_ABSORB
    assert backlog.accumulator == backlog.threshold
    _, short = decide_absorb(recover_runs([*main, *appends[0], *appends[1]]), 0.35, table.target_rows)
    assert short is not None
    tables = (BlockTable.from_blocks([*main, *[b for a in appends[:j] for b in a]]) for j in (1, 2))
    first, second = (table_mean_depth(t, np.arange(len(t))) - 1 for t in tables)
    assert short.accumulator == pytest.approx(first if first >= short.threshold else first + second)


def test_the_same_head_is_priced_lower_in_a_bigger_table() -> None:
    """The accumulator is a mean over all files, in which the head's depth is diluted by the table's size; the
    rewrite's price is scaled down with it (DILUTION), so the same head is not left to grow deeper in a big
    table: with the closed files the head does not touch dropped, the identical head's threshold is higher."""
    from recluster.core.selection.watermark import DILUTION

    rng = np.random.default_rng(8)
    table = kept_table(rng, 80, lateness=4)
    for index in range(80, 83):  # a head of three waiting appends
        table.append(late_batch(rng, index, 2_000, 0.05, 4))
    runs = recover_runs(table.clustered)
    waiting = [b for r in runs[1:] for b in r.files]
    low = min(b.min_key for b in waiting)
    touched = [b for b in runs[0].files if b.max_key >= low]
    _, big = decide_absorb(runs, 0.35, table.target_rows)
    _, small = decide_absorb(recover_runs([*touched, *waiting]), 0.35, table.target_rows)
    assert big is not None and small is not None
    files_big, files_small = len(table.clustered), len(touched) + len(waiting)
    assert files_big >= 3 * files_small
    assert small.threshold == pytest.approx(big.threshold * (files_big / files_small) ** DILUTION, rel=1e-9)
    assert small.threshold > big.threshold
