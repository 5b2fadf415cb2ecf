"""The job's HTTP endpoints for Kubernetes probes and Prometheus (docs/operations.md).

A stdlib `ThreadingHTTPServer` in a daemon thread, started by `recluster watch --http-port N`:

- `/healthz` (liveness): 200 while the streaming query is active and made progress (a micro-batch finished, or
  Spark reported an idle trigger) within `http.progress_timeout_seconds`; else 503 with the reason.
- `/readyz` (readiness): 200 once the query is active, its first trigger completed and every watched table was
  loaded (or its error published).
- `/metrics`: Prometheus text from a dedicated registry; a collector reads the handler's per-table status at
  scrape time (levels, depth, totals since the job started, commit lag).
- `/status`: JSON of every table's status, and the last micro-batch's timings (jobs/batch_timings.py).
- `/`, `/tables/<name>`, `/api/tables[/<name>]`: the status pages and their JSON (jobs/pages.py).

Everything is read from the handler and the query at request time; nothing here writes to the job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobs.batch_timings import BatchLog
from jobs.benefit_page import benefit_section
from jobs.fleet_page import fleet_section
from jobs.pages import PageSource, job_views, render_index, render_table
from jobs.status_json import StatusJson
from recluster.settings_job import HttpSettings

if TYPE_CHECKING:
    from recluster.engine.handler import ReclusterHandler

log = logging.getLogger("recluster.http")

LAG_CACHE_SECONDS = 15.0
"""A table's log is probed for newer commits at most this often (a scrape must stay cheap)."""
LAG_PROBE_LIMIT = 1000
"""Commit lag is counted up to this many commits (one existence check per commit)."""


