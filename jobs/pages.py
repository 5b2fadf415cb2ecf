"""The status pages (docs/operations.md#status-pages): what an operator opens in a browser, served by the job's HTTP
server.

`/` lists every table (state, key, policy, depth, files, levels, pending work, quota, last processes); `/tables/<name>`
(URI percent-encoded) shows one (depth over time, levels, histogram, processes; its benefit: jobs/benefit_page.py);
`/api/tables[/<name>]` is their JSON. Server-rendered HTML, inline SVG, no script; strings from tables/users escaped.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from recluster.core.discovery import EffectiveProperty
from recluster.core.metrics import clustering_info
from recluster.core.scheduling import ProcessRecord
from recluster.delta.history import HistoryStore
from recluster.delta.snapshot import TableSnapshot
from recluster.engine.api import selection_bounds
from recluster.engine.optimizer import table_status
from recluster.settings import Settings

REFRESH_SECONDS = 10
RECENT_PROCESSES = 20


@dataclass(frozen=True, slots=True)
class TableView:
    """One table as the pages show it: `status` is exactly `recluster status --json`'s entry."""

    uri: str
    status: dict[str, Any]
    key: str
    policy: str
    files: int
    levels: tuple[dict[str, Any], ...]
    histogram: dict[str, int]
    column_scan: dict[str, float]
    processes: tuple[ProcessRecord, ...] = ()
    error: str | None = None
    unclustered: int = 0
    """Files the depth figures leave out: no usable stats for a key column, or not on the key's curve yet."""
    settings: tuple[EffectiveProperty, ...] = ()
    """Its effective `recluster.*` properties and where each came from (docs/discovery.md#inherited-settings)."""
    lag: dict[str, Any] | None = None
    """The job's time-to-clustered figures (docs/operations.md#time-to-clustered-target); None outside the job."""
    benefit: dict[str, Any] | None = None
    """What the logged queries skipped (docs/benefit.md), as the job last counted it; None outside the job."""

    @property
    def name(self) -> str:
        return quote(self.uri, safe="")

    @property
    def state(self) -> str:
        return "error" if self.error else str(self.status.get("state", "idle"))

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.status,
            "key": self.key,
            "policy": self.policy,
            "files": self.files,
            "unclustered_files": self.unclustered,
            "levels": list(self.levels),
            "depth_histogram": self.histogram,
            "column_scan": self.column_scan,
            "error": self.error,
            "processes": [process_dict(p) for p in self.processes],
            "settings": [{"key": p.key, "value": p.value, "origin": p.origin} for p in self.settings],
            "benefit": self.benefit,
        }


def process_dict(record: ProcessRecord) -> dict[str, Any]:
    return {
        "type": str(record.type),
        "start": _iso(record.start),
        "seconds": None if record.end is None else round(record.end - record.start, 3),
        "status": str(record.status),
        "files_in": record.files_in,
        "bytes_in": record.bytes_in,
        "files_out": record.files_out,
        "bytes_out": record.bytes_out,
        "depth": record.depth,
        "error": record.error,
    }


def table_view(
    snapshot: TableSnapshot,
    settings: Settings,
    history: HistoryStore | None,
    error: str | None = None,
    origins: tuple[EffectiveProperty, ...] = (),
) -> TableView:
    info = clustering_info(snapshot.blocks, snapshot.key)
    levels = tuple(
        {"level": level, "files": m.total_block_count, "average_depth": m.average_depth, "p99_depth": m.p99_depth}
        for level, m in sorted(info.levels.items())
    )
    processes: tuple[ProcessRecord, ...] = ()
    if history is not None:
        ended = [r for r in history.records_of(snapshot.uri) if r.end is not None]
        processes = tuple(sorted(ended, key=lambda r: r.start))
    return TableView(
        uri=snapshot.uri,
        status=table_status(snapshot, settings=settings, history=history).to_dict(),
        key=str(snapshot.key) if not snapshot.key.keyless else "(none: compaction only)",
        policy=str(selection_bounds(settings, snapshot, None).policy),
        files=len(snapshot.blocks),
        levels=levels,
        histogram=dict(info.table.block_depth_histogram),
        column_scan=dict(info.column_scan),
        processes=processes,
        error=error,
        unclustered=info.table.unclustered_block_count,
        settings=origins,
    )


