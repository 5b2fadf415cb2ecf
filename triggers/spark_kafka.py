"""Commit events read by Spark's own Kafka source (`kafka.reader: spark`), as rows of the Python source's schema.

`spark.readStream.format("kafka")` subscribes to the commits topic with the same settings as triggers/kafka_commits.py
(bootstrap servers, starting offsets, events per micro-batch; `kafka.client_options` in the Java client's names) and
keeps its offsets in the same Spark checkpoint. Each record's value is parsed by the Python source's own parser
(`event_row`) in a `mapInArrow` step, so the job's `foreachBatch` handler gets the same rows (`SCHEMA`) from either
source and decides the same. The connector (`spark-sql-kafka-0-10`) is not a dependency of recluster: it is on the
classpath only when the user puts it there (`spark.jars.packages` or `spark.jars`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from recluster.settings import SettingsError
from recluster.settings_job import KafkaSettings
from triggers.kafka_commits import SCHEMA, event_row

CONNECTOR_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
"""The class Spark's `kafka` format is served by (spark-sql-kafka-0-10)."""

ARROW_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("version", pa.int64()),
        ("operation", pa.string()),
        ("timestamp", pa.int64()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        ("error", pa.string()),
    ]
)
"""`SCHEMA` in Arrow's types."""

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java client's login module of each SASL mechanism a user name and password log in with."""


def connector_missing(spark: Any) -> str | None:
    """Why Spark's Kafka source cannot be used in this session (one line), or None when its class loads."""
    if spark._jvm.org.apache.spark.util.Utils.classIsLoadable(CONNECTOR_CLASS):
        return None
    return (
        f"kafka.reader is spark, but Spark's Kafka source ({CONNECTOR_CLASS}) is not on the classpath: set spark.conf "
        f"spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version} (or its jars in "
        "spark.jars), or kafka.reader: python"
    )


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def java_client_options(options: Mapping[str, str]) -> dict[str, str]:
    """kafka-python client settings (`kafka.client_options`) in the Java client's names: a user name and password
    become `sasl.jaas.config`, `ssl_cafile` a PEM truststore, `ssl_certfile`/`ssl_keyfile` a PEM keystore,
    `ssl_check_hostname: false` no endpoint identification; every other name has its underscores turned into dots
    (`security_protocol` -> `security.protocol`, `sasl_mechanism` -> `sasl.mechanism`, `client_id` -> `client.id`)."""
    rest = dict(options)
    user, password = rest.pop("sasl_plain_username", None), rest.pop("sasl_plain_password", None)
    cafile, certfile, keyfile = (rest.pop(f"ssl_{name}", None) for name in ("cafile", "certfile", "keyfile"))
    key_password, check_hostname = rest.pop("ssl_password", None), rest.pop("ssl_check_hostname", None)
    java = {name.replace("_", "."): str(value) for name, value in rest.items()}
    if user is not None or password is not None:
        mechanism = java.get("sasl.mechanism", "PLAIN").upper()
        module = LOGIN_MODULES.get(mechanism)
        if module is None:
            raise SettingsError(f"kafka.reader spark: no login module for SASL mechanism {mechanism!r} with a password")
        java["sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quoted(user or "")}" password="{_jaas_quoted(password or "")}";'
        )
    if cafile:
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": cafile})
    if certfile and keyfile:  # the Java client reads a PEM keystore from one file: hand it both PEMs as values
        java.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": Path(certfile).read_text(encoding="utf-8"),
                "ssl.keystore.key": Path(keyfile).read_text(encoding="utf-8"),
            }
        )
    elif certfile:  # the certificate and its key in one file
        java.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": certfile})
    if key_password:
        java["ssl.key.password"] = key_password
    if check_hostname is not None and str(check_hostname).lower() == "false":
        java["ssl.endpoint.identification.algorithm"] = ""
    return java


def source_options(kafka: KafkaSettings) -> dict[str, str]:
    """The options of Spark's Kafka source for the commits topic. An offset the broker no longer has is no failure
    (`failOnDataLoss` false): as with the Python source, what the broker still has is read and the Delta log fills
    in the rest."""
    return {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": kafka.commits_topic,
        "startingOffsets": kafka.starting_offsets,
        "maxOffsetsPerTrigger": str(kafka.max_events_per_batch),
        "failOnDataLoss": "false",
        **{f"kafka.{name}": value for name, value in java_client_options(kafka.client_options).items()},
    }


def event_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Spark's Kafka records (value, partition, offset) to rows of `SCHEMA` (runs in Spark's Python workers)."""
    for batch in batches:
        records = zip(
            batch.column("value").to_pylist(),
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            strict=True,
        )
        rows = [dict(zip(ARROW_SCHEMA.names, event_row(*record), strict=True)) for record in records]
        yield pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)


def commit_events(spark: Any, kafka: KafkaSettings) -> Any:
    """The streaming DataFrame of commit events (`SCHEMA`) read by Spark's Kafka source; a one-line SettingsError
    when the connector is not on the classpath."""
    missing = connector_missing(spark)
    if missing is not None:
        raise SettingsError(missing)
    reader = spark.readStream.format("kafka").options(**source_options(kafka))
    return reader.load().select("value", "partition", "offset").mapInArrow(event_batches, SCHEMA)
