"""The fleet bench's writer (bench/fleet_scale_bench.py): many small tables written, appends to them at a rate
through open handles (each announced on a Kafka topic when the jobs read commit events), and the time each append
takes to show in its owner's `/status`."""

from __future__ import annotations

import io
import itertools
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from recluster.delta.file_stats import delta_stats, stats_text
from recluster.delta.object_store import put_object
from recluster.delta.storage import log_file, put_if_absent
from recluster.engine.publish import commit_event_json
from tests.fleet_support import status
from tests.kafka_broker import Broker

ROWS = 200
APPEND_SECONDS = 60.0
POLL_SECONDS = 0.5
FIRST_SECONDS = 15.0


def random_rows(rng: np.random.Generator) -> pa.Table:
    return pa.table({"k": pa.array(rng.integers(0, 10**9, ROWS), pa.int64())})


def write_tables(uris: list[str], options: dict[str, str]) -> dict[str, list[pa.Table]]:
    rng = np.random.default_rng(44)
    batches = {uri: [random_rows(rng)] for uri in uris}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda uri: write_deltalake(uri, batches[uri][0], storage_options=options), uris))
    return batches


def wait_until(condition: Any, what: str, timeout: float) -> float:
    """Seconds until `condition()` holds (checked every second), or RuntimeError naming `what`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1.0)
    return time.monotonic() - started


class Events:
    """The commits topic of a Kafka run: the writer announces each append on it, every job reads all of it."""

    def __init__(self, broker: Broker, name: str) -> None:
        from kafka import KafkaProducer

        self.bootstrap = broker.bootstrap
        self.topic = broker.create_topic(f"{name}-commits", partitions=3)
        self.producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0)

    def announce(self, uri: str, version: int) -> None:
        event = commit_event_json(uri, version, "WRITE", int(time.time() * 1000))
        self.producer.send(self.topic, key=uri.encode(), value=event.encode())

    def job_environment(self) -> dict[str, str]:
        """The jobs' settings for this topic (settings from the environment, docs/configuration.md)."""
        return {
            "RECLUSTER_STREAM__SOURCE": "kafka",
            "RECLUSTER_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "RECLUSTER_KAFKA__COMMITS_TOPIC": self.topic,
        }

    def close(self) -> None:
        self.producer.flush(timeout=30)
        self.producer.close()


class DeltaRsAppender:
    """Appends through the table's open delta-rs handle, as a long-running writer does: delta-rs reads only the
    commits since its last one (to check for conflicts) and leaves the handle at the version it wrote. Opening by URI
    for the write and the version made the writer most of the emulator's requests (about 20 an append); bringing the
    handle up to date before and after the write still cost about 5 of the 11 left."""

    def __init__(self, uri: str, options: dict[str, str], version: int) -> None:
        """`version`: unused, delta-rs opens the table at its latest."""
        self.table = DeltaTable(uri, storage_options=options)

    def append(self, rows: pa.Table) -> int:
        write_deltalake(self.table, rows, mode="append")
        return self.table.version()  # the version written


class LogAppender:
    """Appends as a writer that keeps its table's version does, in two requests: the data file (a PUT) and the
    commit (a create-if-absent PUT of the next version, the next again when a job's round took it; a blind append
    conflicts with no round). delta-rs's append also lists and re-reads the log: about 11 requests, most of the
    emulator's load at 20 appends a second, where S3 would serve the writer beside the jobs without slowing them.
    The commit names no recluster producer: to the jobs it is a foreign append like delta-rs's. It starts from the
    version the bench wrote (`version`), as a writer that has been running does: opening the table at its first
    append would be 4 requests more, once a table, and at 10,000 tables almost every append is a table's first."""

    def __init__(self, uri: str, options: dict[str, str], version: int) -> None:
        self.uri, self.options = uri, options
        self.version = version

    def append(self, rows: pa.Table) -> int:
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        buffer = io.BytesIO()
        pq.write_table(rows, buffer, compression="snappy")
        data = buffer.getvalue()
        put_object(self.uri, name, data, self.options)
        now = int(time.time() * 1000)
        stats = stats_text(delta_stats(rows, rows.column_names))
        actions = [
            {"commitInfo": {"timestamp": now, "operation": "WRITE", "operationParameters": {"mode": "Append"}}},
            {
                "add": {
                    "path": name,
                    "partitionValues": {},
                    "size": len(data),
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": stats,
                }
            },
        ]
        commit = "".join(json.dumps(action) + "\n" for action in actions).encode()
        version = self.version + 1
        while not put_if_absent(self.uri, log_file(self.uri, f"{version:020d}.json"), commit, self.options):
            version += 1
        self.version = version
        return version


