"""Spark's own Kafka source (`kafka.reader: spark`, spark-sql-kafka-0-10 from `./dev spark-kafka`) against Apache Kafka
itself: the same commit events make the same decisions as through recluster's Python source, a restart from the
checkpoint neither skips nor repeats an event, and without the connector the job refuses to start in one line."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import triggers.spark_kafka
from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.job_tables import JobTables
from recluster.engine.publish import MetricsRecord, commit_event_json
from recluster.settings import Settings, SettingsError
from tests.helpers import append_random, wait_for
from tests.kafka_broker import Broker, job_settings, read_records, send, spark_kafka_missing
from tests.reliability.checks import assert_intact
from triggers.spark_kafka import java_client_options, source_options

pytestmark = [pytest.mark.spark, pytest.mark.slow]

READERS = ("python", "spark")
PARTITIONS = 2


@pytest.fixture(scope="module")
def connector(spark: Any) -> None:
    """Spark's Kafka source on the session's classpath (tests/conftest.py puts its jars there when fetched)."""
    missing = spark_kafka_missing() or triggers.spark_kafka.connector_missing(spark)
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {missing}")
        pytest.skip(missing)


@dataclass
class Run:
    """One job's run over the scenario: the metrics records it published, the events its handler was given
    (partition, offset), the events published, and what the table holds."""

    records: list[MetricsRecord]
    seen: list[tuple[int, int]]
    published: list[tuple[int, int]]
    table: Path
    appended: list[pa.Table]


def run_scenario(spark: Any, broker: Broker, root: Path, reader: str) -> Run:
    """The same writes and events for either reader: three batches of events (one with malformed events and a stale
    duplicate), the job stopped, two more batches announced while it is down, the job restarted on its checkpoint,
    two more batches. Spark's source reads through the SASL_SSL listener (client settings mapped to Java's names)."""
    table = root / reader / "events"
    commits, metrics = broker.create_topic(f"{reader}-commits", PARTITIONS), broker.create_topic(f"{reader}-metrics")
    rng = np.random.default_rng(61)
    appended: list[pa.Table] = []
    published: list[tuple[int, int]] = []
    sent = [0] * PARTITIONS

    def append_and_announce(batch: int) -> None:
        appended.append(append_random(table, rng, batch))
        event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", int(time.time() * 1000))
        stale = commit_event_json(str(table), 1, "WRITE", None).encode()
        extra = [b"{not json", b'{"table": "", "version": -3}', stale]
        values = [*(extra if batch == 2 else []), event.encode()]
        send(broker.bootstrap, values, partition=batch % PARTITIONS, topic=commits)
        published.extend((batch % PARTITIONS, sent[batch % PARTITIONS] + i) for i in range(len(values)))
        sent[batch % PARTITIONS] += len(values)

    append_and_announce(0)
    base = job_settings(broker, table, root / reader / "checkpoint", commits, metrics, secure=reader == "spark")
    settings = base.model_copy(update={"kafka": base.kafka.model_copy(update={"reader": reader})})
    seen: list[tuple[int, int]] = []

    def settle(query: Any) -> None:
        """Until the job was given every event sent and its batch is done (`processAllAvailable` alone can return
        while a trigger that fetched its offsets before the event was sent finishes: then two batches of events
        would be decided in one micro-batch, and the readers' decisions compared at different versions)."""
        wait_for(lambda: len(seen) >= len(published), f"the {reader} reader to hand the job every event sent")
        query.processAllAvailable()

    def run(batches: range) -> int:
        query, handler = start_job(spark, settings, settings.tables)
        try:
            handler.loaded.wait(timeout=60)
            settle(query)
            for batch in batches:
                append_and_announce(batch)
                settle(query)
            assert query.exception() is None
            return handler.status[str(table)].version
        finally:
            stop_gracefully(query, handler)

    events = JobTables.commits_for_events

    def seeing(tables: JobTables, rows: list[dict[str, Any]]) -> Any:
        seen.extend((row["kafka_partition"], row["kafka_offset"]) for row in rows)
        return events(tables, rows)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JobTables, "commits_for_events", seeing)
        run(range(1, 4))
        append_and_announce(4)  # while the job is down
        append_and_announce(5)
        last = run(range(6, 8))
    values = read_records(
        broker.bootstrap,
        metrics,
        lambda values: any(MetricsRecord.model_validate_json(v).version == last for v in values),
        f"the {reader} reader's metrics record of version {last}",
    )
    records = [MetricsRecord.model_validate_json(v) for v in values]
    return Run(records, seen, published, table, appended)