def _spark_time(timestamp: str | None) -> float | None:
    """Seconds since the epoch of a StreamingQueryProgress timestamp (`2026-11-22T10:00:00.123Z`)."""
    if not timestamp:
        return None
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class JobProbe:
    """Health, readiness and status of one running job, read from its query and handler."""

    def __init__(
        self,
        settings: HttpSettings,
        newest_version: Callable[[str, int, dict[str, str]], int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.query: Any = None
        self.handler: ReclusterHandler | None = None
        self.attached_at: float | None = None
        self.clock = clock
        self._newest_version = newest_version or _newest_logged_version
        self._lag_cache: dict[str, tuple[float, int | None]] = {}
        self._lock = threading.Lock()
        self.batches = BatchLog()
        """The last finished micro-batch's timings, kept by the watch loop."""
        self._status_json = StatusJson()

    def attach(self, query: Any, handler: ReclusterHandler) -> None:
        self.query, self.handler = query, handler
        self.attached_at = self.clock()

    def _last_progress(self) -> dict[str, Any] | None:
        try:
            progress = self.query.lastProgress if self.query is not None else None
        except Exception:  # the JVM side is gone or stopping: no progress to report
            return None
        return progress if isinstance(progress, dict) else None

    def last_progress_time(self) -> float | None:
        """When the job last moved on: a finished micro-batch or a Spark progress event (idle triggers too)."""
        progress = self._last_progress()
        candidates = [
            self.handler.last_batch_time if self.handler is not None else None,
            _spark_time(progress.get("timestamp")) if progress else None,
        ]
        known = [c for c in candidates if c is not None]
        return max(known) if known else None

    def _active(self) -> tuple[bool, str]:
        if self.query is None or self.handler is None:
            return False, "starting: the streaming query has not started yet"
        try:
            if self.query.isActive:
                return True, "active"
            failure = self.query.exception()
        except Exception as error:
            return False, f"streaming query unreachable: {error}"
        return False, f"streaming query stopped: {failure}" if failure else "streaming query stopped"

    def health(self) -> tuple[bool, str]:
        active, reason = self._active()
        if not active:
            return False, reason
        timeout = self.settings.progress_timeout_seconds
        last = self.last_progress_time()
        since = last if last is not None else self.attached_at
        age = self.clock() - since if since is not None else 0.0
        if age > timeout:
            what = "progress" if last is not None else "first trigger"
            return False, f"no {what} for {age:.0f}s (timeout {timeout:.0f}s)"
        return True, "ok" if last is not None else f"waiting for the first trigger ({age:.0f}s)"

    def ready(self) -> tuple[bool, str]:
        active, reason = self._active()
        if not active:
            return False, reason
        if self.last_progress_time() is None:
            return False, "waiting for the first trigger"
        if self.handler is not None and not self.handler.loaded.is_set():
            return False, "loading the watched tables"
        return True, "ok"

    def commit_lag(self, uri: str) -> int | None:
        """Commits in the table's log not yet applied to the job's state (newest logged version minus the state's).

        Probed from the state's version forward, as the delta-log source does: no log listing, no snapshot load.
        """
        handler = self.handler
        snapshot = handler.board.view.snapshots.get(uri) if handler is not None else None
        if snapshot is None or handler is None:
            return None
        now, version = self.clock(), snapshot.version
        with self._lock:
            cached = self._lag_cache.get(uri)
            if cached is None or now - cached[0] > LAG_CACHE_SECONDS or cached[1] is None or cached[1] < version:
                try:
                    newest: int | None = self._newest_version(uri, version, handler.options(uri))
                except Exception as error:  # storage hiccup: report no lag rather than fail the scrape
                    log.warning("recluster table=%s reason=lag_unavailable error=%s", uri, error)
                    newest = None
                cached = self._lag_cache[uri] = (now, newest)
        newest = cached[1]
        return None if newest is None else max(0, newest - version)

    def status(self) -> str:
        """The `/status` body: the job's health, its last batch, its fleet, and every table's status (one line)."""
        healthy, reason = self.health()
        ready, _ = self.ready()
        statuses = list(self.handler.status.values()) if self.handler is not None else []
        last = self.last_progress_time()
        envelope = {
            "healthy": healthy,
            "ready": ready,
            "reason": reason,
            "last_progress": dt.datetime.fromtimestamp(last, dt.UTC).isoformat() if last is not None else None,
            "last_batch": self.batches.latest.to_dict() if self.batches.latest is not None else None,
            "fleet": self.handler.discovery.fleet() if self.handler and self.handler.discovery else {},
        }
        return self._status_json.body(envelope, statuses)


def _newest_logged_version(uri: str, after: int, options: dict[str, str]) -> int:
    """The newest version whose commit file follows `after` without a gap (existence checks only)."""
    from recluster.delta.storage import commit_file_exists

    version = after
    while version - after < LAG_PROBE_LIMIT and commit_file_exists(uri, version + 1, options):
        version += 1
    return version


class JobCollector:
    """Prometheus collector: per table and level gauges and the job's totals, read at scrape time."""

    def __init__(self, probe: JobProbe) -> None:
        self.probe = probe

    def collect(self) -> Iterable[Metric]:
        handler = self.probe.handler
        statuses = sorted(handler.status.values() if handler is not None else [], key=lambda s: s.table)
        table, level = ["table"], ["table", "level"]
        blocks = GaugeMetricFamily("recluster_level_blocks", "Files in the level", labels=level)
        level_depth = GaugeMetricFamily("recluster_level_average_depth", "Average depth of the level", labels=level)
        threshold = GaugeMetricFamily(
            "recluster_level_threshold", "Average depth above which the level is merged", labels=level
        )
        depth = GaugeMetricFamily("recluster_table_average_depth", "Average depth of the table", labels=table)
        version = GaugeMetricFamily("recluster_table_version", "Table version the job's state is at", labels=table)
        pending = GaugeMetricFamily("recluster_table_pending", "1 when work was left for later batches", labels=table)
        error = GaugeMetricFamily("recluster_table_error", "1 when the table is in error (see /status)", labels=table)
        lag = GaugeMetricFamily(
            "recluster_commit_lag", "Commits of the table not yet applied to the job's state", labels=table
        )
        counters = {
            "tasks": CounterMetricFamily("recluster_merges", "Merges committed since the job started", labels=table),
            "bytes_written": CounterMetricFamily(
                "recluster_bytes_written", "Bytes written by merges since the job started", labels=table
            ),
            "bytes_appended": CounterMetricFamily(
                "recluster_bytes_appended", "Bytes appended by other writers since the job started", labels=table
            ),
            "conflicts": CounterMetricFamily(
                "recluster_conflicts", "Merges rejected by a concurrent change since the job started", labels=table
            ),
            "failures": CounterMetricFamily(
                "recluster_failures", "Merges that failed since the job started", labels=table
            ),
        }
        for status in statuses:
            for entry in status.levels:
                labels = [status.table, str(entry.level)]
                blocks.add_metric(labels, entry.blocks)
                level_depth.add_metric(labels, entry.average_depth)
                threshold.add_metric(labels, entry.threshold)
            depth.add_metric([status.table], status.average_depth)
            version.add_metric([status.table], status.version)
            pending.add_metric([status.table], float(status.pending))
            error.add_metric([status.table], float(status.error is not None))
            for name, family in counters.items():
                family.add_metric([status.table], getattr(status, name))
            behind = self.probe.commit_lag(status.table) if status.error is None else None
            if behind is not None:
                lag.add_metric([status.table], behind)
        healthy, _ = self.probe.health()
        up = GaugeMetricFamily("recluster_up", "1 while the streaming query is healthy (see /healthz)")
        up.add_metric([], float(healthy))
        last = self.probe.last_progress_time()
        yield from (blocks, level_depth, threshold, depth, version, pending, error, lag, *counters.values(), up)
        if last is not None:
            yield GaugeMetricFamily(
                "recluster_last_progress_timestamp_seconds", "When the query last made progress", value=last
            )


def _handler_class(server: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "recluster"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._check(*server.probe.health())
            elif path == "/readyz":
                self._check(*server.probe.ready())
            elif path == "/metrics":
                self._reply(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
            elif path == "/status":
                self._reply(200, server.probe.status().encode(), "application/json")
            elif not self._page(path):
                self._reply(
                    404, b"not found: try /, /api/tables, /healthz, /readyz, /metrics or /status\n", "text/plain"
                )

        def _page(self, path: str) -> bool:
            """The status pages and their JSON; False for a path that is none of them."""
            pages = server.pages()
            if pages is None:
                return False
            html_type, json_type = "text/html; charset=utf-8", "application/json"
            if path == "/":
                fleet = fleet_section(pages.fleet(), time.time())
                self._reply(200, render_index(pages.views(None), pages.title, fleet).encode(), html_type)
                return True
            if path == "/api/tables":
                body = json.dumps([v.to_dict() for v in pages.views(None)], indent=2, default=str)
                self._reply(200, body.encode(), json_type)
                return True
            for prefix, render in (("/tables/", render_table), ("/api/tables/", None)):
                if path.startswith(prefix) and len(path) > len(prefix):
                    view = pages.find(unquote(path[len(prefix) :]))
                    if view is None:
                        self._reply(404, b"no such table\n", "text/plain")
                    elif render is not None:
                        self._reply(200, render(view, benefit_section(view.benefit)).encode(), html_type)
                    else:
                        self._reply(200, json.dumps(view.to_dict(), indent=2, default=str).encode(), json_type)
                    return True
            return False

        def _check(self, ok: bool, reason: str) -> None:
            self._reply(200 if ok else 503, f"{reason}\n".encode(), "text/plain; charset=utf-8")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class HealthServer:
    """The HTTP endpoints in a daemon thread. `start()` binds (port 0: any free port), `attach()` hands it
    the running query and handler, `stop()` shuts it down."""

    def __init__(self, settings: HttpSettings, probe: JobProbe | None = None, pages: PageSource | None = None) -> None:
        self.settings = settings
        self.probe = probe or JobProbe(settings)
        self._pages = pages
        self.registry = CollectorRegistry()
        self.registry.register(JobCollector(self.probe))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the HTTP server is not running")
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        port = self.settings.port or 0
        server = ThreadingHTTPServer((self.settings.host, port), _handler_class(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="recluster-http", daemon=True)
        self._thread.start()
        log.info(
            "recluster http=%s:%d endpoints=/,/tables/<name>,/api/tables,/healthz,/readyz,/metrics,/status",
            self.settings.host,
            self.port,
        )
        return self

    def attach(self, query: Any, handler: ReclusterHandler) -> None:
        self.probe.attach(query, handler)

    def pages(self) -> PageSource | None:
        """The pages' tables: given at construction (`recluster ui`), else the attached job's."""
        if self._pages is not None:
            return self._pages
        handler = self.probe.handler
        if handler is None:
            return None
        return PageSource(
            lambda only: job_views(handler, only),
            fleet=lambda: handler.discovery.fleet() if handler.discovery is not None else {},
        )

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None