WRITERS: dict[str, type[DeltaRsAppender] | type[LogAppender]] = {"delta-rs": DeltaRsAppender, "log": LogAppender}
"""How the bench appends (`--writer`): through delta-rs, or straight into the log."""


class DecisionClock:
    """Appends at `rate` tables a second and the time each takes to show in its owner's /status."""

    def __init__(
        self,
        uris: list[str],
        batches: dict[str, list[pa.Table]],
        options: dict[str, str],
        events: Events | None,
        rate: float,
        writer: str = "delta-rs",
    ) -> None:
        self.uris, self.batches, self.options, self.events, self.rate = uris, batches, options, events, rate
        self.appender = WRITERS[writer]
        self.pending: list[tuple[str, int, float]] = []
        self.latencies: list[float] = []
        self.decided: list[float] = []
        """When each append showed in its owner's /status (time.monotonic() when the answer came)."""
        self.later: list[float] = []
        """The latencies of the appends committed FIRST_SECONDS or more after the first: the jobs' first batches with
        commits start Spark's Python workers, which one-off cost the appends meanwhile wait for."""
        self.tasks = 0
        """The most merges the jobs' statuses counted at once."""
        self.tasks_by_port: dict[int, int] = {}
        self.lock = threading.Lock()
        self.rng = np.random.default_rng(45)
        self.handles: dict[str, tuple[threading.Lock, DeltaRsAppender | LogAppender]] = {}
        self.started = self.last_committed = 0.0
        """When the appends began and when the last one committed: the rate the writer reached (the emulator, one
        Python process, can hold it below the rate asked)."""

    def append(self, uri: str) -> None:
        """One append through the table's appender (`WRITERS`), made at its first append and kept."""
        with self.lock:
            rows = random_rows(self.rng)
            handle = self.handles.get(uri)
            written = len(self.batches[uri]) - 1  # the bench's commits: versions 0.. (the jobs' rounds come after)
        if handle is None:  # opened outside the lock: the other tables' appends go on meanwhile
            opened = (threading.Lock(), self.appender(uri, self.options, written))
            with self.lock:
                handle = self.handles.setdefault(uri, opened)
        with handle[0]:
            version = handle[1].append(rows)
            committed = time.monotonic()
        if self.events is not None:  # announced as a writer does, after its commit (not timed: the commit is)
            self.events.announce(uri, version)
        with self.lock:
            self.batches[uri].append(rows)
            self.pending.append((uri, version, committed))
            self.last_committed = max(self.last_committed, committed)

    def poll(self, port: int) -> None:
        """One job's /status: the appends it shows decided, stamped when its answer came (each job is polled on its
        own thread, so one job's slow answer never delays the stamps of another's decisions)."""
        answer = status(port) or {}
        now = time.monotonic()
        versions = {table["table"]: table["version"] for table in answer.get("tables", [])}
        with self.lock:
            self.tasks_by_port[port] = sum(int(table.get("tasks", 0)) for table in answer.get("tables", []))
            self.tasks = max(self.tasks, sum(self.tasks_by_port.values()))
            waiting = []
            for uri, version, committed in self.pending:
                if versions.get(uri, -1) >= version:
                    self.latencies.append(now - committed)
                    self.decided.append(now)
                    if committed - self.started >= FIRST_SECONDS:
                        self.later.append(now - committed)
                else:
                    waiting.append((uri, version, committed))
            self.pending = waiting

    def run(self, ports: list[int], seconds: float = APPEND_SECONDS) -> None:
        """Append for `seconds` (tables in a shuffled cycle), then wait for every decision."""
        stop = threading.Event()

        def poller(port: int) -> None:
            while not stop.wait(POLL_SECONDS):
                self.poll(port)

        watchers = [threading.Thread(target=poller, args=(port,), daemon=True) for port in ports]
        for watcher in watchers:
            watcher.start()
        chosen = itertools.cycle(self.rng.permutation(self.uris))
        with ThreadPoolExecutor(8) as pool:
            started = self.started = time.monotonic()
            appends = []
            for index in range(int(self.rate * seconds)):
                time.sleep(max(0.0, started + index / self.rate - time.monotonic()))
                appends.append(pool.submit(self.append, str(next(chosen))))
            for append in appends:
                append.result()  # a failed append fails the run (its rows would be missing from the check)
        wait_until(lambda: not self.pending, "every append decided", 900)
        stop.set()
        for watcher in watchers:
            watcher.join()
