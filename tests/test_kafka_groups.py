"""The metrics topic read as users read it: by a kafka-python consumer group and by Kafka's own console consumer (from
the broker's jars), each in its group; records keyed by table, in order per table, each valid against the JSON
Schema `recluster metrics-schema` prints."""

from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from deltalake import DeltaTable
from jsonschema import Draft202012Validator
from kafka import KafkaConsumer

from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.publish import commit_event_json
from recluster.settings import TableSettings
from tests.helpers import append_random, run_cli, wait_for
from tests.kafka_broker import console_consumer, job_settings, send

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_metrics_topic_read_by_consumer_groups_keyed_and_ordered_per_table(tmp_path, spark, broker):
    commits, metrics = broker.create_topic("group-commits", 2), broker.create_topic("group-metrics", 2)
    tables = [tmp_path / "orders", tmp_path / "clicks"]
    rng = np.random.default_rng(67)
    for table in tables:
        append_random(table, rng, 0)
    settings = job_settings(broker, tables[0], tmp_path / "cp", commits, metrics)
    settings = settings.model_copy(update={"tables": [TableSettings(uri=str(t)) for t in tables]})
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for batch in range(1, 5):
            for index, table in enumerate(tables):
                append_random(table, rng, batch)
                event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", None)
                send(broker.bootstrap, [event.encode()], partition=index, topic=commits)
            query.processAllAvailable()
        last = {str(t): handler.status[str(t)].version for t in tables}
    finally:
        stop_gracefully(query, handler)

    group = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id="dashboards",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    # the topic's partitions known before the group is joined: joined without them, the assignor gave this member
    # no partition ("No partition metadata"), and it read nothing until the wait timed out (a full run, 2026-11-29)
    wait_for(lambda: group.partitions_for_topic(metrics), f"the partitions of {metrics}")
    group.subscribe([metrics])
    per_partition: dict[int, list[tuple[str, dict[str, object]]]] = defaultdict(list)

    def reached_last_versions() -> bool:
        for tp, records in group.poll(timeout_ms=200).items():
            per_partition[tp.partition].extend((r.key.decode(), json.loads(r.value)) for r in records)
        seen = {(value["table"], value["version"]) for records in per_partition.values() for _, value in records}
        return all((table, version) in seen for table, version in last.items())

    try:
        wait_for(reached_last_versions, f"the metrics records of versions {last} in consumer group dashboards")
        group.commit()
    finally:
        group.close()

    schema = json.loads(run_cli("metrics-schema", check=True).stdout)
    validator = Draft202012Validator(schema)
    by_table: dict[str, set[int]] = defaultdict(set)
    for partition, records in per_partition.items():
        for key, value in records:
            validator.validate(value)
            assert key == value["table"], (key, value["table"])
            by_table[key].add(partition)
        for table in last:  # in offset order, a table's records go forward in version and time
            mine = [v for k, v in records if k == table]
            versions = [int(str(v["version"])) for v in mine]
            assert versions == sorted(set(versions)), f"{table}: versions {versions} out of order or repeated"
            assert [v["time"] for v in mine] == sorted(str(v["time"]) for v in mine)
    assert set(by_table) == set(last) and all(len(p) == 1 for p in by_table.values()), by_table  # one partition each

    total = sum(len(records) for records in per_partition.values())
    users = console_consumer(broker, metrics, "console-users", "--max-messages", str(total))
    expected = sorted((k, json.dumps(v, sort_keys=True)) for r in per_partition.values() for k, v in r)
    assert sorted((k, json.dumps(json.loads(v), sort_keys=True)) for k, v in users) == expected
    # Each group has its own committed position: both have read everything, a rerun of either reads nothing new
    # (the two reruns at once: each is a JVM that waits out its 3 s).
    with ThreadPoolExecutor(max_workers=2) as pool:
        reruns = pool.map(
            lambda group: console_consumer(broker, metrics, group, "--timeout-ms", "3000"),
            ["console-users", "dashboards"],
        )
        assert list(reruns) == [[], []]
