"""Commit-to-decision latency of the job driven by commit events on Apache Kafka over SASL_SSL against the same job
polling the Delta log: is a managed-cluster setup as quick to react?

Run from the project root: `python -m bench.kafka_latency_bench [--quick]` (Apache Kafka's jars: `./dev kafka`).

One Apache Kafka broker (tests/kafka_broker: KRaft, SCRAM-SHA-512 over TLS with a test CA) on loopback; one Spark
session (local[2]). For each source in turn, on a fresh demo table: the job starts (1 s trigger, target_rows=100,000)
and decides on one untimed batch (its cold start); then 30 (quick: 15) batches of 20,000 rows arrive, one every
1.5 s. With Kafka the writer announces each commit on the commits topic through the SASL_SSL listener right after it
(as `recluster publish-commits` or a writer hook would). Latency = time the handler published a status for a version
>= the append's minus the time `write_deltalake` returned. Goal: Kafka's p95 within 1.2x the Delta log's.

Prints a markdown table and writes JSON to bench/results/kafka-latency[-quick]-<YYYY-MM-DD>.json.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from deltalake import DeltaTable
from kafka import KafkaProducer

from bench.common import log, percentile, publish, quick_cli, start_spark
from bench.stream_bench import INTERVAL_SECONDS, ROWS, TRIGGER_SECONDS, warm_up
from docgen.figures import ratio_row
from jobs.autorecluster import start_job, stop_gracefully
from recluster.engine.demo import append_demo_batch
from recluster.engine.job_state import TableStatus
from recluster.engine.job_status import follow_statuses
from recluster.engine.publish import commit_event_json
from recluster.settings import ClusteringSettings, Settings, TableSettings
from recluster.settings_job import KafkaSettings, StreamSettings
from tests.kafka_broker import Broker, kafka_missing

GOAL_RATIO = 1.2


class Decisions:
    """The statuses the job's handler publishes, with when; waits for a version."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []
        self._published = threading.Condition()

    def __call__(self, status: TableStatus) -> None:
        with self._published:
            self.seen.append((time.monotonic(), status.version))
            self._published.notify_all()

    def wait_for(self, version: int, timeout: float) -> bool:
        with self._published:
            return self._published.wait_for(lambda: any(v >= version for _, v in self.seen), timeout)

    def first_at_or_after(self, version: int) -> float | None:
        with self._published:
            return next((t for t, v in self.seen if v >= version), None)


def run_source(
    spark: Any, work: Path, settings: Settings, batches: int, announce: Callable[[str, int], None] | None
) -> dict[str, Any]:
    """The job on a fresh table under a steady writer; `announce(table, version)` after each append (Kafka)."""
    table = Path(settings.tables[0].uri)
    rng = np.random.default_rng(20261126)
    append_demo_batch(table, rng, ROWS, 0)
    if announce is not None:
        announce(str(table), DeltaTable(str(table)).version())
    decisions = Decisions()
    query, handler = start_job(spark, settings, settings.tables)
    follow_statuses(handler.board, decisions)
    appended: list[tuple[int, float]] = []
    try:
        initial, deadline = DeltaTable(str(table)).version(), time.monotonic() + 120
        while (status := handler.status.get(str(table))) is None or status.version < initial:  # loaded, caught up
            if time.monotonic() > deadline:
                raise RuntimeError(f"the job did not reach version {initial} within 120 s: {query.lastProgress}")
            time.sleep(0.1)
        append_demo_batch(table, rng, ROWS, 1)  # untimed: the job's first merges pay its cold start, in both runs
        warm = DeltaTable(str(table)).version()
        if announce is not None:
            announce(str(table), warm)
        if not decisions.wait_for(warm, 120):
            raise RuntimeError(f"the job decided nothing on version {warm} within 120 s: {query.lastProgress}")
        first = time.monotonic()
        for batch in range(2, batches + 2):
            delay = first + (batch - 1) * INTERVAL_SECONDS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            append_demo_batch(table, rng, ROWS, batch)
            done = time.monotonic()
            version = DeltaTable(str(table)).version()
            if announce is not None:
                announce(str(table), version)
            appended.append((version, done))
        caught_up = decisions.wait_for(appended[-1][0], 60)
    finally:
        stop_gracefully(query, handler)
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    latencies = [
        None if (seen := decisions.first_at_or_after(version)) is None else seen - done for version, done in appended
    ]
    measured = [x for x in latencies if x is not None]
    return {
        "caught_up": caught_up,
        "latencies_seconds": latencies,
        "missed": sum(x is None for x in latencies),
        "latency_median_seconds": float(np.median(measured)),
        "latency_p95_seconds": percentile(measured, 95),
        "latency_max_seconds": max(measured),
    }


