"""Kafka output: the metrics record the job publishes after each micro-batch, and commit events.

A broker outage never stops reclustering: records wait in a bounded buffer (the oldest are dropped and
counted beyond it), sends are bounded in time, and every later batch retries what is still buffered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from recluster.core.blocks import Partition
from recluster.core.metrics import ClusteringInfo, ClusteringMetrics
from recluster.core.outcomes import OutcomeTotals
from recluster.core.scheduling import ProcessRecord
from recluster.core.selection.plan import Policy, WatermarkDecision, partition_text
from recluster.engine.estimate_record import latest_projection
from recluster.settings_job import KafkaSettings

log = logging.getLogger(__name__)

SEND_TIMEOUT_SECONDS = 5.0
STOP_FLUSH_SECONDS = 20.0
"""How long a graceful stop keeps trying to send the records still buffered (a busy or restarting broker can miss
one send timeout; the stop has 60 s for its batch: docs/kafka.md)."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LevelRecord(_Record):
    level: int
    threshold: float
    """The level's threshold: clamp(blocks * depth_ratio, 1, max_depth_threshold)."""
    metrics: ClusteringMetrics
    """The `recluster info --json` metric keys for the level's files."""


@dataclass(frozen=True, slots=True)
class BatchActions(OutcomeTotals):
    """What the job did to the table in this micro-batch: the commit totals and how long it took."""

    duration_seconds: float = 0.0


class FailureRecord(_Record):
    kind: str = Field(description="table, data, storage or unknown")
    error: str
    attempts: int = Field(description="failures in a row")
    retry_at: dt.datetime = Field(description="when the table's work is tried again")


class TimeLikeRecord(_Record):
    """absorb on a time-like partition (docs/concepts.md#time-like-keys-the-lateness-watermark): what the watermark and
    the rent-or-buy trigger saw."""

    partition: str = Field(description="the partition (k=v,...; - for an unpartitioned table)")
    lag: str = Field(description="the largest lateness the waiting appends show, in the key's units")
    watermark: str = Field(
        description="largest key - lag: rows below it are written into closed files (late_run_*: the main run's top)"
    )
    accumulator: float = Field(
        description="extra depth paid since the last absorb (sum of average depth - 1; late_run_*: append-depths, or "
        "the late run's rent for late_run_rewrite)"
    )
    threshold: float = Field(description="the accumulator absorbs the head at this value (rent or buy)")
    reason: str = Field(
        description="watermark_absorb (absorbing now) or watermark_rent (the appends wait); with late rows from "
        "anywhere late_run_absorb, late_run_rent, or late_run_rewrite (the late run merges into the main run)"
    )
    cut: bool = Field(description="whether outputs are cut at the watermark (it closes at least half a file)")


def time_like_records(decisions: Iterable[tuple[Partition, WatermarkDecision]]) -> list[TimeLikeRecord]:
    return [TimeLikeRecord(partition=partition_text(p), **d.to_dict()) for p, d in decisions]


class EstimateRecord(_Record):
    """What `recluster estimate` projected when the job took the table up (docs/commands.md#recluster-estimate)."""

    version: int = Field(description="the table version the estimate was made at")
    at: float = Field(description="when, in seconds since the epoch")
    policy: str = Field(description="the policy it projected")
    written_per_appended: float = Field(description="bytes the policy rewrites per byte appended")
    time_averaged_depth: float = Field(description="the average depth after every append, averaged")
    bytes_rewritten_per_day: float = Field(description="bytes rewritten per day at the history's pace of appends")
    merges_per_day: float


class BenefitRecord(_Record):
    """What clustering saved the table's queries, as the job last counted it (docs/benefit.md)."""

    source: str = Field(
        description="logged (the event logs' scans) or modelled (no logged scan: one point query on the key)"
    )
    queries: int = Field(description="logged scans of the table (0 when modelled)")
    measured: int = Field(description="the logged scans whose files and bytes read the log gave")
    files_total: int
    files_skipped: int = Field(description="files data skipping left out, summed over the scans")
    bytes_total: int
    bytes_skipped: int
    bytes_rewritten: int = Field(description="bytes the table's recluster and optimizing processes wrote")
    skipped_per_gb_rewritten: float | None = Field(description="bytes skipped per byte rewritten; null before any")
    last_query_ms: int | None = Field(description="the last logged scan's time, ms since the epoch")
    paused: str | None = Field(description="why reclustering is paused (no_queries), null when it is not")


