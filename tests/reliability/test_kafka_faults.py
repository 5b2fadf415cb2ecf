"""Scenario 4, what tests/test_kafka.py does not cover (it stops and restarts the broker and sends malformed and
duplicate events): the commit-events topic is deleted under the running job, writers keep writing, the topic comes
back empty; the job survives, catches up from the Delta log, and no row is lost or duplicated."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from jobs.autorecluster import start_job, stop_gracefully
from recluster.delta.log_writer import set_table_properties
from recluster.engine.publish import commit_event_json
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    ClusteringSettings,
    KafkaSettings,
    Settings,
    StreamSettings,
    TableSettings,
)
from tests.reliability.checks import assert_intact

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_commits_topic_deleted_and_recreated_under_the_job(tmp_path, spark, broker):
    topic = f"deleted-{time.time_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    table = tmp_path / "events"
    rng = np.random.default_rng(41)
    appended: list[pa.Table] = []

    def append(announce: bool = True) -> None:
        data = pa.table({"k": pa.array(rng.integers(0, 10**9, 2_000), pa.int64()), "batch": [len(appended)] * 2_000})
        write_deltalake(str(table), data, mode="append")
        appended.append(data)
        if announce:
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
            event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None).encode()
            producer.send(topic, value=event, partition=0)
            producer.flush(timeout=10)
            producer.close()

    append(announce=False)
    set_table_properties(table, {CLUSTER_BY_PROPERTY: "k"})
    settings = Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(source="kafka", checkpoint_location=str(tmp_path / "cp"), trigger_interval_seconds=0.2),
        kafka=KafkaSettings(bootstrap_servers=broker.bootstrap, commits_topic=topic, starting_offsets="earliest"),
        tables=[TableSettings(uri=str(table))],
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for _ in range(4):
            append()
            query.processAllAvailable()
        before = handler.status[str(table)]
        assert before.tasks > 0, before

        admin.delete_topics([topic])
        for _ in range(3):  # writers keep writing while the topic is gone
            append(announce=False)
        time.sleep(2)  # triggers run against the missing topic: the query must survive them
        assert query.isActive, query.exception()
        admin.create_topics([NewTopic(topic, 1, 1)])  # back, empty: its offsets restart below the checkpoint's
        for _ in range(3):
            append()
            query.processAllAvailable()
        after = handler.status[str(table)]
    finally:
        stop_gracefully(query, handler)
        admin.close()
    assert query.exception() is None
    assert after.tasks > before.tasks, after  # reclustering went on, driven by the recreated topic
    assert after.version >= DeltaTable(str(table)).version() - 2  # caught up, the unannounced appends included
    assert after.failures == 0 and after.error is None
    assert_intact(table, pa.concat_tables(appended))
