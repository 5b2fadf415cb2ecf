"""Kafka as managed clusters serve it: the job on the broker's SASL_SSL listener (SCRAM-SHA-512 over TLS, the broker's
certificate from a test CA), configured by client settings alone; a wrong password or an untrusted certificate is one
line from `recluster watch`, before anything starts."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.publish import MetricsRecord, commit_event_json
from tests.helpers import append_random, run_cli
from tests.kafka_broker import console_consumer, job_settings, read_records, send
from tests.reliability.checks import assert_intact

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_job_consumes_and_publishes_through_sasl_ssl_from_settings_alone(tmp_path, spark, broker):
    commits, metrics = broker.create_topic("secure-commits"), broker.create_topic("secure-metrics")
    table = tmp_path / "events"
    rng = np.random.default_rng(53)
    appended: list[pa.Table] = []
    options = broker.client_options()

    def append_and_announce() -> None:
        appended.append(append_random(table, rng, len(appended)))
        event = commit_event_json(str(table), DeltaTable(str(table)).version(), "WRITE", int(time.time() * 1000))
        send(broker.secure_bootstrap, [event.encode()], topic=commits, options=options)

    append_and_announce()
    settings = job_settings(broker, table, tmp_path / "cp", commits, metrics, secure=True)
    assert settings.kafka.client_options["security_protocol"] == "SASL_SSL"
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for _ in range(4):
            append_and_announce()
            query.processAllAvailable()
        status = handler.status[str(table)]
    finally:
        stop_gracefully(query, handler)
    assert status.tasks > 0 and status.failures == 0, status
    assert status.version >= DeltaTable(str(table)).version() - 2
    assert_intact(table, pa.concat_tables(appended))
    # the job's records over SASL_SSL (every batch publishes one; the last may still be buffered when the producer
    # missed its 5 s send timeout on a busy machine: this checks the secure path, not the stop's flush)
    values = read_records(broker.secure_bootstrap, metrics, bool, "a metrics record over SASL_SSL", options)
    records = [MetricsRecord.model_validate_json(v) for v in values]
    assert {r.table for r in records} == {str(table)} and max(r.version for r in records) <= status.version
    users = console_consumer(broker, metrics, "secure-users", "--max-messages", str(len(values)), secure=True)
    assert sorted(value for _, value in users) == sorted(v.decode() for v in values)
    assert {key for key, _ in users} == {str(table)}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong-password", "SASL SCRAM-SHA-512 login as 'recluster' refused by the broker at"),
        ("untrusted-certificate", "is not trusted by ssl_cafile"),
    ],
)
def test_watch_refuses_a_wrong_password_or_an_untrusted_certificate_in_one_line(tmp_path, broker, case, expected):
    table = tmp_path / "events"
    append_random(table, np.random.default_rng(59), 0)
    version = DeltaTable(str(table)).version()
    options = broker.client_options(cafile=broker.certificates.other_ca if case == "untrusted-certificate" else None)
    del options["sasl_plain_password"]  # from the environment, as docs/kafka.md advises
    password = "not-the-password" if case == "wrong-password" else broker.client_options()["sasl_plain_password"]
    config = tmp_path / "recluster.yaml"
    kafka = {"bootstrap_servers": broker.secure_bootstrap, "commits_topic": "commits", "client_options": options}
    config.write_text(yaml.safe_dump({"kafka": kafka}))
    checkpoint = tmp_path / "checkpoint"
    done = run_cli(
        *("watch", "--config", config, "--source", "kafka", "--table", table, "--checkpoint", checkpoint),
        *("--seconds", "5"),
        env={"RECLUSTER_KAFKA__CLIENT_OPTIONS__SASL_PLAIN_PASSWORD": password},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert lines[0].startswith("recluster: error: kafka: ")
    assert not checkpoint.exists()  # nothing started: no checkpoint, no history, no commit to the table
    assert DeltaTable(str(table)).version() == version