class MetricsRecord(_Record):
    """One record per touched table per micro-batch on the metrics topic, keyed by the table URI."""

    time: dt.datetime
    table: str
    version: int = Field(description="Delta version the clustering figures describe")
    policy: str = Field(Policy.LEVELS, description="the selection policy that acted: levels or absorb")
    beta: float | None = Field(
        None, description="absorb: the beta it decided with (after the depth-target controller); null for levels"
    )
    table_metrics: ClusteringMetrics = Field(description="whole-table figures, as `recluster info --json` prints them")
    levels: list[LevelRecord]
    actions: BatchActions
    pending: bool = Field(description="work left for the next batch (budget reached or a conflict)")
    reasons: list[str] = Field(
        default_factory=list,
        description="reason codes of the tasks run (levels: depth_above_threshold, unclustered; absorb: "
        "absorb_ratio, absorb_resume, watermark_absorb, unclustered)",
    )
    errors: list[str] = Field(default_factory=list)
    failure: FailureRecord | None = Field(
        None, description="the table's work failed: what kind of error, how many times in a row, when it is retried"
    )
    deletion_vector_files: int = Field(0, description="live files with a deletion vector")
    deleted_rows: int = Field(0, description="rows their deletion vectors hide (purged by major optimizing)")
    skipped_events: int = Field(0, description="malformed commit events skipped in this batch (Kafka source)")
    column_scan: dict[str, float] = Field(
        default_factory=dict,
        description="per key column, the average fraction of files a point predicate on it reads after stats pruning",
    )
    time_like: list[TimeLikeRecord] = Field(
        default_factory=list, description="absorb: the watermark decision of each time-like partition planned"
    )
    estimate: EstimateRecord | None = Field(
        None,
        description="what `recluster estimate` projected when the job took the table up (null until then); "
        "`recluster status` sets it against what happened since",
    )
    benefit: BenefitRecord | None = Field(
        None,
        description="files and bytes queries skipped against the bytes rewritten, and the pause (null until counted)",
    )


def with_estimate(record: MetricsRecord, history: Iterable[ProcessRecord]) -> MetricsRecord:
    """The record with the table's stored projection (`estimate` rows of the history table), if it has one."""
    projected = latest_projection(history, record.table)
    if projected is None:
        return record
    return record.model_copy(update={"estimate": EstimateRecord(**dataclasses.asdict(projected))})


def metrics_record(
    table: str,
    version: int,
    info: ClusteringInfo,
    thresholds: Mapping[int, float],
    actions: BatchActions,
    *,
    pending: bool,
    policy: str = Policy.LEVELS,
    beta: float | None = None,
    reasons: Iterable[str] = (),
    errors: Iterable[str] = (),
    skipped_events: int = 0,
    deletions: tuple[int, int] = (0, 0),
    time_like: Iterable[tuple[Partition, WatermarkDecision]] = (),
    benefit: Mapping[str, Any] | None = None,
) -> MetricsRecord:
    """`deletions`: (live files with a deletion vector, rows those vectors hide); `benefit`: the table's benefit as
    `TableBenefit.to_dict` gives it (its per-day series stays on `/status`)."""
    return MetricsRecord(
        time=dt.datetime.now(dt.UTC),
        table=table,
        version=version,
        policy=policy,
        beta=beta,
        table_metrics=info.table,
        levels=[
            LevelRecord(level=level, threshold=thresholds.get(level, 1.0), metrics=metrics)
            for level, metrics in sorted(info.levels.items())
        ],
        actions=actions,
        pending=pending,
        reasons=sorted(set(reasons)),
        errors=list(errors),
        deletion_vector_files=deletions[0],
        deleted_rows=deletions[1],
        skipped_events=skipped_events,
        column_scan=dict(info.column_scan),
        time_like=time_like_records(time_like),
        benefit=None if benefit is None else BenefitRecord(**{k: v for k, v in benefit.items() if k != "daily"}),
    )


