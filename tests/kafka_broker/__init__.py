"""Apache Kafka itself for the tests: one KRaft broker/controller (4.4, from Maven Central: `./dev kafka` copies its
jars with the pom beside this file into .venv/kafka/jars) on loopback ports, with a plaintext listener and a
SASL_SSL one (SCRAM-SHA-512 users made when the storage is formatted, a certificate from a test CA, tls.py); and
what the Kafka tests do with it: send and read records, settings for a job driven by it."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from recluster.settings import ClusteringSettings, Settings, TableSettings
from recluster.settings_job import KafkaSettings, StreamSettings
from tests.helpers import wait_for
from tests.kafka_broker.tls import Certificates, make_certificates
from tests.spark_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("RECLUSTER_VENV", ROOT / ".venv"))
KAFKA_JARS = Path(os.environ.get("RECLUSTER_KAFKA_JARS", VENV / "kafka" / "jars"))
SPARK_KAFKA_JARS = Path(os.environ.get("RECLUSTER_SPARK_KAFKA_JARS", VENV / "spark-kafka" / "jars"))
"""Spark's own Kafka source and what it needs (`./dev spark-kafka`, tests/spark_kafka/pom.xml): on the classpath of
the tests' Spark session when present."""
COMMITS, METRICS = "commits", "metrics"
USER, PASSWORD = "recluster", "recluster-secret"
PR_SET_PDEATHSIG = 1
JVM = ["-Xms128m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
LOG4J = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
"""


def kafka_missing() -> str | None:
    """Why Apache Kafka cannot start here, or None."""
    if shutil.which("java") is None:
        return "no java on PATH: Apache Kafka needs a JRE (17+)"
    if not any(KAFKA_JARS.glob("kafka_2.13-*.jar")):
        return f"no Apache Kafka jars in {KAFKA_JARS} (run ./dev kafka)"
    return None


def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka source for the tests' Spark session (`spark.jars`), none when not fetched."""
    return sorted(SPARK_KAFKA_JARS.glob("*.jar"))


def spark_kafka_missing() -> str | None:
    """Why Spark's Kafka source cannot be tested here, or None."""
    if not any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-0-10_*.jar")):
        return f"no spark-sql-kafka jars in {SPARK_KAFKA_JARS} (run ./dev spark-kafka)"
    return None


def java(main_class: str, *args: str, log4j: Path | None = None) -> list[str]:
    """The command running `main_class` from Kafka's jars (the broker, its storage tool, its console consumer)."""
    logging = [f"-Dlog4j2.configurationFile={log4j}"] if log4j else []
    return ["java", *JVM, *logging, "-cp", str(KAFKA_JARS / "*"), main_class, *args]


class Broker:
    """One combined broker/controller whose log lives under `work`: restartable on the same ports, topics kept."""

    def __init__(self, work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.port, self.secure_port, self.controller_port = free_port(), free_port(), free_port()
        self.certificates: Certificates = make_certificates(work)
        self.log = work / "kafka.log"
        self.log4j = work / "log4j2.properties"
        self.log4j.write_text(LOG4J)
        self.properties = work / "server.properties"
        self.properties.write_text(self._properties())
        self.process: subprocess.Popen[bytes] | None = None
        # Kafka's own ids never start with "-": the storage tool would take one for an option (1 run in 64 failed)
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        scram = f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"
        tool = java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties))
        subprocess.run([*tool, "--add-scram", scram], check=True, capture_output=True, timeout=120)

    def _properties(self) -> str:
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},SASL_SSL://127.0.0.1:{self.secure_port}"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"{listeners},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.work / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.certificates.keystore),
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    @property
    def bootstrap(self) -> str:
        """The plaintext listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def secure_bootstrap(self) -> str:
        """The SASL_SSL listener (SCRAM-SHA-512 over TLS), as managed clusters serve."""
        return f"127.0.0.1:{self.secure_port}"

    def client_options(self, password: str = PASSWORD, cafile: Path | None = None) -> dict[str, str]:
        """kafka-python settings for the SASL_SSL listener (KafkaSettings.client_options)."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": USER,
            "sasl_plain_password": password,
            "ssl_cafile": str(cafile or self.certificates.ca),
        }

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                java("kafka.Kafka", str(self.properties), log4j=self.log4j),
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        admins: list[KafkaAdminClient] = []

        def connected() -> bool:
            # Reconnect within 0.25 s: kafka-python's default backoff grows to 30 s while the port still refuses,
            # and the first client's bootstrap then waited out its whole 30 s (every start took 30 s, not ~7).
            with contextlib.suppress(Exception):
                admins.append(
                    KafkaAdminClient(
                        bootstrap_servers=self.bootstrap, request_timeout_ms=3000, reconnect_backoff_max_ms=250
                    )
                )
            return bool(admins)

        wait_for(connected, f"Apache Kafka to accept connections (log: {self.log})", self.process, timeout=90)
        with closing(admins[0]) as admin:
            existing = set(admin.list_topics())
            missing = [NewTopic(t, 2, 1) for t in (COMMITS, METRICS) if t not in existing]
            if missing:
                admin.create_topics(missing)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): the log stays, a later start serves the same topics and offsets."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)
            self.process = None

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap)

    def create_topic(self, prefix: str, partitions: int = 1) -> str:
        """A fresh topic (its name: `prefix` and a unique suffix)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        with closing(self.admin()) as admin:
            admin.create_topics([NewTopic(name, partitions, 1)])
        return name


def _die_with_parent() -> None:
    """In the broker's process before Java starts: Linux stops it (SIGTERM) when the test run that started it dies,
    even by SIGKILL, so no broker outlives its tests."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def closing(admin: KafkaAdminClient) -> Iterator[KafkaAdminClient]:
    try:
        yield admin
    finally:
        admin.close()