@dataclass
class PageSource:
    """Where the pages get their tables: a function returning the views (the job's state, or snapshots read
    at request time for `recluster ui`)."""

    views: Callable[[str | None], Sequence[TableView]]
    """All tables' views, or (given a URI) that table's alone."""
    title: str = "recluster"
    fleet: Callable[[], Mapping[str, Any]] = dict
    """The jobs sharing the tables through leases (`/status`'s `fleet`; empty for a job without leases)."""

    def find(self, uri: str) -> TableView | None:
        return next(iter(self.views(uri)), None)


# ---- HTML ----------------------------------------------------------------------------------------------------------

STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#1d2430}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #dde3ea;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f6f9}.state{font-weight:600}
.error{color:#b3261e}.pending{color:#9a6700}.idle{color:#1a7f37}.muted{color:#6b7785}code{font-size:13px}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}"><style>{STYLE}</style></head>'
        f'<body>{body}<p class="muted">refreshes every {REFRESH_SECONDS} s · '
        f"rendered {_e(_iso(dt.datetime.now(dt.UTC).timestamp()))} UTC</p></body></html>"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], css_id: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    ident = f' id="{_e(css_id)}"' if css_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_index(views: Sequence[TableView], title: str = "recluster", sections: str = "") -> str:
    """The tables' list; `sections`: more HTML below it (the fleet, jobs/fleet_page.py)."""
    rows = []
    for view in views:
        status = view.status
        last = status.get("last", {})
        optimized = max((v for k, v in last.items() if k != "recluster"), default="-")
        levels = " · ".join(f"L{lv['level']}: {lv['files']} / {_number(lv['average_depth'])}" for lv in view.levels)
        pending = status.get("pending") or ("recluster" if status.get("recluster_pending") else "-")
        rows.append(
            [
                f'<a href="/tables/{_e(view.name)}">{_e(view.uri)}</a>',
                f'<span class="state {_e(view.state)}" title="{_e(view.error or "")}">{_e(view.state)}</span>',
                f"<code>{_e(view.key)}</code>",
                _e(view.policy),
                f'<span class="depth">{_number(status.get("average_depth"), 3)}</span>',
                f'<span class="files">{view.files}</span>',
                _e(levels or "-"),
                _e(pending),
                _e(status.get("quota", "-")),
                _number(status.get("quota_occupation"), 3),
                _e(str(last.get("recluster", "-"))[:19]),
                _e(str(optimized)[:19]),
            ]
        )
    headers = ("table", "state", "key", "policy", "depth", "files", "levels (files / depth)", "pending",
               "quota", "occupation", "last recluster", "last optimize")  # fmt: skip
    body = f"<h1>{_e(title)}: {len(views)} table(s)</h1>" + _table(headers, rows, "tables")
    body += sections
    return _page(title, body + '<p class="muted">JSON: <a href="/api/tables">/api/tables</a></p>')


def depth_plot(processes: Sequence[ProcessRecord], width: int = 640, height: int = 200) -> str:
    """Average depth when each process was planned, over time: an inline SVG polyline with one circle per point."""
    points = [(r.start, r.depth) for r in processes if r.depth is not None]
    if not points:
        return '<p class="muted" id="depth-plot-empty">no recorded processes yet</p>'
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(max(d for _, d in points), 1.0) * 1.1
    pad = 36

    def xy(t: float, d: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)
        return x, height - pad - (height - 2 * pad) * d / top

    coords = [xy(t, d) for t, d in points]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(
        f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#2f6fde">'
        f"<title>{_e(_iso(t))}: depth {d:.3f}</title></circle>"
        for (x, y), (t, d) in zip(coords, points, strict=True)
    )
    axes = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#8895a3"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#8895a3"/>'
        f'<text x="4" y="{pad}" font-size="11">{top:.1f}</text><text x="4" y="{height - pad}" font-size="11">0</text>'
        f'<text x="{pad}" y="{height - 8}" font-size="11">{_e(_iso(t0))}</text>'
        f'<text x="{width - pad}" y="{height - 8}" font-size="11" text-anchor="end">{_e(_iso(t1))}</text>'
    )
    return (
        f'<svg id="depth-plot" width="{width}" height="{height}" role="img" aria-label="average depth over time">'
        f'{axes}<polyline fill="none" stroke="#2f6fde" stroke-width="2" points="{line}"/>{dots}</svg>'
    )


