"""What reading a micro-batch of commit events costs Spark: `python -m bench.kafka_batch_bench [--quick]`.

A Kafka-driven job's micro-batch first collects its events: Spark runs the source's read in a Python worker, one task
per input partition, and on `local[1]` the tasks run one after the other. Here a local[1] session (the job's own
settings: recluster/spark/session.py) streams the commits source (triggers/kafka_commits.py) of a topic of PARTITIONS
partitions on an Apache Kafka broker (tests/kafka_broker) while a producer sends RATE events a second across them, and
`foreachBatch` times each batch's `collect()`, for SECONDS each way, ROUNDS times alternating (quick: one round of
half as long): recluster's source, every partition's range of a batch read by one task, against the same source with
one task per partition, what it did before. Reported: the median collect time of the batches with events (the first
WARM_BATCHES of each run left out: they start Python workers). Writes bench/results/kafka-batch[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from bench.common import log, publish
from docgen.figures import ratio_row
from recluster.settings import SparkSettings
from recluster.spark.session import spark_session
from tests.kafka_broker import Broker, kafka_missing
from triggers.kafka_commits import KafkaCommitsReader, KafkaCommitsSource, OffsetRanges

PARTITIONS = 3
RATE = 35.0
SECONDS = 40.0
ROUNDS = 2
WARM_BATCHES = 3
TRIGGER_SECONDS = 1.0


class TaskPerPartitionReader(KafkaCommitsReader):
    """The baseline: recluster's reader with one input partition (one task) per topic partition, as before."""

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        (grouped,) = super().partitions(start, end) or [OffsetRanges(())]
        assert isinstance(grouped, OffsetRanges)
        return [OffsetRanges((offsets,)) for offsets in grouped.ranges]


class TaskPerPartitionSource(KafkaCommitsSource):
    @classmethod
    def name(cls) -> str:
        return "recluster-kafka-commits-task-per-partition"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TaskPerPartitionReader(self.options)


def collect_times(spark: Any, broker: Broker, source: str, work: Path, seconds: float) -> list[float]:
    """Each batch's `collect()` seconds while RATE events a second arrive for `seconds` (batches with events only)."""
    topic = broker.create_topic("batches", partitions=PARTITIONS)
    frame = (
        spark.readStream.format(source)
        .option("bootstrapServers", broker.bootstrap)
        .option("topic", topic)
        .option("startingOffsets", "latest")
        .load()
    )
    times: list[float] = []

    def handle(batch: Any, _: int) -> None:
        began = time.monotonic()
        if batch.collect():
            times.append(time.monotonic() - began)

    query = (
        frame.writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(work / f"checkpoint-{topic}"))
        .trigger(processingTime=f"{TRIGGER_SECONDS} seconds")
        .start()
    )
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        time.sleep(5)  # the source's first offsets, before any event
        began = time.monotonic()
        for index in range(int(RATE * seconds)):
            time.sleep(max(0.0, began + index / RATE - time.monotonic()))
            event = {"table": f"s3://lake/t{index % 1000:05d}", "version": index}
            producer.send(topic, json.dumps(event).encode(), partition=index % PARTITIONS)
        producer.flush()
        time.sleep(3 * TRIGGER_SECONDS)  # the last events' batch
    finally:
        query.stop()
        producer.close()
    return times[WARM_BATCHES:]


def main(quick: bool = False) -> dict[str, Any]:
    missing = kafka_missing()
    if missing:
        raise SystemExit(f"kafka-batch bench: {missing}")
    began = time.monotonic()
    rounds, seconds = (1, SECONDS / 2) if quick else (ROUNDS, SECONDS)
    # The baseline's classes are pickled by reference: Spark's Python workers import this module from the repo.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")) if p
    )
    times: dict[str, list[float]] = {"one task": [], "task per partition": []}
    sources = {"one task": KafkaCommitsSource, "task per partition": TaskPerPartitionSource}
    with tempfile.TemporaryDirectory(prefix="recluster-kafka-batch-") as work_dir:
        work = Path(work_dir)
        broker = Broker(work / "kafka")
        broker.start()
        spark = spark_session(SparkSettings(master="local[1]"))
        try:
            for source in sources.values():
                spark.dataSource.register(source)
            for round_ in range(rounds):
                order = list(sources) if round_ % 2 == 0 else list(reversed(sources))
                for kind in order:
                    measured = collect_times(spark, broker, sources[kind].name(), work, seconds)
                    times[kind].extend(measured)
                    median = statistics.median(measured) * 1000
                    log(f"{kind}: {len(measured)} batches with events, collect() median {median:.0f} ms")
        finally:
            spark.stop()
            broker.stop()
    ours, theirs = statistics.median(times["one task"]), statistics.median(times["task per partition"])
    rows = [ratio_row("a micro-batch's collect() of its events, median (s)", ours, theirs, "< 1")]
    result = {
        "partitions": PARTITIONS,
        "events_per_second": RATE,
        "seconds": seconds,
        "rounds": rounds,
        "trigger_seconds": TRIGGER_SECONDS,
        "collect_seconds": times,
        "median_seconds": {"one task": ours, "task per partition": theirs},
        "run_seconds": time.monotonic() - began,
    }
    title = (
        f"Reading a micro-batch of commit events from {PARTITIONS} Kafka partitions: one task against one a partition"
    )
    return publish("kafka-batch", title, quick, rows, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_batch_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round, half as long")
    main(quick=parser.parse_args().quick)
