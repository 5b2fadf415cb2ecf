"""Tables on an S3-compatible object store, end to end: a real local S3 server (moto_server, with IAM
signature checks on), real Delta tables written by delta-rs, real Spark merges reading and writing the data
files through pyarrow.fs (no Hadoop jars), rows checked by reading the table back."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from jobs.autorecluster import start_job, stop_gracefully
from recluster.core.blocks import parse_data_file_name
from recluster.core.errors import TableError
from recluster.core.outcomes import CommitStatus
from recluster.core.selection import select_merge_tasks
from recluster.delta.commit import commit_task
from recluster.delta.log import LOG_GAP, read_commits
from recluster.delta.log_listing import list_log
from recluster.delta.log_writer import set_table_properties
from recluster.delta.maintenance import clean_orphans, find_orphans, maintain_table
from recluster.delta.storage import last_checkpoint_version
from recluster.engine.api import selection_bounds, table_info
from recluster.engine.rounds import snapshot_loader, write_task
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    ClusteringSettings,
    CommitSettings,
    Settings,
    TableSettings,
    load_settings,
)
from recluster.settings_job import StreamSettings
from recluster.settings_optimizing import MaintenanceSettings
from tests.helpers import append_clustered, random_batches, row_multiset, run_cli, run_rounds
from tests.s3_server import REGION, S3Server, s3_environment
from triggers import delta_log
from triggers.delta_log import GAP_PROBE_SECONDS, DeltaLogStreamReader, newest_version

SECRET_MARKER = "never-print-me"


def read_back(s3: S3Server, uri: str, version: int | None = None) -> pa.Table:
    table = DeltaTable(uri, storage_options=s3.options())
    if version is not None:
        table.load_as_version(version)
    return table.to_pyarrow_table()


def settings_for(s3: S3Server) -> Settings:
    return Settings(
        storage_options=s3.options(),
        clustering=ClusteringSettings(target_rows=6_000, max_tasks_per_round=2),
    )


@pytest.mark.spark
def test_info_and_final_recluster_on_s3(s3, spark):
    uri = s3.table_uri("events")
    random_batches(uri, batches=12, rows=1_000, seed=1, options=s3.options())
    settings = settings_for(s3)
    before_rows = row_multiset(read_back(s3, uri))
    version_before = DeltaTable(uri, storage_options=s3.options()).version()
    assert table_info(uri, settings=settings).info.table.average_depth == 12.0
    result = run_rounds(uri, spark, settings, final=True)

    assert result.stop_reason == "within_threshold" and result.totals.conflicts == 0 and result.totals.failures == 0
    assert result.after.table.average_depth == 1.0
    assert row_multiset(read_back(s3, uri)) == before_rows
    live = pa.table(DeltaTable(uri, storage_options=s3.options()).get_add_actions(flatten=True)).to_pylist()
    assert live and all(parse_data_file_name(a["path"]) and a["min.k"] is not None for a in live)
    assert row_multiset(read_back(s3, uri, version_before)) == before_rows  # time travel still reads

    # The CLI configured only by the standard AWS environment variables.
    shown = run_cli("info", uri, "--json", env=s3_environment(s3))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["average_depth"] == 1.0


@pytest.mark.spark
def test_spark_placement_reads_schema_evolved_files_exactly(tmp_path, spark):
    """Merges in Spark tasks read files written before and after a column was added: every row, every value."""
    path = str(tmp_path / "evolved")
    rng = np.random.default_rng(3)
    for i in range(4):
        columns = {
            "k": pa.array(rng.integers(0, 1000, 500), pa.int64()),
            "ts": pa.array(rng.integers(0, 10**15, 500), pa.timestamp("us", tz="UTC")),
            "d": pa.array([None if x % 7 == 0 else f"{x}.25" for x in range(500)]).cast(pa.decimal128(12, 2)),
        }
        if i >= 2:
            columns["late"] = pa.array([f"late-{x}" for x in range(500)])
        write_deltalake(path, pa.table(columns), mode="append", schema_mode="merge")
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
    expected = row_multiset(DeltaTable(path).to_pyarrow_table())
    settings = Settings(
        clustering=ClusteringSettings(target_rows=600),
        merge={"in_process_max_bytes": 0, "placement": "spark"},  # type: ignore[arg-type]
    )
    result = run_rounds(path, spark, settings, final=True)
    assert result.totals.tasks >= 1 and result.after.table.average_depth == 1.0
    assert row_multiset(DeltaTable(path).to_pyarrow_table()) == expected


@pytest.mark.spark
def test_concurrent_delete_during_merge_on_s3_wins(s3, spark):
    uri = s3.table_uri("conflict")
    random_batches(uri, batches=4, rows=500, seed=3, options=s3.options())
    settings = settings_for(s3)
    snapshot = snapshot_loader(uri, settings, None)()
    (task,) = select_merge_tasks(
        uri, snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None)
    ).tasks
    written = write_task(spark, task, snapshot, settings=settings, run_id="0000000000e1")
    ours = {key["Key"] for key in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]}
    assert all(any(k.endswith(f.path) for k in ours) for f in written)
    # A writer deletes rows of an input file after the merge read it and before it commits.
    DeltaTable(uri, storage_options=s3.options()).delete("batch = 1")
    expected = row_multiset(read_back(s3, uri))
    outcome = commit_task(
        task,
        written,
        table_uri=snapshot.uri,
        storage_options=snapshot.storage_options,
        read_version=snapshot.version,
        run_id="0000000000e1",
        task_id="t-conflict",
        settings=settings.commit,
    )
    assert outcome.status is CommitStatus.CONFLICT
    assert row_multiset(read_back(s3, uri)) == expected
    prefix = uri.split(f"s3://{s3.bucket}/", 1)[1]
    left = {key["Key"] for key in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix)["Contents"]}
    assert not any(k.endswith(f.path) for k in left for f in written)  # our outputs were deleted
    result = run_rounds(uri, spark, settings, final=True)  # the next round re-plans on the new snapshot
    assert result.totals.conflicts == 0 and result.totals.tasks >= 1
    assert row_multiset(read_back(s3, uri)) == expected
    assert not pc.any(pc.equal(read_back(s3, uri)["batch"], 1)).as_py()  # deleted rows stay deleted


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_job_on_s3(s3, spark, tmp_path):
    uri = s3.table_uri("stream")
    rng = np.random.default_rng(11)
    appended = []

    def write(batch: int) -> None:
        data = pa.table(
            {"k": pa.array(rng.integers(0, 10**9, 2_000), pa.int64()), "batch": pa.array([batch] * 2_000, pa.int32())}
        )
        append_clustered(uri, data, s3.options())
        appended.append(data)

    write(0)
    settings = Settings(
        storage_options={"AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"},
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(
            checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        tables=[TableSettings(uri=uri, storage_options=s3.options())],  # per-table options over the global ones
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(1, 6):
            write(batch)
            if batch == 3:  # a concurrent DELETE between micro-batches: the delete wins, nothing else is lost
                DeltaTable(uri, storage_options=s3.options()).delete("batch = 2")
            query.processAllAvailable()
        first = handler.status[uri]
        progress = "".join(str(p) for p in query.recentProgress)
    finally:
        stop_gracefully(query, handler)
    # Restart on the same checkpoint: the state is rebuilt from the log on the store, nothing is redone.
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(6, 10):
            write(batch)
            query.processAllAvailable()
        second = handler.status[uri]
    finally:
        stop_gracefully(query, handler)
    assert first.tasks > 0 and second.tasks > 0 and first.failures == 0 and second.failures == 0, (first, second)
    survivors = pa.concat_tables(appended)
    survivors = survivors.filter(pc.not_equal(survivors["batch"], 2))
    assert row_multiset(read_back(s3, uri)) == row_multiset(survivors)
    assert s3.secret not in progress and s3.secret not in repr(handler.tracked)
    info = table_info(uri, settings=settings).info
    assert info.table.average_depth < 10 / 2  # far below the 10 overlapping appends it would have without us


def test_delta_log_polling_never_lists(s3):
    """Polling an idle table costs one HEAD and one GET; each new commit one HEAD more; never a LIST."""
    uri = s3.table_uri("poll")
    options = s3.options()
    append_clustered(uri, pa.table({"k": pa.array([1, 2], pa.int64())}), s3.options())
    version = DeltaTable(uri, storage_options=options).version()
    before = len(s3.requests())
    for _ in range(5):
        assert newest_version(uri, version, 1000, options) == version
    idle = s3.requests()[before:]
    assert len(idle) == 10 and not any("list-type" in r for r in idle), idle
    for value in range(3):
        write_deltalake(uri, pa.table({"k": pa.array([value], pa.int64())}), mode="append", storage_options=options)
    before = len(s3.requests())
    assert newest_version(uri, version, 1000, options) == version + 3
    polled = s3.requests()[before:]
    assert len(polled) == 4 and all(r.startswith("HEAD ") for r in polled), polled

    # The log is cleaned up behind a checkpoint past a reader's offset: the gap is found (one LOG_GAP row a lost
    # commit) without any listing while nothing is missing.
    table = DeltaTable(uri, storage_options=options)
    table.create_checkpoint()
    prefix = uri.split(f"s3://{s3.bucket}/", 1)[1]
    for lost in range(version + 2):
        s3.client().delete_object(Bucket=s3.bucket, Key=f"{prefix}/_delta_log/{lost:020d}.json")
    assert newest_version(uri, version, 1000, options) == version + 3
    commits = list(read_commits(uri, version + 1, version + 3, options))
    assert [(c.version, c.operation) for c in commits] == [
        (version + 1, LOG_GAP),
        (version + 2, "WRITE"),
        (version + 3, "WRITE"),
    ]
    before = len(s3.requests())
    assert newest_version(uri, version + 3, 1000, options) == version + 3  # idle again: still no listing
    assert not any("list-type" in r for r in s3.requests()[before:])


def test_maintenance_of_a_small_table_reads_its_log_once(s3):
    """A maintenance pass opens the table and lists its log once for all its steps: on a table of one commit, the
    open's four requests (listing, `_last_checkpoint`, the commit read twice), one listing of the log, one of the
    table's files and vacuum's read of the commit (delta-rs reads removes from the log); no log cleanup while no
    log file comes before a checkpoint."""
    uri = s3.table_uri("day=2026-12-07/maintained")  # obstore's keys must be delta-rs's, here too
    options = s3.options()
    write_deltalake(uri, pa.table({"k": pa.array([1, 2], pa.int64())}), storage_options=options)
    assert list_log(uri, options).commits == [0]
    before = len(s3.requests())
    result = maintain_table(uri, MaintenanceSettings(), storage_options=options)
    made = s3.requests()[before:]
    assert result.version == 0 and result.checkpoint_version is None and not result.vacuumed
    listings = [r for r in made if "list-type" in r]
    assert len(made) == 7 and len(listings) == 3, made
    assert sum("_last_checkpoint" in r for r in made) == 1 and sum("00000000000000000000.json" in r for r in made) == 3


@pytest.mark.spark
def test_orphan_cleanup_on_s3(s3, spark):
    uri = s3.table_uri("orphans")
    random_batches(uri, batches=3, rows=500, seed=41, options=s3.options())
    settings = settings_for(s3)
    run_rounds(uri, spark, settings, final=True)
    random_batches(uri, batches=3, rows=500, seed=42, options=s3.options())
    run_rounds(uri, spark, settings, final=True)  # the first outputs are removed but reachable by time travel
    old_version = DeltaTable(uri, storage_options=s3.options()).version() - 1
    expected_old = row_multiset(read_back(s3, uri, old_version))
    random_batches(uri, batches=2, rows=500, seed=43, options=s3.options())
    expected = row_multiset(read_back(s3, uri))
    snapshot = snapshot_loader(uri, settings, None)()
    (task, *_) = select_merge_tasks(
        uri, snapshot.version, snapshot.blocks, selection_bounds(settings, snapshot, None)
    ).tasks
    crashed = {f.path for f in write_task(spark, task, snapshot, settings=settings, run_id="0000000000cc")}
    prefix = uri.split(f"s3://{s3.bucket}/", 1)[1]
    s3.client().put_object(Bucket=s3.bucket, Key=f"{prefix}/notes.parquet", Body=b"not ours")

    options = s3.options()
    assert find_orphans(uri, safety_age_seconds=3600, storage_options=options).orphans == ()  # too young
    found = find_orphans(uri, safety_age_seconds=0, storage_options=options)
    assert {o.path for o in found.orphans} == crashed
    result = clean_orphans(uri, safety_age_seconds=0, storage_options=options)
    assert result.deleted and {o.path for o in result.orphans} == crashed
    left = {k["Key"] for k in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix)["Contents"]}
    assert f"{prefix}/notes.parquet" in left and not any(k.endswith(p) for k in left for p in crashed)
    assert row_multiset(read_back(s3, uri)) == expected
    assert row_multiset(read_back(s3, uri, old_version)) == expected_old

    # Scheduled maintenance on the store: vacuum (retention shortened to nothing), a checkpoint, log cleanup.
    set_table_properties(uri, {"delta.deletedFileRetentionDuration": "interval 0 hours"}, options)
    maintenance = MaintenanceSettings(retention_hours=0, checkpoint_every_versions=1)
    maintained = maintain_table(uri, maintenance, storage_options=options)
    assert maintained.vacuumed and maintained.checkpoint_version == maintained.version
    assert last_checkpoint_version(uri, options) == maintained.version
    left = {k["Key"] for k in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=prefix)["Contents"]}
    assert not any(k.endswith(p) for k in left for p in maintained.vacuumed)
    assert row_multiset(read_back(s3, uri)) == expected


@pytest.mark.spark
def test_commits_refused_without_conditional_put_unless_single_writer(s3, spark):
    uri = s3.table_uri("unsafe")
    unsafe = s3.options()
    del unsafe["conditional_put"]
    random_batches(uri, batches=3, rows=300, seed=5, options=s3.options())
    version = DeltaTable(uri, storage_options=unsafe).version()
    settings = Settings(storage_options=unsafe)
    with pytest.raises(TableError, match=r"refusing to commit to s3://.*conditional_put=etag"):
        run_rounds(uri, spark, settings, final=True)
    assert run_rounds(uri, spark, settings, final=True, dry_run=True).stop_reason == "dry_run"  # planning is fine
    opted_in = Settings(storage_options=unsafe, commit=CommitSettings(allow_unsafe_single_writer=True))
    expected = row_multiset(read_back(s3, uri))
    assert run_rounds(uri, spark, opted_in, final=True).totals.tasks >= 1
    assert row_multiset(read_back(s3, uri)) == expected
    assert DeltaTable(uri, storage_options=unsafe).version() > version

    environment = {k: v for k, v in s3_environment(s3).items() if not k.startswith("RECLUSTER_")}
    refused = run_cli("sql", f"ALTER TABLE delta.`{uri}` CLUSTER BY (s)", env=environment)
    assert refused.returncode == 1
    assert refused.stderr.startswith("recluster: error: refusing to commit") and refused.stderr.count("\n") == 1


def test_the_source_reads_last_checkpoint_of_an_idle_table_once_a_minute(s3):
    """The source's idle poll is one HEAD a table; `_last_checkpoint` is read at the first poll and then once per
    GAP_PROBE_SECONDS, when a log cleaned past the offset is still found (docs/streaming.md#polling)."""
    uri = s3.table_uri("idle-probe")
    options = s3.options()
    append_clustered(uri, pa.table({"k": pa.array([1, 2], pa.int64())}), options)
    version = DeltaTable(uri, storage_options=options).version()
    reader = DeltaLogStreamReader({"tables": json.dumps([uri]), "storageOptions": json.dumps(options)})
    start = {"tables": {uri: version}}
    prefix = uri.split(f"s3://{s3.bucket}/", 1)[1]

    def polled(times: int) -> list[str]:
        before = len(s3.requests())
        for _ in range(times):
            assert reader.latestOffset(start, ReadAllAvailable()) == start
        return [line.split(" HTTP/")[0].split("?")[0] for line in s3.requests()[before:] if prefix in line]

    def checkpoint_reads(lines: list[str]) -> int:
        return sum(line.endswith("/_last_checkpoint") for line in lines)

    first = polled(5)  # no checkpoint yet: its read is one HEAD, answered 404
    assert checkpoint_reads(first) == 1, first
    assert first.count(f"HEAD /{s3.bucket}/{prefix}/_delta_log/{version + 1:020d}.json") == 5, first
    assert len(first) == 6 and checkpoint_reads(polled(3)) == 0
    reader.gap_probed[uri] -= GAP_PROBE_SECONDS  # a minute later
    assert checkpoint_reads(polled(1)) == 1

    DeltaTable(uri, storage_options=options).create_checkpoint()  # the log cleaned past the offset: found then
    for value in range(2):
        write_deltalake(uri, pa.table({"k": pa.array([value], pa.int64())}), mode="append", storage_options=options)
    DeltaTable(uri, storage_options=options).create_checkpoint()
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{prefix}/_delta_log/{version + 1:020d}.json")
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # looked less than a minute ago
    reader.gap_probed[uri] -= GAP_PROBE_SECONDS
    assert reader.latestOffset(start, ReadAllAvailable()) == {"tables": {uri: version + 2}}


def test_the_source_probes_tables_together_and_gives_the_budget_in_their_order(s3, monkeypatch):
    """Tables are probed concurrently, and a batch's commit budget still goes to them in the order they are listed,
    as it did when they were probed one by one; tables past the chunk that spent it are not probed at all."""
    monkeypatch.setattr(delta_log, "PROBE_CHUNK", 2)
    options = s3.options()
    uris = [s3.table_uri(f"budget-{n}") for n in range(4)]
    for uri in uris:
        for value in range(3):
            write_deltalake(uri, pa.table({"k": pa.array([value], pa.int64())}), mode="append", storage_options=options)
    reader = DeltaLogStreamReader({"tables": json.dumps(uris), "storageOptions": json.dumps(options)})
    start = {"tables": dict.fromkeys(uris, 0)}
    assert reader.latestOffset(start, ReadMaxRows(5))["tables"] == dict(zip(uris, [2, 2, 1, 0], strict=True))
    assert reader.latestOffset(start, ReadAllAvailable())["tables"] == dict.fromkeys(uris, 2)
    before = len(s3.requests())
    assert reader.latestOffset(start, ReadMaxRows(3))["tables"] == dict(zip(uris, [2, 1, 0, 0], strict=True))
    probed = {uri for uri in uris if any(uri.split(f"s3://{s3.bucket}/")[1] + "/" in r for r in s3.requests()[before:])}
    assert probed == set(uris[:2])  # the first chunk spent the budget


def test_wrong_credentials_and_missing_bucket_are_one_line_errors(s3):
    uri = s3.table_uri("errors")
    append_clustered(uri, pa.table({"k": pa.array([1], pa.int64())}), s3.options())
    wrong = run_cli("info", uri, "--json", env=s3_environment(s3, secret=SECRET_MARKER))
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.count("\n") == 1, wrong.stderr
    assert wrong.stderr.startswith(f"recluster: error: cannot open Delta table {uri}: ")
    assert "SignatureDoesNotMatch" in wrong.stderr and SECRET_MARKER not in wrong.stderr
    missing = run_cli("run", "s3://no-such-bucket/t", "--final", env=s3_environment(s3))
    assert missing.returncode == 1
    assert missing.stderr == (
        "recluster: error: cannot open Delta table s3://no-such-bucket/t: "
        "The specified bucket does not exist (NoSuchBucket)\n"
    )


def test_storage_secrets_are_never_printed():
    settings = Settings(
        storage_options={"AWS_SECRET_ACCESS_KEY": SECRET_MARKER},
        tables=[TableSettings(uri="s3://b/t", storage_options={"AZURE_STORAGE_ACCOUNT_KEY": SECRET_MARKER})],
    )
    assert SECRET_MARKER not in repr(settings) and SECRET_MARKER not in str(settings)
    from recluster.settings import SettingsError

    with pytest.raises(SettingsError) as raised:
        load_settings(overrides=[f"storage_options={{AWS_SECRET_ACCESS_KEY: [{SECRET_MARKER}]}}"])
    assert "storage_options.AWS_SECRET_ACCESS_KEY" in str(raised.value)
    assert SECRET_MARKER not in str(raised.value)


@pytest.mark.parametrize(
    "uri,options,environment,safe",
    [
        ("s3://b/t", {"conditional_put": "etag"}, {}, True),
        ("s3a://b/t", {"AWS_CONDITIONAL_PUT": "etag"}, {}, True),
        ("s3://b/t", {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, {}, True),
        ("s3://b/t", {}, {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, True),
        ("s3://b/t", {}, {"AWS_CONDITIONAL_PUT": "etag"}, True),  # the environment, as delta-rs and obstore read it
        ("s3://b/t", {"conditional_put": "disabled"}, {}, False),
        ("s3://b/t", {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, {}, False),
        ("s3://b/t", {}, {}, False),
        ("gs://b/t", {}, {}, True),
        ("abfss://c@a.dfs.core.windows.net/t", {}, {}, True),
        ("/data/t", {}, {}, True),
    ],
)
def test_commit_safety_by_store_and_options(monkeypatch, uri, options, environment, safe):
    from recluster.delta.storage import commit_safety_problem

    for name in ("AWS_CONDITIONAL_PUT", "AWS_S3_LOCKING_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert (commit_safety_problem(uri, options) is None) is safe


def test_watch_table_flag_keeps_the_configured_storage_options():
    from recluster.cli.watch import merge_tables

    configured = [TableSettings(uri="s3://lake/events", storage_options={"AWS_REGION": REGION})]
    merged = merge_tables(configured, [TableSettings(uri="s3://lake/events/", cluster_by=["k"])])
    assert [(t.uri, t.cluster_by, t.storage_options) for t in merged] == [
        ("s3://lake/events", ["k"], {"AWS_REGION": REGION})
    ]