def send(
    bootstrap: str,
    values: list[bytes],
    partition: int = 0,
    topic: str = COMMITS,
    options: Mapping[str, str] | None = None,
) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **dict(options or {}))
    for value in values:
        producer.send(topic, value=value, partition=partition)
    producer.flush(timeout=10)
    producer.close()


def read_records(
    bootstrap: str,
    topic: str,
    until: Callable[[list[bytes]], bool],
    what: str,
    options: Mapping[str, str] | None = None,
) -> list[bytes]:
    """The values on `topic` from its beginning, read from every partition without a consumer group, until
    `until(values)` holds (else the test fails naming `what`). No group: after a broker restart its group coordinator
    can take long to settle, which is not what these tests check (`console_consumer` reads as a group)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **dict(options or {}))
    values: list[bytes] = []

    def caught_up() -> bool:
        if not consumer.assignment():
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                return False
            assigned = [TopicPartition(topic, partition) for partition in partitions]
            consumer.assign(assigned)
            consumer.seek_to_beginning(*assigned)
        for records in consumer.poll(timeout_ms=200).values():
            values.extend(record.value for record in records)
        return until(values)

    try:
        wait_for(caught_up, what, timeout=60)
    except AssertionError as error:
        raise AssertionError(f"{error} ({len(values)} records read from {topic})") from None
    finally:
        consumer.close()
    return values


def console_consumer(
    broker: Broker, topic: str, group: str, *extra: str, secure: bool = False
) -> list[tuple[str, str]]:
    """(key, value) lines of Kafka's console consumer in `group`, from the beginning when the group has no offsets;
    `secure`: on the SASL_SSL listener, with the client.properties docs/kafka.md shows."""
    if secure:
        config = broker.work / f"client-{uuid.uuid4().hex[:8]}.properties"
        config.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{PASSWORD}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={broker.certificates.ca}\n"
        )
        extra = (*extra, "--consumer.config", str(config))
    command = java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        *("--bootstrap-server", broker.secure_bootstrap if secure else broker.bootstrap, "--topic", topic),
        *("--group", group, "--from-beginning", "--property", "print.key=true", "--property", "key.separator=\t"),
        *extra,
        log4j=broker.log4j,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in done.stdout.splitlines() if "\t" in line]
    return [(key, value) for key, _, value in (line.partition("\t") for line in lines)]


def decided_versions(values: list[bytes]) -> dict[str, list[int]]:
    """Per table, the versions of its metrics records in the order read: one record per micro-batch that decided on
    the table, so a version twice is a commit decided twice."""
    versions: dict[str, list[int]] = {}
    for value in values:
        record = json.loads(value)
        versions.setdefault(record["table"], []).append(int(record["version"]))
    return versions


def job_settings(
    broker: Broker,
    table: Path,
    checkpoint: Path,
    commits_topic: str = COMMITS,
    metrics_topic: str | None = None,
    *,
    secure: bool = False,
) -> Settings:
    """The streaming job on `table`, driven by commit events on `commits_topic` from its earliest offset; `secure`:
    through the SASL_SSL listener, from the client settings alone."""
    return Settings(
        clustering=ClusteringSettings(target_rows=5_000),
        stream=StreamSettings(source="kafka", checkpoint_location=str(checkpoint), trigger_interval_seconds=0.2),
        kafka=KafkaSettings(
            bootstrap_servers=broker.secure_bootstrap if secure else broker.bootstrap,
            commits_topic=commits_topic,
            metrics_topic=metrics_topic,
            starting_offsets="earliest",
            client_options=broker.client_options() if secure else {},
        ),
        tables=[TableSettings(uri=str(table))],
    )
