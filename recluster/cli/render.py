"""Rendering for people: rich tables of clustering figures, results, metrics and job status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from recluster.core.metrics import ClusteringMetrics
from recluster.core.selection.plan import partition_text
from recluster.engine.api import TableInfo
from recluster.engine.rounds import ReclusterResult

if TYPE_CHECKING:
    pass


def metrics_row(name: str, m: ClusteringMetrics) -> list[str]:
    return [
        name,
        f"{m.total_block_count:,}",
        f"{m.total_rows:,}",
        f"{m.total_bytes / 1e6:,.1f}",
        f"{m.average_depth:.3f}",
        str(m.p95_depth),
        str(m.p99_depth),
        f"{m.average_overlaps:.2f}",
        str(m.constant_block_count),
        str(m.unclustered_block_count),
    ]


def render_info(result: TableInfo, console: Console) -> None:
    snapshot, info = result.snapshot, result.info
    console.print(
        f"[bold]{snapshot.uri}[/bold]  version {snapshot.version}  key ({snapshot.key})  "
        f"fingerprint {snapshot.key.fingerprint}"
    )
    grid = Table(show_edge=False)
    for header in ("", "blocks", "rows", "MB", "depth", "p95", "p99", "overlaps", "const", "unclust"):
        grid.add_column(header, justify="left" if not header else "right", no_wrap=True)
    grid.add_row(*metrics_row("table", info.table), style="bold")
    for level, metrics in info.levels.items():
        grid.add_row(*metrics_row(f"level {level}", metrics))
    console.print(grid)
    unclustered, total = info.table.unclustered_block_count, info.table.total_block_count
    if unclustered:
        why = "are not on the key's curve yet" if snapshot.key.on_curve else "have no usable stats for a key column"
        console.print(
            f"{unclustered:,} of {total:,} files {why} (unclust): the depth and overlap figures above leave them "
            f"out; `recluster run --final` (or the job, over time) merges them",
            markup=False,
        )
    if snapshot.key.on_curve:
        bounds = snapshot.key.bounds
        console.print(
            f"curve {snapshot.key.curve}: {bounds if bounds else 'no range bounds yet (the first merge samples them)'}"
        )
    if info.column_scan:
        scans = ", ".join(f"{name} {share:.3f}" for name, share in info.column_scan.items())
        console.print(f"files a point predicate reads (share, per key column): {scans}", markup=False)
    for partition, decision in result.time_like:
        console.print(f"time-like partition {partition_text(partition)}: {decision}", markup=False)
    histogram = info.table.block_depth_histogram
    if histogram:
        console.print("depth histogram (blocks per depth bucket)")
        widest = max(histogram.values())
        for bucket, count in histogram.items():
            bar = "█" * max(1, round(40 * count / widest))
            console.print(f"  {bucket} {bar} {count}")


def render_result(result: ReclusterResult, out: Console) -> None:
    if result.stop_reason == "dry_run" or not result.rounds:
        for plan in result.plans:
            out.print(str(plan), markup=False, highlight=False)
    totals = result.totals
    out.print(
        f"rounds={result.rounds} tasks={totals.tasks} files -{totals.files_removed} +{totals.files_added} "
        f"read={totals.bytes_read / 1e6:.1f}MB written={totals.bytes_written / 1e6:.1f}MB "
        f"rows={totals.rows_rewritten:,} conflicts={totals.conflicts} policy={result.policy} "
        f"stop={result.stop_reason} "
        f"({result.seconds:.1f}s)",
        markup=False,
        highlight=False,
    )
    out.print(
        f"average_depth {result.before.table.average_depth:.3f} -> {result.after.table.average_depth:.3f}, "
        f"p99_depth {result.before.table.p99_depth} -> {result.after.table.p99_depth}",
        highlight=False,
    )


def render_metrics(latest: Mapping[str, Any]) -> Table:
    grid = Table(title="recluster metrics", show_edge=False)
    for header in (
        "table",
        "version",
        "depth",
        "p99",
        "levels blocks/depth/threshold",
        "tasks",
        "written MB",
        "errors",
    ):
        grid.add_column(header, no_wrap=True)
    for table, record in sorted(latest.items()):
        levels = " ".join(
            f"L{lv.level}={lv.metrics.total_block_count}/{lv.metrics.average_depth:.2f}/{lv.threshold:.1f}"
            for lv in record.levels
        )
        grid.add_row(
            table,
            str(record.version),
            f"{record.table_metrics.average_depth:.3f}",
            str(record.table_metrics.p99_depth),
            levels,
            str(record.actions.tasks),
            f"{record.actions.bytes_written / 1e6:.1f}",
            str(len(record.errors) + record.skipped_events),
        )
    return grid


def render_status(status: Any, batches: int, seconds: float) -> Table:
    grid = Table(title=f"recluster demo  {seconds:5.0f}s  appends={batches}", show_edge=False)
    for header in ("level", "blocks", "avg depth", "threshold"):
        grid.add_column(header, justify="right")
    if status is None:
        grid.add_row("-", "waiting for the first micro-batch", "", "")
        return grid
    for level in status.levels:
        grid.add_row(str(level.level), str(level.blocks), f"{level.average_depth:.2f}", f"{level.threshold:.1f}")
    grid.caption = (
        f"table depth {status.average_depth:.2f}  merges {status.tasks}  "
        f"written {status.bytes_written / 1e6:.1f} MB / appended {status.bytes_appended / 1e6:.1f} MB"
        + (f"  error: {status.error}" if status.error else "")
    )
    return grid
