"""Scenario 4 on Apache Kafka, what tests/test_kafka.py does not cover (it restarts the broker mid-stream and sends
malformed and duplicate events): the commits topic deleted under the running job and recreated empty; partitions
added to it, the new ones alone announcing commits; a consumer group on the metrics topic rebalanced as members join
and leave. The job goes on, every table's rows are exact, and no commit is decided twice."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer
from kafka.admin import NewPartitions, NewTopic

from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.publish import commit_event_json
from recluster.settings import TableSettings
from tests.helpers import append_random, wait_for
from tests.kafka_broker import Broker, closing, decided_versions, job_settings, read_records, send
from tests.reliability.checks import assert_intact

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def assert_decided_once(broker: Broker, metrics: str, last: dict[str, int]) -> None:
    """Each table's metrics records, up to the version the job reached last, go forward: no version twice."""
    values = read_records(
        broker.bootstrap,
        metrics,
        lambda values: all(version in decided_versions(values).get(t, []) for t, version in last.items()),
        f"the metrics records of versions {last}",
    )
    for table, versions in decided_versions(values).items():
        assert versions == sorted(set(versions)), f"{table}: a version decided twice or out of order: {versions}"


def test_commits_topic_deleted_and_recreated_under_the_job(tmp_path, spark, broker, triggers):
    topic, metrics = broker.create_topic("deleted"), broker.create_topic("deleted-metrics")
    table = tmp_path / "events"
    rng = np.random.default_rng(41)
    appended: list[pa.Table] = []

    def append(announce: bool = True) -> None:
        appended.append(append_random(table, rng, len(appended)))
        if announce:
            event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None).encode()
            send(broker.bootstrap, [event], topic=topic)

    append(announce=False)
    settings = job_settings(broker, table, tmp_path / "cp", commits_topic=topic, metrics_topic=metrics)
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for _ in range(4):
            append()
            query.processAllAvailable()
        before = handler.status[str(table)]
        assert before.tasks > 0, before

        with closing(broker.admin()) as admin:
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

        def recreated() -> bool:  # the deletion completes in the background: until then the name is taken
            try:
                with closing(broker.admin()) as admin:
                    admin.create_topics([NewTopic(topic, 1, 1)])
            except Exception:
                return False
            return True

        wait_for(recreated, f"topic {topic} recreated")  # back, empty: its offsets restart below the checkpoint's
        for _ in range(3):
            append()
            query.processAllAvailable()
        after = handler.status[str(table)]
    finally:
        stop_gracefully(query, handler)
    assert query.exception() is None
    assert after.tasks > before.tasks, after  # reclustering went on, driven by the recreated topic
    assert after.version >= DeltaTable(str(table)).version() - 2  # caught up, the unannounced appends included
    assert after.failures == 0 and after.error is None
    assert_intact(table, pa.concat_tables(appended))
    assert_decided_once(broker, metrics, {str(table): after.version})


def group_member(broker: Broker, topic: str) -> KafkaConsumer:
    return KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=f"watchers-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )


def test_partitions_added_and_a_metrics_group_rebalanced_under_the_job(tmp_path, spark, broker):
    commits, metrics = broker.create_topic("grown"), broker.create_topic("rebalanced-metrics", 2)
    tables = [tmp_path / "orders", tmp_path / "clicks"]
    rng = np.random.default_rng(43)
    appended: dict[Path, list[pa.Table]] = {t: [append_random(t, rng, 0)] for t in tables}
    consumed: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value, over every member of the group
    twice: list[tuple[int, int]] = []

    def drain(member: KafkaConsumer) -> None:
        for tp, records in member.poll(timeout_ms=300).items():
            for record in records:
                if (tp.partition, record.offset) in consumed:
                    twice.append((tp.partition, record.offset))
                consumed[(tp.partition, record.offset)] = record.value
        member.commit()  # before the next poll, in which a rebalance may take partitions away

    def append_and_announce(batch: int, partitions: int) -> None:
        for index, table in enumerate(tables):
            appended[table].append(append_random(table, rng, batch))
            event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None).encode()
            send(broker.bootstrap, [event], topic=commits, partition=(partitions - 1 - index) % partitions)

    settings = job_settings(broker, tables[0], tmp_path / "cp", commits, metrics)
    settings = settings.model_copy(update={"tables": [TableSettings(uri=str(t)) for t in tables]})
    query, handler = start_job(spark, settings, settings.tables)
    first = group_member(broker, metrics)
    second: KafkaConsumer | None = None
    try:
        for batch in range(1, 3):
            append_and_announce(batch, partitions=1)
            query.processAllAvailable()
            drain(first)
        before = {t: handler.status[str(t)].tasks for t in tables}
        with closing(broker.admin()) as admin:
            admin.create_partitions({commits: NewPartitions(3)})
        second = group_member(broker, metrics)  # joins: the group rebalances while the job runs
        members = (first, second)
        wait_for(
            lambda: [drain(m) for m in members] and all(len(m.assignment()) == 1 for m in members),
            "the group to split the metrics topic's two partitions between its two members",
        )
        for batch in range(3, 7):
            if batch == 5:
                first.close()  # leaves: the group rebalances again, `second` takes every partition
            append_and_announce(batch, partitions=3)  # only the new partitions announce from here on
            deadline = time.monotonic() + 20
            target = {t: DeltaTable(str(t)).version() for t in tables}
            while time.monotonic() < deadline and any(handler.status[str(t)].version < target[t] for t in tables):
                query.processAllAvailable()
                for member in members if batch < 5 else (second,):
                    drain(member)
        last = {str(t): handler.status[str(t)].version for t in tables}
        caught_up = {str(t): handler.status[str(t)].version >= DeltaTable(str(t)).version() - 2 for t in tables}
        after = {t: handler.status[str(t)] for t in tables}
    finally:
        stop_gracefully(query, handler)
        first.close()
    assert second is not None
    try:
        wait_for(
            lambda: (
                drain(second) is None
                and all(version in decided_versions(list(consumed.values())).get(t, []) for t, version in last.items())
            ),
            f"the group's last member to read the metrics records of versions {last}",
        )
        assert len(second.assignment()) == 2  # the other member left: this one took its partition
    finally:
        second.close()
    assert all(caught_up.values()), (caught_up, last)  # the new partitions' events reached the job
    for table in tables:
        assert after[table].tasks > before[table] and after[table].failures == 0, after[table]
        assert_intact(table, pa.concat_tables(appended[table]))
    assert not twice, f"records read twice across the group's rebalances: {twice}"
    for table, versions in decided_versions([consumed[k] for k in sorted(consumed)]).items():
        assert versions == sorted(set(versions)), f"{table}: a version decided twice: {versions}"
