"""Kafka end to end against Apache Kafka itself (tests/kafka_broker: KRaft, a plaintext and a SASL_SSL listener)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from kafka import KafkaProducer
from pyspark.sql.streaming.datasource import ReadMaxRows

from jobs.autorecluster import start_job, stop_gracefully
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.metrics import clustering_info
from recluster.delta.snapshot import load_snapshot
from recluster.engine.leases import JobLeases
from recluster.engine.publish import MetricsRecord, commit_event_json
from recluster.settings import ClusteringSettings, Settings
from recluster.settings_discovery import DiscoverySettings, LeaseSettings, StorageRoot
from recluster.settings_job import KafkaSettings, StreamSettings
from tests.helpers import append_random, cli_json, row_multiset, run_cli, running_job, wait_for
from tests.kafka_broker import METRICS, job_settings, read_records, send
from triggers.kafka_commits import KafkaCommitsReader

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_job_driven_by_kafka_survives_malformed_duplicate_events_and_a_broker_restart(
    tmp_path, spark, broker, triggers
):
    table = tmp_path / "events"
    rng = np.random.default_rng(31)
    appended: list[pa.Table] = []

    def append_and_announce(batch: int, extra: list[bytes] = ()) -> None:
        appended.append(append_random(table, rng, batch))
        version = DeltaTable(str(table)).version()
        event = commit_event_json(str(table), version, "WRITE", int(time.time() * 1000)).encode()
        send(broker.bootstrap, [*extra, event], partition=batch % 2)

    append_and_announce(0)
    settings = job_settings(broker, table, tmp_path / "checkpoint", metrics_topic=METRICS)
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(1, 5):
            duplicate = commit_event_json(str(table), 1, "WRITE", None).encode()
            extra = [b"{not json", b'{"table": "", "version": -3}', duplicate] if batch == 2 else []
            append_and_announce(batch, extra)
            query.processAllAvailable()
        before_restart = handler.status[str(table)]
        assert before_restart.tasks > 0, before_restart
        assert (
            handler.reports.skipped_events == 0
        )  # counted per batch; the malformed ones were in batch 2's micro-batch

        # The broker goes away (a clean shutdown: it comes back with its topics and offsets) while writers keep writing.
        broker.stop()
        stopped = datetime.now(UTC)
        appended.extend(append_random(table, rng, batch) for batch in range(5, 7))
        # the query must survive the triggers it runs against the missing broker
        wait_for(
            lambda: not query.isActive or any(start >= stopped for start in triggers),
            "a trigger run against the stopped broker (or the query's end)",
        )
        assert query.isActive
        broker.start()
        for batch in range(7, 10):
            append_and_announce(batch)
            query.processAllAvailable()
        after = handler.status[str(table)]
    finally:
        stop_gracefully(query, handler)

    final = DeltaTable(str(table))
    assert row_multiset(final.to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))
    assert after.tasks > before_restart.tasks  # kept reclustering after the restart, driven by Kafka only
    assert after.version >= final.version() - 2  # caught up with the log, including the unannounced appends
    publisher = handler.reports.metrics
    assert publisher is not None
    assert not publisher.buffer, f"{len(publisher.buffer)} metrics records still unsent at the stop"
    values = read_records(
        broker.bootstrap,
        METRICS,
        lambda values: any(MetricsRecord.model_validate_json(v).version == after.version for v in values),
        f"the metrics record of version {after.version}, the last the job reached",
    )
    records = [r for r in map(MetricsRecord.model_validate_json, values) if r.table == str(table)]
    versions = [r.version for r in records]  # before and after the restart: the topic kept its records
    assert versions == sorted(set(versions)), f"a version decided twice across the restart: {versions}"
    last = records[-1]
    at_version = DeltaTable(str(table))
    at_version.load_as_version(last.version)
    blocks = load_snapshot(at_version, ClusterKey((KeyColumn("k", KeyType.INTEGER),)), uri=str(table)).blocks
    assert last.table_metrics == clustering_info(blocks).table
    assert {lv.level for lv in last.levels} == set(clustering_info(blocks).levels)


def test_publish_commits_cli_and_metrics_schema(tmp_path, broker):
    table = tmp_path / "published"
    write_deltalake(str(table), pa.table({"k": [1, 2]}))
    write_deltalake(str(table), pa.table({"k": [3]}), mode="append")
    topic = broker.create_topic("published")
    published = cli_json(
        "publish-commits",
        "--table",
        table,
        "--bootstrap-servers",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-version",
        "earliest",
        "--seconds",
        "3",
    )
    assert published["published"] == 2
    values = read_records(broker.bootstrap, topic, lambda values: len(values) >= 2, "the two published commit events")
    events = [json.loads(v) for v in values]
    assert [(e["table"], e["version"]) for e in events] == [(str(table), 0), (str(table), 1)]
    schema = run_cli("metrics-schema", check=True)
    properties = json.loads(schema.stdout)["properties"]
    assert {"time", "table", "version", "table_metrics", "levels", "actions", "errors"} <= set(properties)


def test_events_from_a_transactional_producer_with_markers_ending_the_log(tmp_path, spark, broker):
    """A transactional writer ends the log with commit and abort markers no consumer receives: a micro-batch ends
    after the last record polled (never at the broker's end offset, the marker's), so every range is read to its end.
    Aborted events are hints like any other: the Delta log is read for the real commits."""
    topic = broker.create_topic("transactional")
    table = tmp_path / "events"
    rng = np.random.default_rng(37)
    appended = [append_random(table, rng, 0)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"writer-{topic}")
    producer.init_transactions()
    settings = job_settings(broker, table, tmp_path / "cp", commits_topic=topic)
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(1, 5):
            appended.append(append_random(table, rng, batch))
            event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None).encode()
            producer.begin_transaction()
            producer.send(topic, value=event)
            if batch == 3:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
            query.processAllAvailable()
        status = handler.status[str(table)]
    finally:
        stop_gracefully(query, handler)
        producer.close()
    assert query.exception() is None
    assert status.tasks > 0 and status.failures == 0, status
    assert status.version >= DeltaTable(str(table)).version() - 2  # caught up, the last committed event included
    assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(appended))


def test_every_partition_is_read_while_another_already_has_records(broker):
    """A partition still at its beginning is read like the others while another one's records keep coming: before,
    its start was a lazy reset to the beginning that each micro-batch started again and never finished, so the
    source read one partition of three for the whole run, and the tables whose events went to the others were never
    decided (the fleet bench's jobs sharing 300 tables). The reader alone, as Spark's micro-batches call it."""
    topic = broker.create_topic("partitions", partitions=3)
    reader = KafkaCommitsReader({"bootstrapServers": broker.bootstrap, "topic": topic})
    offsets = reader.initialOffset()
    try:
        sent = dict.fromkeys(range(3), 0)
        for batch in range(6):
            partitions = [2] if batch < 3 else [0, 1, 2]  # partition 2 first, then all three
            for partition in partitions:
                send(
                    broker.bootstrap,
                    [commit_event_json(f"t{partition}", batch, "WRITE", None).encode()],
                    partition,
                    topic,
                )
                sent[partition] += 1
            offsets = reader.latestOffset(offsets, ReadMaxRows(10_000))
        assert {int(p): end for p, (end, _) in offsets["partitions"].items()} == sent
    finally:
        reader.stop()


def test_a_micro_batch_reads_every_partition_in_one_task(broker):
    """The partitions with new records are one input partition (one Spark task, one round trip to a Python worker
    a batch), read range after range: every record once, with its partition and offset."""
    topic = broker.create_topic("one-task", partitions=3)
    reader = KafkaCommitsReader({"bootstrapServers": broker.bootstrap, "topic": topic})
    try:
        start = reader.initialOffset()
        for partition, count in ((0, 2), (2, 3)):  # partition 1 gets nothing
            events = [commit_event_json(f"t{partition}", v, "WRITE", None).encode() for v in range(count)]
            send(broker.bootstrap, events, partition, topic)
        end = reader.latestOffset(start, ReadMaxRows(10_000))
        (task,) = reader.partitions(start, end)
        rows = list(reader.read(task))
        assert [(row[4], row[5], row[0], row[1]) for row in rows] == [
            (0, 0, "t0", 0),
            (0, 1, "t0", 1),
            (2, 0, "t2", 0),
            (2, 1, "t2", 1),
            (2, 2, "t2", 2),
        ]
        assert reader.partitions(end, end) == []
    finally:
        reader.stop()


def test_a_job_sharing_a_root_decides_the_tables_it_owns_from_the_events(tmp_path, spark, broker):
    """Commit events with discovery and leases (docs/kafka.md): the job reads the whole topic and decides the tables
    it owns; the tables another live job owns (its leases kept by the test) are neither taken up nor shown."""
    lake = tmp_path / "lake"
    tables = [lake / f"t{index}" for index in range(4)]
    rng = np.random.default_rng(45)
    appended = {table: [append_random(table, rng, 0)] for table in tables}
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=6.0, renew_seconds=1.0)
    other, stop = JobLeases(leases, {}, job="other"), threading.Event()

    def other_job() -> None:  # alive all along: its heartbeat and a lease pass every half second
        while not stop.wait(0.5):
            other.beat()
            other.run_pass([str(table) for table in tables], lambda table: None)

    topic = broker.create_topic("shared", partitions=2)
    settings = Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(source="kafka", checkpoint_location=str(tmp_path / "cp"), trigger_interval_seconds=0.2),
        kafka=KafkaSettings(bootstrap_servers=broker.bootstrap, commits_topic=topic, starting_offsets="earliest"),
        discovery=DiscoverySettings(interval_seconds=1.0, roots=[StorageRoot(uri=str(lake))], leases=leases),
    )
    beating = threading.Thread(target=other_job)
    beating.start()
    try:
        with running_job(spark, settings) as (query, handler):
            wait_for(lambda: len(handler.status) == 2 and len(other.held) == 2, "the tables shared two and two")
            mine = set(handler.status)
            assert mine.isdisjoint(other.held)
            for batch in range(1, 4):
                for index, table in enumerate(tables):
                    appended[table].append(append_random(table, rng, batch))
                    version = DeltaTable(str(table)).version()
                    send(
                        broker.bootstrap,
                        [commit_event_json(str(table), version, "WRITE", None).encode()],
                        index % 2,
                        topic,
                    )
                query.processAllAvailable()
            newest = {uri: DeltaTable(uri).version() for uri in mine}
            wait_for(lambda: all(handler.status[uri].version >= newest[uri] for uri in mine), "its tables decided")
            assert set(handler.status) == mine and set(handler.tracked) == mine
            assert sum(handler.status[uri].tasks for uri in mine) > 0
    finally:
        stop.set()
        beating.join()
    for table, batches in appended.items():
        assert row_multiset(DeltaTable(str(table)).to_pyarrow_table()) == row_multiset(pa.concat_tables(batches))