def histogram_plot(histogram: dict[str, int], width: int = 640, height: int = 160) -> str:
    if not histogram:
        return '<p class="muted">no clustered files</p>'
    widest, step = max(histogram.values()), min(60.0, (width - 20) / len(histogram))
    bars = "".join(
        f'<rect x="{10 + i * step:.1f}" y="{height - 30 - (height - 50) * n / widest:.1f}" width="{step * 0.8:.1f}" '
        f'height="{(height - 50) * n / widest:.1f}" fill="#7aa6f0"><title>depth {_e(b)}: {n} files</title></rect>'
        f'<text x="{10 + i * step:.1f}" y="{height - 12}" font-size="11">{_e(b.lstrip("0") or "0")}</text>'
        for i, (b, n) in enumerate(histogram.items())
    )
    return f'<svg id="depth-histogram" width="{width}" height="{height}" role="img">{bars}</svg>'


def estimate_facts(estimate: dict[str, Any]) -> list[list[str]]:
    """The projection the job stored when it took the table up, and what happened since
    (docs/commands.md#recluster-estimate)."""
    projected, actual = estimate["projected"], estimate["actual"]
    ratio = actual["written_per_appended"]
    return [
        [
            f"estimated at version {_e(projected['version'])} ({_e(_iso(projected['at']))})",
            f"policy {_e(projected['policy'])}: {projected['written_per_appended']:.2f} bytes rewritten per byte "
            f"appended, time-averaged depth {projected['time_averaged_depth']:.2f}, "
            f"{projected['bytes_rewritten_per_day'] / 1e6:,.1f} MB and {projected['merges_per_day']:,.1f} merges "
            "per day",
        ],
        [
            f"since then ({actual['days']:.2f} days)",
            f'<span class="estimate-actual">{"-" if ratio is None else f"{ratio:.2f}"}</span> bytes rewritten per '
            f"byte appended ({actual['bytes_rewritten'] / 1e6:,.1f} MB in {actual['merges']} merges, "
            f"{actual['bytes_appended'] / 1e6:,.1f} MB appended), depth now {actual['average_depth']:.2f}",
        ],
    ]