def producer(settings: KafkaSettings) -> Any:
    """A kafka-python producer whose sends block at most a few seconds when the broker is away, and which tries to
    reconnect at least once a second (kafka-python's backoff otherwise grows to 30 s during an outage, and the first
    records after the broker's return wait that long). The settings' client options override these."""
    from kafka import KafkaProducer

    options: dict[str, Any] = {
        "max_block_ms": int(SEND_TIMEOUT_SECONDS * 1000),
        "request_timeout_ms": int(SEND_TIMEOUT_SECONDS * 1000),
        "reconnect_backoff_max_ms": 1000,
        "retries": 3,
    }
    return KafkaProducer(bootstrap_servers=settings.bootstrap_servers, **(options | dict(settings.client_options)))


class BufferedPublisher:
    """Sends JSON records keyed by table; keeps them (bounded) while the broker cannot be reached."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.buffer: deque[tuple[str, str]] = deque()
        self.dropped = 0
        self._producer: Any = None

    def publish(self, records: Iterable[tuple[str, str]]) -> None:
        """Queue (key, JSON) records and try to send everything queued."""
        for record in records:
            if len(self.buffer) >= self.settings.metrics_buffer_records:
                self.buffer.popleft()
                self.dropped += 1
            self.buffer.append(record)
        self.flush()

    def flush(self) -> None:
        """Send what is buffered; what fails goes back to the front of the buffer for the next call."""
        if not self.buffer:
            return
        from kafka.errors import KafkaError

        failed = pending = list(self.buffer)
        self.buffer.clear()
        try:
            if self._producer is None:
                self._producer = producer(self.settings)
            sent = [
                (record, self._producer.send(self.topic, key=record[0].encode(), value=record[1].encode()))
                for record in pending
            ]
            self._producer.flush(timeout=SEND_TIMEOUT_SECONDS)
            failed = [record for record, future in sent if not future.succeeded()]
        except KafkaError as error:
            log.warning("kafka topic=%s reason=broker_unavailable error=%s", self.topic, error)
        except Exception as error:  # a client defect must not lose the buffer: the records are kept and retried
            log.error("kafka topic=%s reason=client_error error=%r", self.topic, error)
        if failed:
            self._discard_producer()  # a fresh one reconnects cleanly once the broker is back
            self.buffer.extendleft(reversed(failed))
            while len(self.buffer) > self.settings.metrics_buffer_records:
                self.buffer.popleft()
                self.dropped += 1
            log.warning(
                "kafka topic=%s reason=send_failed buffered=%d dropped=%d", self.topic, len(self.buffer), self.dropped
            )

    def _discard_producer(self) -> None:
        """Drop the producer without waiting for what it still holds (unsent records are back in this publisher's
        buffer). kafka-python's close() first flushes, which fails while the broker is away, and leaves the producer
        half-open: its finalizer then raises later, in whatever code runs then. Its sender is stopped first."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):  # closing a producer whose broker is gone may fail too
                producer._sender.force_close()
                producer._sender.join(SEND_TIMEOUT_SECONDS)
                producer.close(timeout=0)

    def close(self, seconds: float = STOP_FLUSH_SECONDS) -> None:
        """Send what is buffered, trying again once a second until `seconds` have passed; then let go of the producer
        (what is still buffered is lost with the process, and counted in the log line of the last failed send)."""
        deadline = time.monotonic() + seconds
        self.flush()
        while self.buffer and time.monotonic() < deadline:
            time.sleep(1.0)
            self.flush()
        self._discard_producer()


def commit_event_json(table: str, version: int, operation: str, timestamp: int | None) -> str:
    return json.dumps({"table": table, "version": version, "operation": operation, "timestamp": timestamp})
