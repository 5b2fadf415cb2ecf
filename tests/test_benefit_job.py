"""The benefit accounting in the job (issue 45 item 2, docs/benefit.md): the setting and its errors, the incremental
read of event logs, the pause of a table no query reads and its resume (the handler driven with fake times, no Spark),
and the acceptance test: the job's files skipped against Delta Spark's own scan metrics for a known query mix."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recluster.core.benefit import DAY_MS, BenefitSource, PauseReason
from recluster.core.selection.plan import Policy
from recluster.delta.log import read_commits
from recluster.engine.publish import MetricsRecord
from recluster.settings import SettingsError, load_settings
from recluster.settings_job import HttpSettings
from recluster.settings_optimizing import BenefitSettings
from tests.event_log_files import execution
from tests.helpers import Rows, append_random, http_get, job_settings

START_MS = 1_800_000_000_000
"""The fake clock's start (2027): the pause is counted on the times handed to the job, not the machine's."""


def test_the_setting_and_its_errors() -> None:
    settings = load_settings(overrides=["benefit.event_logs=/logs/a, s3://b/logs", "benefit.pause_after_days=7"])
    assert settings.benefit == BenefitSettings(event_logs=["/logs/a", "s3://b/logs"], pause_after_days=7.0)
    assert load_settings().benefit.event_logs == [] and load_settings().benefit.pause_after_days is None
    for overrides, message in (
        (["benefit.pause_after_days=7"], "needs benefit.event_logs"),
        (["benefit.event_logs=/l", "benefit.pause_after_days=0"], "benefit.pause_after_days"),
        (["benefit.event_logs=/l", "benefit.pause_after_days=soon"], "benefit.pause_after_days"),
        (["benefit.event_logs=/l", "benefit.read_interval_seconds=-1"], "benefit.read_interval_seconds"),
        (["benefit.pause_after_day=7"], "benefit.pause_after_day"),
    ):
        with pytest.raises(SettingsError, match=message):
            load_settings(overrides=overrides)


def write_log(path: Path, table: Path, number: int, time_ms: int, files: int = 1) -> None:
    """One application's event log with one query of `table` at `time_ms` that read `files` files."""
    events = execution(number, f"PreparedDeltaFileIndex(1 paths)[file:{table}]", files)
    events[0]["time"] = time_ms
    path.write_text("".join(json.dumps(event) + "\n" for event in events))


def test_the_reader_forgets_a_file_gone_and_keeps_its_scans_while_the_location_is_unreadable(tmp_path: Path) -> None:
    from recluster.engine.job_benefit import EventLogReader

    logs = tmp_path / "logs"
    logs.mkdir()
    write_log(logs / "app-1", tmp_path / "a", 1, START_MS)
    write_log(logs / "app-2", tmp_path / "b", 2, START_MS)
    reader = EventLogReader([str(logs)], {})
    assert reader.read() == [] and sorted(reader.scans_by_table()) == [str(tmp_path / "a"), str(tmp_path / "b")]
    (logs / "app-2").unlink()
    assert reader.read() == [] and list(reader.scans_by_table()) == [str(tmp_path / "a")]
    (logs / "app-1").rename(tmp_path / "away")
    logs.rmdir()
    (problem,) = reader.read()  # the location is gone: one problem, what was read stays counted
    assert "no such file or directory" in problem and list(reader.scans_by_table()) == [str(tmp_path / "a")]
    assert not reader.listed_all  # and no table is paused for want of queries it could not see
    assert reader.files_read == 2


def _newest(table: Path) -> int:
    return DeltaTable(str(table)).version()