def render_table(view: TableView, sections: str = "") -> str:
    status = view.status
    facts = [
        ["state", f'<span class="state {_e(view.state)}">{_e(view.state)}</span>'],
        ["version", _e(status.get("version"))],
        ["cluster key", f"<code>{_e(view.key)}</code>"],
        ["policy", _e(view.policy)],
        ["average depth", f'<span class="depth">{_number(status.get("average_depth"), 3)}</span>'],
        ["files", f'<span class="files">{view.files}</span>'],
        *(
            [["files the depth leaves out", f'<span class="unclustered">{view.unclustered}</span>']]
            if view.unclustered
            else []
        ),
        ["quota / occupation", f"{_e(status.get('quota'))} / {_number(status.get('quota_occupation'), 3)}"],
        ["pending", _e(status.get("pending") or ("recluster" if status.get("recluster_pending") else "-"))],
        *(
            [[f"scan share of {_e(c)}", _number(share, 3)] for c, share in view.column_scan.items()]
            if view.column_scan
            else []
        ),
        *([[_e(p.key), f"{_e(p.value)} <span class=muted>({_e(p.origin)})</span>"] for p in view.settings]),
        *(estimate_facts(status["estimate"]) if status.get("estimate") else []),
        *([["time to clustered p50 / p95 / target", lag_fact(view.lag)]] if view.lag else []),
        *([["error", f'<span class="error">{_e(view.error)}</span>']] if view.error else []),
    ]
    levels = [
        [f"L{lv['level']}", str(lv["files"]), _number(lv["average_depth"], 3), str(lv["p99_depth"])]
        for lv in view.levels
    ]
    recent = list(reversed(view.processes[-RECENT_PROCESSES:]))
    processes = [
        [
            _e(p.type),
            _e(_iso(p.start)),
            _number(None if p.end is None else p.end - p.start),
            f"{p.files_in} / {p.files_out}",
            f"{p.bytes_in / 1e6:,.1f} / {p.bytes_out / 1e6:,.1f}",
            _number(p.depth, 3),
            _e(p.status),
            f'<span class="error">{_e(p.error or "")}</span>',
        ]
        for p in recent
    ]
    body = (
        f'<p><a href="/">all tables</a> · <a href="/api/tables/{_e(view.name)}">JSON</a></p>'
        f"<h1>{_e(view.uri)}</h1>"
        + _table(("", ""), facts, "facts")
        + sections  # below the facts: the job's benefit (jobs/benefit_page.py)
        + "<h2>Average depth over time (at each process)</h2>"
        + depth_plot(view.processes)
        + "<h2>Levels</h2>"
        + _table(("level", "files", "average depth", "p99 depth"), levels, "levels")
        + "<h2>Depth histogram (files per depth bucket)</h2>"
        + histogram_plot(view.histogram)
        + "<h2>Recent processes</h2>"
        + _table(
            ("type", "start (UTC)", "seconds", "files in / out", "MB in / out", "depth", "result", "error"),
            processes,
            "processes",
        )
    )
    return _page(f"recluster: {view.uri}", body)


def lag_fact(lag: dict[str, Any]) -> str:
    verdict = {True: "met", False: "missed", None: "-"}[lag["met"]]
    target = "none" if lag["target_seconds"] is None else f"{_number(lag['target_seconds'], 1)} s"
    figures = f"{_number(lag['p50_seconds'], 1)} s / {_number(lag['p95_seconds'], 1)} s / {target}"
    return f'<span class="lag">{figures} <span class="state {verdict}">{verdict}</span></span>'


def job_views(handler: Any, only: str | None = None) -> list[TableView]:
    """The running job's tables from the view it last published (no I/O but the history it already holds): no
    lock, so a page never waits for a merge, and every table as one batch left it."""
    job = handler.board.view
    views = []
    for uri, snapshot in job.snapshots.items():
        if only is None or uri == only:
            status = job.statuses.get(uri)
            origins = status.settings if status is not None else ()
            view = table_view(snapshot, handler.settings, handler.history, status_error(status), origins)
            lag, benefit = (status.lag, status.benefit) if status is not None else (None, None)
            views.append(replace(view, lag=lag and lag.to_dict(), benefit=benefit and benefit.to_dict()))
    for uri, status in job.statuses.items():  # tables the job could not load: their error
        error = status_error(status)
        if uri not in job.snapshots and error and (only is None or uri == only):
            views.append(error_view(uri, error))
    return sorted(views, key=lambda view: view.uri)


def status_error(status: Any) -> str | None:
    """A table's error as the pages show it, led by its kind (table, data, storage, unknown)."""
    if status is None or not status.error:
        return None
    return f"{status.error_kind}: {status.error}" if status.error_kind else str(status.error)


def error_view(uri: str, error: str) -> TableView:
    """A table that could not be read (missing, no cluster key, an unsupported feature): its error alone."""
    return TableView(uri, {"table": uri, "state": "error", "error": error}, "-", "-", 0, (), {}, {}, error=error)


def snapshot_views(
    uris: Sequence[str], settings: Settings, history: HistoryStore | None, only: str | None = None
) -> list[TableView]:
    """Tables read from their logs at request time (`recluster ui`, no job); a table that cannot be read is
    shown with its error."""
    from recluster.core.errors import TableError
    from recluster.engine.api import read_snapshot

    views = []
    for uri in uris if only is None else [u for u in uris if u == only]:
        try:
            snapshot = read_snapshot(uri, settings=settings, keyless=True)
        except TableError as error:
            views.append(error_view(uri, str(error)))
            continue
        views.append(table_view(snapshot, settings, history))
    return views
