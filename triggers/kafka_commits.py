"""Streaming source of commit events from a Kafka topic (PySpark Python Data Source, kafka-python).

Partitions are assigned explicitly and offsets {"partitions": {partition: next_offset}} live in the Spark
checkpoint, as Spark's own Kafka source keeps them: no consumer group, no commits to the broker. The end
of a micro-batch is taken from the records actually polled, never from the broker's end offsets: after a
transactional writer's commit or abort that offset is a marker no poll returns, and a range ending there
would never be read to its end (tests/test_kafka.py). Partitions added to the topic are read within seconds.

An event is JSON {"table": uri, "version": int, "operation": str, "timestamp": ms}. Malformed events are
returned as rows with `error` set (the job counts, logs and skips them); they never fail the query. The job
reads the real changes from the Delta log, so duplicate, late or out-of-order events are harmless.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

SOURCE_NAME = "recluster-kafka-commits"
SCHEMA = (
    "table string, version long, operation string, timestamp long, kafka_partition int, kafka_offset long, error string"
)
POLL_MS = 500
READ_TIMEOUT_SECONDS = 60.0
METADATA_MAX_AGE_MS = 5000


class CommitEvent(BaseModel):
    """A commit of a Delta table, as writers (or `recluster publish-commits`) announce it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    table: str = Field(min_length=1)
    version: int = Field(ge=0)
    operation: str = "UNKNOWN"
    timestamp: int | None = None


def parse_event(value: bytes | None) -> tuple[CommitEvent | None, str | None]:
    """The event, or None and a one-line reason it is malformed."""
    if value is None:
        return None, "empty record"
    try:
        return CommitEvent.model_validate_json(value), None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "event"
        return None, f"{where}: {first['msg']}"


def event_row(value: bytes | None, partition: int, offset: int) -> tuple[Any, ...]:
    """The row (`SCHEMA`) of one record of the commits topic: the event, or its partition, offset and `error`.
    Spark's own Kafka source gives its records the same rows (triggers/spark_kafka.py)."""
    event, error = parse_event(value)
    if event is None:
        return (None, None, None, None, partition, offset, error)
    return (event.table, event.version, event.operation, event.timestamp, partition, offset, None)


def consumer(bootstrap_servers: str, client_options: Mapping[str, str]) -> Any:
    """A kafka-python consumer without a group; `client_options` (security, ...) win over these defaults."""
    from kafka import KafkaConsumer

    defaults: dict[str, Any] = {
        "enable_auto_commit": False,
        "group_id": None,
        "auto_offset_reset": "earliest",  # an offset the broker no longer has: read what it has
        "request_timeout_ms": 6000,  # an unreachable broker costs a trigger seconds, not half a minute
        "session_timeout_ms": 5000,
        "metadata_max_age_ms": METADATA_MAX_AGE_MS,  # partitions added to the topic are read within seconds
    }
    return KafkaConsumer(bootstrap_servers=bootstrap_servers, **{**defaults, **client_options})


def read_to_end(client: Any, tp: Any) -> bool:
    """Whether the consumer's position on `tp` reached the high watermark its last fetch reported (a stale one only
    ends this poll early: what came after waits for the next micro-batch, nothing is skipped)."""
    highwater = client.highwater(tp)
    return highwater is not None and client.position(tp) >= highwater


def from_beginning(client: Any, tp: Any) -> None:
    """Read `tp` from its first record: a seek to offset 0 (below the log's start, the consumer's `earliest` reset
    takes it there). Not `seek_to_beginning`: that reset is lazy, and while another assigned partition had records
    to return it never completed before the poll ended, the next micro-batch started it again, and the partition was
    never read (tests/test_kafka.py)."""
    client.seek(tp, 0)


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition of the topic: plain values, picklable (a micro-batch's are one input
    partition, `OffsetRanges`)."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap_servers: str
    client_options: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class OffsetRanges(InputPartition):
    """Every partition's range of a micro-batch, read by one task: the events are small and few, and each task of a
    Python source costs Spark a round trip to a Python worker, which a batch waits for in turn (local[1])."""

    ranges: tuple[OffsetRange, ...]


_IDLE_READERS: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
"""Consumers between reads, per cluster and client settings, in each Python worker (Spark reuses its workers): a
read does not pay a new TLS handshake and SASL login. A read that fails closes its consumer instead."""


def read_range(part: OffsetRange) -> Iterator[tuple[Any, ...]]:
    """Rows for the records of one offset range (runs on executors)."""
    from kafka import TopicPartition

    key = (part.bootstrap_servers, part.client_options)
    client = _IDLE_READERS.pop(key, None) or consumer(part.bootstrap_servers, dict(part.client_options))
    tp = TopicPartition(part.topic, part.partition)
    try:
        client.assign([tp])
        client.seek(tp, part.start)
        position = part.start
        deadline = time.monotonic() + READ_TIMEOUT_SECONDS
        while position < part.end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"kafka {part.topic}[{part.partition}]: offsets {position}..{part.end} not served")
            for record in client.poll(timeout_ms=POLL_MS).get(tp, []):
                if record.offset >= part.end:
                    position = part.end
                    break
                position = record.offset + 1
                yield event_row(record.value, part.partition, record.offset)
    except BaseException:
        client.close()
        raise
    if key in _IDLE_READERS:  # another read of the same settings went idle first (threads): keep one
        client.close()
    else:
        _IDLE_READERS[key] = client


class KafkaCommitsReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.bootstrap_servers = options.get("bootstrapServers", "127.0.0.1:9092")
        self.topic = options.get("topic", "")
        if not self.topic:
            raise ValueError(f"{SOURCE_NAME}: option 'topic' is required")
        self.starting = options.get("startingOffsets", "latest")
        self.max_events = int(options.get("maxEventsPerBatch", "10000"))
        self.client_options: dict[str, str] = json.loads(options.get("clientOptions", "{}"))
        self._client: Any = None

    def _consumer(self) -> Any:
        if self._client is None:
            self._client = consumer(self.bootstrap_servers, self.client_options)
        return self._client

    def _partitions(self) -> list[Any]:
        from kafka import TopicPartition

        partitions = self._consumer().partitions_for_topic(self.topic) or set()
        return [TopicPartition(self.topic, p) for p in sorted(partitions)]

    def initialOffset(self) -> dict[str, Any]:
        partitions = self._partitions()
        if not partitions:
            log.warning("kafka source: topic %s has no partitions yet; starting from offset 0", self.topic)
            return {"partitions": {}, "reset": []}
        client = self._consumer()
        offsets = (
            client.beginning_offsets(partitions) if self.starting == "earliest" else client.end_offsets(partitions)
        )
        return {"partitions": {str(tp.partition): [int(offset), None] for tp, offset in offsets.items()}, "reset": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_events)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Poll from `start` and end where the records actually polled end (within the read limit).

        While the broker is unreachable there is simply no new data: the query keeps running."""
        from kafka.errors import KafkaError

        try:
            return self._poll_end(start, limit)
        except KafkaError as error:
            log.warning("kafka source: topic=%s reason=broker_unavailable error=%s", self.topic, error)
            self.stop()  # reconnect from scratch next time
            return {"partitions": start["partitions"], "reset": []}

    def _poll_end(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Each partition is re-read from the last record already read: if that record is no longer the
        same (offset and timestamp), the partition started over (broker lost its log, topic recreated)
        and is read again from its beginning. Duplicates are harmless downstream; lost events are not."""
        budget = 1 << 62 if isinstance(limit, ReadAllAvailable) else int(getattr(limit, "maxRows", self.max_events))
        positions: dict[int, list[Any]] = {int(p): list(v) for p, v in start["partitions"].items()}
        partitions = self._partitions()
        if not partitions:
            return {"partitions": start["partitions"], "reset": []}
        client = self._consumer()
        client.assign(partitions)
        unverified: set[int] = set()
        for tp in partitions:
            offset, _ = positions.setdefault(tp.partition, [0, None])  # a new partition: from its beginning
            if offset > 0:
                client.seek(tp, offset - 1)
                unverified.add(tp.partition)
            else:
                from_beginning(client, tp)
        reset: set[int] = set()
        refetching = False  # right after a seek to the beginning the first poll can come back empty
        while budget > 0:
            polled = client.poll(timeout_ms=POLL_MS, max_records=min(budget, 10_000))
            if not polled:
                if refetching:
                    refetching = False
                    continue
                break
            for tp, records in polled.items():
                for record in records:
                    if tp.partition in unverified:
                        unverified.discard(tp.partition)
                        last_offset, last_time = positions[tp.partition]
                        if record.offset == last_offset - 1 and last_time in (None, record.timestamp):
                            continue  # the record we had already read: the partition is as we left it
                        log.warning("kafka source: %s[%d] started over; reading it again", self.topic, tp.partition)
                        reset.add(tp.partition)
                        positions[tp.partition] = [0, None]
                        from_beginning(client, tp)
                        refetching = True
                        break
                    if budget <= 0:
                        break
                    positions[tp.partition] = [record.offset + 1, record.timestamp]
                    budget -= 1
            if not refetching and all(read_to_end(client, tp) for tp in partitions):
                break  # every partition read to its high watermark: no empty poll to wait for
        if unverified and budget > 0:
            # The record we read last did not come back. If the broker's log no longer even reaches it,
            # the partition started over and is read from its beginning by the next micro-batch.
            from kafka import TopicPartition

            ends = client.end_offsets([TopicPartition(self.topic, p) for p in sorted(unverified)])
            for tp, end_offset in ends.items():
                if end_offset < positions[tp.partition][0]:
                    log.warning("kafka source: %s[%d] is shorter than what was read; reading it again", *tp)
                    reset.add(tp.partition)
                    positions[tp.partition] = [0, None]
        return {"partitions": {str(p): v for p, v in sorted(positions.items())}, "reset": sorted(reset)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        options = tuple(sorted(self.client_options.items()))
        ranges = []
        for p, (last, _) in sorted(end["partitions"].items()):
            first = 0 if int(p) in end.get("reset", []) else int(start["partitions"].get(p, [0, None])[0])
            if int(last) > first:
                ranges.append(OffsetRange(self.topic, int(p), first, int(last), self.bootstrap_servers, options))
        return [OffsetRanges(tuple(ranges))] if ranges else []

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, OffsetRanges)
        for offsets in partition.ranges:
            yield from read_range(offsets)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to commit to the broker: offsets live in the Spark checkpoint."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class KafkaCommitsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaCommitsReader(self.options)