def test_a_table_no_query_reads_is_paused_and_resumes_at_the_next_query(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two tables appended to alike, pause after 2 days: `read` has a query a day, `unread` none. After 3 days
    `unread` is paused (status, log line, no recluster although its commits overlap) while `read` is reclustered;
    a query of `unread` in a new log file ends the pause and the next pass reclusters it. A malformed file is one
    problem line; the other files are read, and a file already read is not read again."""
    from recluster.engine.handler import ReclusterHandler

    read, unread, logs = tmp_path / "read", tmp_path / "unread", tmp_path / "logs"
    logs.mkdir()
    rng = np.random.default_rng(45)
    for table in (read, unread):
        append_random(table, rng, 0)
    settings = job_settings(tmp_path / "checkpoint", [read, unread], Policy.LEVELS)
    settings = settings.model_copy(update={"benefit": BenefitSettings(event_logs=[str(logs)], pause_after_days=2)})
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    for table in (read, unread):
        handler.tracked[str(table)] = handler.tables.track(str(table), None)

    def batch(number: int) -> dict[str, int]:
        """Two overlapping appends to each table, one micro-batch; the merges each table got."""
        commits = []
        for table in (read, unread):
            for _ in range(2):
                append_random(table, rng, number)
            commits.extend(read_commits(str(table), handler.tracked[str(table)].version + 1, _newest(table), {}))
        before = {uri: t.totals.tasks for uri, t in handler.tracked.items()}
        handler(Rows(commits), number)
        return {uri: t.totals.tasks - before[uri] for uri, t in handler.tracked.items()}

    write_log(logs / "app-1", read, 1, START_MS, files=1)
    (logs / "app-bad").write_text('{"Event": "SparkListenerLogStart"}\n{"Event": "org.apache.spark.sql.exec')
    with caplog.at_level(logging.INFO, "recluster.job"):
        handler.count_benefit(START_MS)
    assert "reason=event_log_problem event log" in caplog.text and "app-bad" in caplog.text
    assert handler.benefit.reader.files_read == 2
    first = handler.tracked[str(read)].benefit
    assert first is not None and first.benefit.queries == 1 and first.paused is None

    write_log(logs / "app-2", read, 2, START_MS + 2 * DAY_MS + 1000)
    caplog.clear()
    with caplog.at_level(logging.INFO, "recluster.job"):
        handler.count_benefit(START_MS + 3 * DAY_MS)
    assert handler.benefit.reader.files_read == 3  # only the new file was read
    assert handler.tracked[str(read)].paused is None
    assert handler.tracked[str(unread)].paused is PauseReason.NO_QUERIES
    assert f"recluster benefit table={unread} queries=0" in caplog.text and "paused=no_queries" in caplog.text
    assert handler.tracked[str(read)].benefit.benefit.queries == 2  # type: ignore[union-attr]
    modelled = handler.tracked[str(unread)].benefit  # no logged scan of it: one modelled query, said so
    assert modelled is not None and modelled.source is BenefitSource.MODELLED and modelled.daily == ()
    files = len(handler.tracked[str(unread)].state.blocks)
    assert modelled.benefit.files_total == files and 0 <= modelled.benefit.files_skipped < files
    assert "source=modelled" in caplog.text and handler.tracked[str(read)].benefit.source is BenefitSource.LOGGED  # type: ignore[union-attr]

    caplog.clear()
    with caplog.at_level(logging.INFO, "recluster.job"):
        merges = batch(1)
    assert merges[str(read)] > 0 and merges[str(unread)] == 0, merges
    status = handler.status[str(unread)]
    assert status.benefit is not None and status.benefit.paused is PauseReason.NO_QUERIES and status.pending
    assert "paused=no_queries" in str(status) and "paused=no_queries" in caplog.text
    assert status.to_dict()["benefit"]["paused"] == "no_queries"
    records = {  # the metrics records (Kafka) carry the same figures and the pause, as JSON
        r.record.table: MetricsRecord.model_validate_json(r.record.model_dump_json())
        for r in handler.reports.run_scheduled({str(read): False, str(unread): False})
    }
    unread_record, read_record = records[str(unread)].benefit, records[str(read)].benefit
    assert unread_record is not None and read_record is not None
    assert (unread_record.paused, unread_record.source, unread_record.queries) == ("no_queries", "modelled", 0)
    assert (read_record.paused, read_record.source, read_record.queries) == (None, "logged", 2)
    counted = handler.tracked[str(read)].benefit
    assert counted is not None and read_record.files_skipped == counted.benefit.files_skipped
    assert read_record.bytes_rewritten == counted.benefit.bytes_rewritten  # as of the last read of the logs
    assert read_record.skipped_per_gb_rewritten == counted.benefit.skipped_per_gb_rewritten

    write_log(logs / "app-3", unread, 3, START_MS + 3 * DAY_MS + 1000)
    handler.count_benefit(START_MS + 3 * DAY_MS + 2000)
    assert handler.tracked[str(unread)].paused is None and handler.tracked[str(unread)].pending
    handler.count_benefit(START_MS + 3 * DAY_MS + 3000)
    assert handler.benefit.reader.files_read == 4  # nothing new the second time
    merges = batch(2)
    assert merges[str(unread)] > 0, merges  # resumed: its pending commits are reclustered

    from jobs.health import HealthServer, JobProbe

    server = HealthServer(HttpSettings(port=0, host="127.0.0.1"), JobProbe(HttpSettings(port=0))).start()
    try:
        server.attach(SimpleNamespace(isActive=True, lastProgress=None, exception=lambda: None), handler)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/status", timeout=30) as reply:
            shown: dict[str, Any] = {t["table"]: t["benefit"] for t in json.load(reply)["tables"]}
        page = http_get(f"http://127.0.0.1:{server.port}/tables/{quote(str(read), safe='')}")
    finally:
        server.stop()
    assert page[0] == 200 and '<svg id="benefit-daily"' in page[1]  # the per-day series on the table page
    assert '<span class="files-skipped">' + str(shown[str(read)]["files_skipped"]) + "</span>" in page[1]
    assert shown[str(unread)]["queries"] == 1 and shown[str(unread)]["paused"] is None
    assert shown[str(read)]["queries"] == 2 and shown[str(read)]["bytes_rewritten"] > 0
    assert sum(day["queries"] for day in shown[str(read)]["daily"]) == 2


ROWS, APPENDS, KEYS, TARGET_ROWS = 40_000, 20, 1_000, 5_000  # job_settings: 5,000-row files


def query_mix(table: Path) -> list[str]:
    """10 equalities and 3 ranges on the key `k`, 2 filters on `batch` (not the key: every file is read)."""
    by_path = f"delta.`{table}`"
    mix = [f"SELECT count(*) FROM {by_path} WHERE k = {v}" for v in (3, 97, 150, 222, 380, 401, 555, 690, 812, 990)]
    mix += [f"SELECT sum(batch) FROM {by_path} WHERE k BETWEEN {v} AND {v + 100}" for v in (50, 420, 800)]
    mix += [f"SELECT count(*) FROM {by_path} WHERE batch = {v}" for v in (3, 11)]
    return mix


@pytest.fixture(scope="module")
def logged_table(tmp_path_factory: pytest.TempPathFactory, referee: Any) -> tuple[Path, Path]:
    """A table of 40,000 rows clustered on `k` (FINAL, 8 files of 5,000 rows) and the event logs of one Spark
    application that ran the query mix on it: one Spark run for the module (in the referee's Python: through the
    `referee` fixture, the tests using it are marked needs_services)."""
    from tests.event_log_files import run_spark_applications
    from tests.helpers import run_rounds

    work = tmp_path_factory.mktemp("benefit")
    table, logs = work / "table", work / "event-logs"
    rng = np.random.default_rng(45)
    for batch in range(APPENDS):
        append_random(table, rng, batch, rows=ROWS // APPENDS, high=KEYS)
    run_rounds(table, None, job_settings(work / "unused", [table]), final=True)
    logs.mkdir()
    run_spark_applications([{"conf": {"spark.eventLog.dir": logs.as_uri()}, "sql": query_mix(table)}], work)
    return table, logs


def test_the_jobs_files_skipped_match_delta_sparks_scan_metrics(
    logged_table: tuple[Path, Path], referee: Any, tmp_path: Path
) -> None:
    """The issue's acceptance test: the files skipped the job counts from the event logs are within 20% of total -
    files read that Delta Spark's own scans report for the same queries (the referee's scan metrics)."""
    from recluster.engine.handler import ReclusterHandler

    table, logs = logged_table
    files = DeltaTable(str(table)).get_add_actions(flatten=True).num_rows
    settings = job_settings(tmp_path / "checkpoint", [table], Policy.LEVELS)
    settings = settings.model_copy(update={"benefit": BenefitSettings(event_logs=[str(logs)])})
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    handler.tracked[str(table)] = handler.tables.track(str(table), None)
    handler.count_benefit(START_MS)
    counted = handler.tracked[str(table)].benefit
    assert counted is not None
    benefit = counted.benefit

    skipped = sum(files - referee.scan(statement)[1] for statement in query_mix(table))
    print(f"files {files}, queries {benefit.queries}: job {benefit.files_skipped} skipped, Delta Spark {skipped}")
    assert benefit.queries == benefit.measured == len(query_mix(table))
    assert benefit.files_total == files * len(query_mix(table))
    assert benefit.files_skipped == pytest.approx(skipped, rel=0.2)
    assert skipped > benefit.files_total / 2  # the mix mostly filters on the key: most files are skipped
    assert 0 < benefit.bytes_skipped < benefit.bytes_total
    assert sum(day.queries for _, day in counted.daily) == benefit.queries


def test_the_modelled_figure_is_in_a_sane_range(logged_table: tuple[Path, Path]) -> None:
    """Without the scans' metrics, advise's predicted read share for the table's key gives the modelled figure: for
    the same mix it lands within a factor of two of the logged one."""
    from recluster.core.advice.ranking import workloads
    from recluster.core.benefit import TableSize, logged_benefit, modelled_benefit
    from recluster.engine.advise import advise_table, read_scans, table_uri

    table, logs = logged_table
    scans, problems, _ = read_scans([str(logs)], {})
    assert problems == []
    (workload,) = workloads(scans, {s.location: table_uri(s.location) for s in scans}).values()
    settings = job_settings(table.parent / "unused", [table])
    advice = advise_table(str(table), workload, settings=settings, target_rows=TARGET_ROWS, cost=False)
    (current,) = [c for c in advice.candidates if c.current]
    add_actions = DeltaTable(str(table)).get_add_actions(flatten=True)
    size = TableSize(0, len(add_actions), sum(add_actions.column("size_bytes").to_pylist()))
    modelled = modelled_benefit(workload.queries, size, current.read_share, 0)
    logged = logged_benefit(scans, [size], 0)
    print(f"read share {current.read_share:.3f}: modelled {modelled.files_skipped}, logged {logged.files_skipped}")
    assert 0 < modelled.files_skipped < modelled.files_total
    assert logged.files_skipped / 2 <= modelled.files_skipped <= logged.files_skipped * 2


def test_recluster_status_shows_the_benefit_and_the_pause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recluster status` counts the same figures from one read of the logs: the query of the table in a good file,
    the malformed file left out. A table no logged query read is paused (no_queries) once the oldest log file is
    older than `pause_after_days`, in `--json` and in the table, with the modelled figure of one query; without
    `benefit.event_logs` every table with a key has the modelled figure."""
    import os

    from tests.helpers import main_json, run_main

    table, unread, logs = tmp_path / "table", tmp_path / "unread", tmp_path / "logs"
    logs.mkdir()
    rng = np.random.default_rng(45)
    append_random(table, rng, 0)
    for batch in range(3):
        append_random(unread, rng, batch)
    write_log(logs / "app-1", table, 1, START_MS, files=1)
    (logs / "app-bad").write_text('{"Event": "org.apache.spark.sql.exec')
    day_ago = time.time() - 86_400
    os.utime(logs / "app-bad", (day_ago, day_ago))  # the logs vouch for a day without a query of `unread`
    checkpoint = f"stream.checkpoint_location={tmp_path / 'checkpoint'}"
    with_logs = ["--set", checkpoint, "--set", f"benefit.event_logs={logs}", "--set", "benefit.pause_after_days=0.5"]
    queried, never = main_json(capsys, "status", table, unread, "--json", "--cluster-by", "k", *with_logs)
    assert queried["benefit"]["queries"] == 1 and queried["benefit"]["files_total"] == 1
    assert queried["benefit"]["files_skipped"] == 0 and queried["benefit"]["paused"] is None
    assert queried["benefit"]["source"] == "logged"
    assert never["benefit"]["paused"] == "no_queries" and never["benefit"]["source"] == "modelled"
    assert never["benefit"]["queries"] == 0 and never["benefit"]["files_total"] == 3
    monkeypatch.setenv("COLUMNS", "400")  # the table's every column whole
    code, out, _ = run_main(capsys, "status", table, unread, "--cluster-by", "k", *with_logs)
    assert code == 0 and "0/1" in out and "no_queries" in out and "(modelled)" in out
    (entry,) = main_json(capsys, "status", unread, "--json", "--cluster-by", "k", "--set", checkpoint)
    assert entry["benefit"]["source"] == "modelled" and entry["benefit"]["paused"] is None
    assert (
        entry["benefit"]["files_total"] == 3 and entry["benefit"]["files_skipped"] == never["benefit"]["files_skipped"]
    )


