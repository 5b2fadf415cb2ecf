"""`recluster estimate` (issue 35): the shape learned from known histories, and the projection checked against the
policy run for real on the same appends (real Delta tables, reclustered in the process by the product)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.pages import render_table, table_view
from recluster.core.estimate.project import ModelScale, Strategy, run_model
from recluster.core.estimate.shape import HistoryShape, KeyShape
from recluster.core.metrics import clustering_info
from recluster.core.selection.plan import Policy, SelectionBounds
from recluster.delta.history import HistoryStore
from recluster.engine.api import read_snapshot
from recluster.engine.estimate import estimate_table, record_estimate
from recluster.engine.publish import BatchActions, MetricsRecord, metrics_record, with_estimate
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import ClusteringSettings, Settings
from tests.absorb_model import FINGERPRINT
from tests.estimate_runs import no_spark, real_run, write_long_log
from tests.helpers import main_json, run_cli, run_main
from tests.workload_data import Workload, append, bounded_time_batch, time_batch, two_column_batch, uniform_batch

APPENDS, ROWS, TARGET = 24, 1_000, 5_000
SETTINGS = Settings(clustering=ClusteringSettings(target_rows=TARGET))
WORKLOADS = {
    "uniform": Workload("uniform", "uniform int64", ("k",), uniform_batch),
    "late_4": Workload("late_4", "5% late by up to 4 appends", ("ts",), bounded_time_batch),
    "late_any": Workload("late_any", "5% late by any amount", ("ts",), time_batch),
    "random_ab": Workload("random_ab", "random (a, b)", ("a", "b"), two_column_batch),
}


def history(path: Path, workload: Workload, seed: int = 35) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    batches = [workload.make(rng, index, ROWS) for index in range(APPENDS)]
    for batch in batches:
        append(path, batch, workload.key)
    return batches


@pytest.mark.parametrize(
    ("name", "kind", "lag"),
    [("uniform", KeyShape.RANDOM, None), ("late_4", KeyShape.TIME_LIKE, 4.0), ("late_any", KeyShape.TIME_LIKE, None)],
)
def test_the_shape_of_known_histories_is_learned(tmp_path: Path, name: str, kind: KeyShape, lag: float | None) -> None:
    history(tmp_path / name, WORKLOADS[name])
    shape = estimate_table(str(tmp_path / name), settings=SETTINGS, merge_mb_per_second=50.0).shape
    assert (shape.kind, shape.appends, shape.rows) == (kind, APPENDS, APPENDS * ROWS)
    if kind is KeyShape.TIME_LIKE:
        assert shape.late_share_measured and shape.late_share == pytest.approx(0.05, abs=0.015)
        assert shape.lag_appends == (None if lag is None else pytest.approx(lag, abs=0.5))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_estimate_matches_the_policy_run_for_real(tmp_path: Path, name: str) -> None:
    workload = WORKLOADS[name]
    batches = history(tmp_path / "history", workload)
    estimate = estimate_table(str(tmp_path / "history"), settings=SETTINGS)
    real = real_run(tmp_path / "real", batches, workload.key, SETTINGS)
    ours = estimate.configured
    assert ours.name == "absorb" and estimate.calibration is not None
    assert ours.time_averaged_depth == pytest.approx(real["time_averaged_depth"], rel=0.10)
    assert ours.write_amplification == pytest.approx(real["row_write_amplification"], rel=0.15)
    assert ours.bytes_rewritten == pytest.approx(real["bytes_rewritten"], rel=0.30)
    for column in workload.key:  # (a, b): on the Hilbert curve, each column's ranges decoded from it
        assert ours.files_read_per_predicate[column] == pytest.approx(real["files_read"][column], rel=0.15)
    initial = estimate.initial
    assert (initial.files, initial.rows) == (APPENDS, APPENDS * ROWS)
    assert initial.files_written == 5 and initial.seconds > 0  # 4.8 target files: the remainder joins the others


def test_the_alternatives_rank_as_expected_on_random_keys(tmp_path: Path) -> None:
    history(tmp_path / "t", WORKLOADS["uniform"])
    estimate = estimate_table(str(tmp_path / "t"), settings=SETTINGS, every=4, merge_mb_per_second=50.0)
    by_name = {s.name: s for s in estimate.strategies}
    assert list(by_name) == ["absorb", "none", "compact_every_4", "full_sort_every_4"]
    none, full = by_name["none"], by_name["full_sort_every_4"]
    assert none.bytes_rewritten == 0 and none.per_day.merges == 0
    assert none.time_averaged_depth == pytest.approx((APPENDS + 1) / 2)  # one file per append, all overlapping
    depths = [by_name[name].time_averaged_depth for name in ("absorb", "compact_every_4", "none")]
    assert depths == sorted(depths)
    assert full.write_amplification == pytest.approx(sum(range(4, APPENDS + 1, 4)) / APPENDS)
    day = by_name["absorb"].per_day
    assert day.storage_churn_bytes == pytest.approx(day.bytes_rewritten * 7)
    assert day.compute_seconds == pytest.approx(day.bytes_rewritten / 50e6)


def test_a_long_history_is_sampled_and_fast() -> None:
    shape = HistoryShape(8_760, 8_760 * 5_000, 8_760 * 5_000 * 40, 8_760 * 3_600.0, KeyShape.TIME_LIKE, 0.05, 4.0, True)
    scale = ModelScale.of(shape, 100_000)
    assert scale.sampled and scale.appends * scale.commits_per_append >= 8_760 and scale.appends <= 500
    bounds = SelectionBounds(0.1, 16.0, 1 << 31, 10_000, 4, FINGERPRINT, policy=Policy.ABSORB, target_rows=100_000)
    run = run_model(shape, scale, Strategy.POLICY, bounds, every=5)
    assert run.appends == scale.appends and 1.0 <= run.time_averaged_depth < 2.0


def test_cli_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history(tmp_path / "t", WORKLOADS["late_4"])
    result = main_json(capsys, "estimate", str(tmp_path / "t"), "--set", "clustering.target_rows=5000")
    assert result["history"]["kind"] == "time_like" and result["policy"] == "absorb"
    assert set(result["strategies"]) == {"absorb", "none", "compact_every_5", "full_sort_every_5"}
    assert set(result["strategies"]["absorb"]["per_day"]) >= {"bytes_rewritten", "merges", "storage_churn_bytes"}
    assert result["calibration"]["mb_per_second"] > 0
    code, out, _ = run_main(
        capsys, "estimate", str(tmp_path / "t"), "--policy", "levels", "--merge-mb-per-second", "20"
    )
    assert code == 0 and "policy levels" in out and "initial FINAL" in out and "20.0 MB/s (given)" in out


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    missing = run_cli("estimate", str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.startswith("recluster: error:")
    history(tmp_path / "t", WORKLOADS["uniform"])
    column = run_cli("estimate", str(tmp_path / "t"), "--cluster-by", "nope")
    assert column.returncode == 1 and "nope" in column.stderr
    bad = run_cli("estimate", str(tmp_path / "t"), "--days", "0")
    assert bad.returncode == 2 and "--days" in bad.stderr
    write_deltalake(str(tmp_path / "empty"), pa.table({"k": pa.array([], pa.int64())}))
    empty = run_cli("estimate", str(tmp_path / "empty"), "--cluster-by", "k")
    assert empty.returncode == 1 and "no data commits" in empty.stderr


def test_nothing_is_written_into_the_table_or_the_current_directory(tmp_path: Path) -> None:
    history(tmp_path / "t", WORKLOADS["uniform"])
    before = sorted(os.listdir(tmp_path / "t")), sorted(os.listdir(tmp_path / "t" / "_delta_log"))
    work = tmp_path / "cwd"
    work.mkdir()
    run_cli("estimate", str(tmp_path / "t"), cwd=work, check=True)
    assert (sorted(os.listdir(tmp_path / "t")), sorted(os.listdir(tmp_path / "t" / "_delta_log"))) == before
    assert not os.listdir(work)


def test_the_job_keeps_the_estimate_against_what_happened_since(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, location = tmp_path / "t", tmp_path / "history"
    workload = WORKLOADS["late_4"]
    history(path, workload)
    store = HistoryStore(str(location))
    projected = record_estimate(str(path), settings=SETTINGS, store=store)
    assert projected is not None and projected.version == APPENDS  # the key property's commit is version 1
    assert record_estimate(str(path), settings=SETTINGS, store=store) is None  # once per table
    rng = np.random.default_rng(7)
    for index in range(APPENDS, APPENDS + 6):
        append(path, workload.make(rng, index, ROWS), workload.key)
        recluster_table(
            str(path), snapshot_loader(str(path), SETTINGS, None), settings=SETTINGS, spark_factory=no_spark
        )
    options = ("--set", f"self_optimizing.history_location={location}", "--set", "clustering.target_rows=5000")
    (report,) = main_json(capsys, "status", str(path), *options)
    estimate = report["estimate"]
    assert estimate["projected"] == {**dataclasses.asdict(projected)}
    actual = estimate["actual"]
    assert actual["bytes_appended"] > 0 and actual["merges"] > 0 and actual["bytes_rewritten"] > 0
    assert actual["written_per_appended"] == actual["bytes_rewritten"] / actual["bytes_appended"]
    (again,) = main_json(capsys, "status", str(path), *options)  # counted once: only later commits are read again
    assert {k: v for k, v in again["estimate"]["actual"].items() if k != "days"} == {
        k: v for k, v in actual.items() if k != "days"
    }
    settings = Settings(clustering=SETTINGS.clustering, self_optimizing={"history_location": str(location)})
    page = render_table(table_view(read_snapshot(str(path), settings=settings), settings, HistoryStore(str(location))))
    assert f"estimated at version {APPENDS}" in page and "estimate-actual" in page
    snapshot = read_snapshot(str(path), settings=settings)
    record = metrics_record(
        snapshot.uri, snapshot.version, clustering_info(snapshot.blocks), {}, BatchActions(), pending=False
    )
    assert record.estimate is None and "estimate" in MetricsRecord.model_json_schema()["properties"]
    published = MetricsRecord.model_validate_json(with_estimate(record, store.records()).model_dump_json())
    assert published.estimate is not None and published.estimate.model_dump() == dataclasses.asdict(projected)


def test_days_choose_the_commits_learned_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_long_log(tmp_path / "log", 50)  # hourly commits from 2026-01-01 on, their data files absent
    old = run_cli("estimate", str(tmp_path / "log"), "--days", "30", "--merge-mb-per-second", "100")
    assert old.returncode == 1 and "no data commits in the last 30 days" in old.stderr
    days = (time.time() - 1_767_225_600) / 86_400 + 1
    result = main_json(capsys, "estimate", str(tmp_path / "log"), "--days", f"{days}", "--merge-mb-per-second", "100")
    assert result["history"]["appends"] == 50 and result["history"]["kind"] == "time_like"
    assert (
        result["history"]["lag_appends"] == pytest.approx(2.0, abs=0.1) and not result["history"]["late_share_measured"]
    )
    assert any("late share assumed" in note for note in result["notes"]) and result["calibration"] is None
