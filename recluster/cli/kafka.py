"""Kafka commands: `publish-commits` (Delta log -> commit events), `metrics-tail`, `metrics-schema`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

from recluster.cli.common import UsageError, check_kafka, print_json, settings_of, updated_section
from recluster.cli.render import render_metrics

if TYPE_CHECKING:
    pass


def cmd_publish_commits(args: argparse.Namespace) -> int:
    """Tail Delta logs and publish one commit event per new version, for writers that cannot."""
    import threading

    from recluster.delta.log import read_commits
    from recluster.delta.storage import normalize_uri
    from recluster.engine.api import storage_options_for
    from recluster.engine.publish import BufferedPublisher, commit_event_json
    from triggers.delta_log import newest_version, table_version

    settings = settings_of(args)
    kafka = updated_section(
        settings.kafka, {"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers else {}
    )
    topic = args.topic or kafka.commits_topic
    check_kafka(kafka)
    tables = [normalize_uri(t) for t in args.table]
    options = {t: dict(storage_options_for(settings, t)) for t in tables}
    start = {t: table_version(t, options[t]) for t in tables}
    positions = {t: -1 if args.from_version == "earliest" or v is None else v for t, v in start.items()}
    publisher = BufferedPublisher(kafka, topic)
    stop = threading.Event()
    published = [0]

    def tick() -> None:
        for table in tables:
            newest = newest_version(table, positions[table], 1000, options[table])
            if newest <= positions[table]:
                continue
            commits = read_commits(table, positions[table] + 1, newest, options[table])
            events = [(table, commit_event_json(table, c.version, c.operation, c.timestamp)) for c in commits]
            publisher.publish(events)
            published[0] += len(events)
            positions[table] = newest
            logging.getLogger("recluster.engine.publish").info("published table=%s versions<=%d", table, newest)

    serve_until(stop, args.seconds, args.interval, tick)
    publisher.close()
    result = {"published": published[0], "buffered": len(publisher.buffer), "dropped": publisher.dropped}
    if args.json:
        print_json(result)
    else:
        print(
            f"published {result['published']} commit events to {topic}; {result['buffered']} buffered", file=sys.stderr
        )
    return 0


def serve_until(stop: Any, seconds: float | None, interval: float, tick: Callable[[], None]) -> None:
    """Call `tick` every `interval` seconds until SIGTERM/SIGINT or `seconds` elapse."""
    import signal
    import time

    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            tick()
            stop.wait(interval)
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def cmd_metrics_tail(args: argparse.Namespace) -> int:
    """Print the metrics topic: one JSON line per record with --json, else a live table per table."""
    import contextlib
    import threading

    from kafka import TopicPartition
    from rich.live import Live

    from recluster.engine.publish import MetricsRecord
    from triggers.kafka_commits import consumer

    settings = settings_of(args)
    topic = args.topic or settings.kafka.metrics_topic
    if not topic:
        raise UsageError("no metrics topic: pass --topic or set kafka.metrics_topic")
    kafka = updated_section(
        settings.kafka, {"bootstrap_servers": args.bootstrap_servers} if args.bootstrap_servers else {}
    )
    check_kafka(kafka)
    client = consumer(kafka.bootstrap_servers, kafka.client_options)
    partitions = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or [])]
    if not partitions:
        client.close()
        raise UsageError(f"topic {topic} does not exist (yet)")
    client.assign(partitions)
    if args.from_beginning:
        client.seek_to_beginning(*partitions)
    else:
        client.seek_to_end(*partitions)
    latest: dict[str, MetricsRecord] = {}
    live = None if args.json else Live(console=Console(), auto_refresh=False)

    def tick() -> None:
        for records in client.poll(timeout_ms=500).values():
            for record in records:
                if args.json:
                    print(record.value.decode("utf-8"), flush=True)
                else:
                    parsed = MetricsRecord.model_validate_json(record.value)
                    latest[parsed.table] = parsed
        if live is not None:
            live.update(render_metrics(latest), refresh=True)

    with live if live is not None else contextlib.nullcontext():
        serve_until(threading.Event(), args.seconds, 0.0, tick)
    client.close()
    return 0


def cmd_metrics_schema(args: argparse.Namespace) -> int:
    from recluster.engine.publish import MetricsRecord

    print_json(MetricsRecord.model_json_schema())
    return 0