def run(work: Path, batches: int) -> dict[str, Any]:
    missing = kafka_missing()
    if missing:
        raise SystemExit(f"kafka latency bench: {missing}")
    broker = Broker(work / "kafka")
    broker.start()
    spark = start_spark()
    try:
        log(f"kafka-latency: warm-up merge {warm_up(spark, work / 'warmup', np.random.default_rng(1)):.1f} s")
        clustering = ClusteringSettings(target_rows=100_000)

        def stream(name: str, source: str) -> StreamSettings:
            return StreamSettings(
                source=source,
                checkpoint_location=str(work / name / "checkpoint"),
                trigger_interval_seconds=TRIGGER_SECONDS,
                starting_version="earliest",
            )

        delta_settings = Settings(
            clustering=clustering,
            stream=stream("delta-log", "delta-log"),
            tables=[TableSettings(uri=str(work / "delta-log" / "events"))],
        )
        log("kafka-latency: the job on the Delta log")
        delta_log = run_source(spark, work, delta_settings, batches, None)

        topic = broker.create_topic("latency-commits", 3)
        options = broker.client_options()
        kafka_settings = Settings(
            clustering=clustering,
            stream=stream("kafka", "kafka"),
            kafka=KafkaSettings(
                bootstrap_servers=broker.secure_bootstrap,
                commits_topic=topic,
                starting_offsets="earliest",
                client_options=options,
            ),
            tables=[TableSettings(uri=str(work / "kafka" / "events"))],
        )
        producer = KafkaProducer(bootstrap_servers=broker.secure_bootstrap, **options)

        def announce(table: str, version: int) -> None:
            event = commit_event_json(table, version, "WRITE", int(time.time() * 1000))
            producer.send(topic, key=table.encode(), value=event.encode())
            producer.flush(timeout=10)

        log("kafka-latency: the job on commit events from Apache Kafka over SASL_SSL")
        try:
            kafka = run_source(spark, work, kafka_settings, batches, announce)
        finally:
            producer.close()
    finally:
        spark.stop()
        broker.stop()
    return {"appends": batches, "interval_seconds": INTERVAL_SECONDS, "delta_log": delta_log, "kafka_sasl_ssl": kafka}


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    kafka, delta_log = result["latency"]["kafka_sasl_ssl"], result["latency"]["delta_log"]
    rows = []
    for name, key in (("p50", "latency_median_seconds"), ("p95", "latency_p95_seconds")):
        ratio = kafka[key] / delta_log[key]
        goal = f"<= {GOAL_RATIO}x ({'met' if ratio <= GOAL_RATIO else 'MISSED'})" if name == "p95" else ""
        rows.append(
            ratio_row(f"commit-to-decision {name}, s: Kafka SASL_SSL vs Delta log", kafka[key], delta_log[key], goal)
        )
    return rows


def main(quick: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="recluster-kafka-latency-"))
    started = time.perf_counter()
    try:
        latency = run(work, 15 if quick else 30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "kafka-latency",
        "quick": quick,
        "date": dt.date.today().isoformat(),
        "latency": latency,
        "seconds": time.perf_counter() - started,
    }
    publish(
        "kafka-latency",
        "Kafka (SASL_SSL) vs Delta log: commit-to-decision latency",
        quick,
        summary_rows(result),
        result,
    )
    for name in ("delta_log", "kafka_sasl_ssl"):
        values = latency[name]["latencies_seconds"]
        print(f"{name} latencies (s): {[None if x is None else round(x, 2) for x in values]}")
    return result


if __name__ == "__main__":
    quick_cli("python -m bench.kafka_latency_bench", main, "15 appends instead of 30")