def test_the_streaming_job_pauses_an_unread_table_and_resumes_it(tmp_path: Path, spark: Any) -> None:
    """The real job (Spark's stream of the table's commits, the job's tick): no query in the logs for 4.3 s (the
    pause set to 0.00005 days) pauses the table, so appends that overlap get no merge; a query of it logged (at a
    time a day ahead, so the test's clock cannot pause it again) resumes it and the job's tick reclusters it."""
    from tests.helpers import row_multiset, running_job, wait_for

    table, logs = tmp_path / "table", tmp_path / "logs"
    logs.mkdir()
    write_log(logs / "app-0", tmp_path / "other", 1, round(time.time() * 1000))  # a query of another table
    rng = np.random.default_rng(45)
    appended = [append_random(table, rng, 0)]
    settings = job_settings(tmp_path / "checkpoint", [table], Policy.LEVELS)
    benefit = BenefitSettings(event_logs=[str(logs)], read_interval_seconds=0.1, pause_after_days=0.00005)
    ticks = settings.self_optimizing.model_copy(update={"tick_seconds": 0.1})
    settings = settings.model_copy(update={"benefit": benefit, "self_optimizing": ticks})
    uri = str(table)
    with running_job(spark, settings) as (query, handler):

        def ticked(check: Any) -> Any:
            handler.tick()  # what the job's main loop calls
            return check()

        wait_for(lambda: ticked(lambda: uri in handler.tracked and handler.tracked[uri].paused), "the pause")
        merges = handler.status[uri].tasks
        for batch in range(1, 4):
            appended += [append_random(table, rng, batch) for _ in range(2)]
            query.processAllAvailable()
        handler.tick()
        status = handler.status[uri]
        assert status.tasks == merges and status.pending and status.version >= 6, status
        assert status.benefit is not None and status.benefit.paused is PauseReason.NO_QUERIES
        write_log(logs / "app-1", table, 1, round(time.time() * 1000) + DAY_MS)
        wait_for(lambda: ticked(lambda: handler.status[uri].tasks > merges), "a merge once a query is seen")
        status = handler.status[uri]
        assert status.benefit is not None and status.benefit.paused is None and status.benefit.benefit.queries == 1
    assert row_multiset(DeltaTable(uri).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