@pytest.fixture(scope="module")
def runs(
    spark: Any, broker: Broker, connector: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Run]]:
    root = tmp_path_factory.mktemp("spark-kafka")
    yield {reader: run_scenario(spark, broker, root, reader) for reader in READERS}


def decisions(run: Run) -> list[tuple[Any, ...]]:
    """Each metrics record in order: the version decided at and what was decided (the merges, their reasons, what is
    left, the malformed events skipped, the depth after). A restarted job first publishes its status as it loads the
    table (reason `loaded`, no merge), then decides on the events."""
    return [
        (
            r.version,
            r.reasons,
            r.actions.tasks,
            r.actions.files_removed,
            r.actions.files_added,
            r.pending,
            r.skipped_events,
            r.table_metrics,
        )
        for r in run.records
    ]


def test_spark_source_makes_the_python_sources_decisions(runs):
    python, spark = decisions(runs["python"]), decisions(runs["spark"])
    assert sum(decision[2] for decision in python) > 0  # the scenario made the job recluster
    assert [decision[6] for decision in python].count(2) == 1  # the two malformed events counted, in one batch
    assert spark == python
    for run in runs.values():
        assert_intact(run.table, pa.concat_tables(run.appended))


@pytest.mark.parametrize("reader", READERS)
def test_restart_from_the_checkpoint_neither_skips_nor_repeats_an_event(runs, reader):
    run = runs[reader]
    assert sorted(run.seen) == sorted(run.published), "every event given to the job exactly once"
    assert len(set(run.published)) == len(run.published) == 11
    versions = [r.version for r in run.records if r.reasons != ["loaded"]]
    assert versions == sorted(set(versions)), f"a version decided twice across the restart: {versions}"
    assert versions[-1] >= DeltaTable(str(run.table)).version() - 2  # caught up, the events sent while down too


def test_without_the_connector_the_job_refuses_to_start_in_one_line(tmp_path, spark, broker, monkeypatch):
    monkeypatch.setattr(triggers.spark_kafka, "CONNECTOR_CLASS", "org.example.NoSuchKafkaSourceProvider")
    append_random(tmp_path / "events", np.random.default_rng(67), 0)
    base = job_settings(broker, tmp_path / "events", tmp_path / "checkpoint")
    settings = base.model_copy(update={"kafka": base.kafka.model_copy(update={"reader": "spark"})})
    with pytest.raises(SettingsError) as refused:  # recluster watch: `recluster: error: ...`, exit code 2
        start_job(spark, settings, settings.tables)
    message = str(refused.value)
    assert "\n" not in message and "org.example.NoSuchKafkaSourceProvider" in message
    assert f"spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version}" in message
    assert not (tmp_path / "checkpoint").exists()


def test_client_options_in_the_java_clients_names(broker):
    python = broker.client_options()
    assert java_client_options({**python, "ssl_check_hostname": "false", "client_id": "recluster"}) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="recluster" '
            'password="recluster-secret";'
        ),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": python["ssl_cafile"],
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "recluster",
    }
    plain = java_client_options({"sasl_mechanism": "PLAIN", "sasl_plain_username": "key", "sasl_plain_password": 'a"b'})
    assert plain["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="key" password="a\\"b";'
    )
    options = source_options(Settings(kafka={"commits_topic": "c", "max_events_per_batch": 7}).kafka)
    assert options["subscribe"] == "c" and options["maxOffsetsPerTrigger"] == "7"
    assert options["failOnDataLoss"] == "false"
