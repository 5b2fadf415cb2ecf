"""Scenario 4, what tests/test_kafka.py does not cover (it stops and restarts the broker and sends malformed and
duplicate events): the commit-events topic is deleted under the running job, writers keep writing, the topic comes
back empty; the job survives, catches up from the Delta log, and no row is lost or duplicated."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kafka.admin import KafkaAdminClient, NewTopic

from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.publish import commit_event_json
from tests.helpers import append_random, wait_for
from tests.kafka_broker import job_settings, send
from tests.reliability.checks import assert_intact

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_commits_topic_deleted_and_recreated_under_the_job(tmp_path, spark, broker, triggers):
    topic = f"deleted-{time.time_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    table = tmp_path / "events"
    rng = np.random.default_rng(41)
    appended: list[pa.Table] = []

    def append(announce: bool = True) -> None:
        appended.append(append_random(table, rng, len(appended)))
        if announce:
            event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None).encode()
            send(broker.bootstrap, [event], topic=topic)

    append(announce=False)
    settings = job_settings(broker, table, tmp_path / "cp", commits_topic=topic)
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for _ in range(4):
            append()
            query.processAllAvailable()
        before = handler.status[str(table)]
        assert before.tasks > 0, before

        admin.delete_topics([topic])
        deleted = datetime.now(UTC)
        for _ in range(3):  # writers keep writing while the topic is gone
            append(announce=False)
        # the query must survive the triggers it runs against the missing topic
        wait_for(
            lambda: not query.isActive or sum(start >= deleted for start in triggers) >= 2,
            "two triggers run against the missing topic (or the query's end)",
        )
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
