"""`estimate`: what automatic clustering will cost a table before it is turned on
(docs/commands.md#recluster-estimate)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from recluster.cli.common import UsageError, print_json, settings_of
from recluster.cli.tables import located
from recluster.core.estimate.projection import MB, TableEstimate
from recluster.core.keys import parse_columns
from recluster.engine.estimate import estimate_table


def cmd_estimate(args: argparse.Namespace) -> int:
    if args.days is not None and not args.days > 0:
        raise UsageError(f"--days must be a positive number (got {args.days:g})")
    if args.every < 1:
        raise UsageError(f"--every must be a positive number of appends (got {args.every})")
    if args.merge_mb_per_second is not None and not args.merge_mb_per_second > 0:
        raise UsageError(f"--merge-mb-per-second must be positive (got {args.merge_mb_per_second:g})")
    table = located(args.table, settings_of(args))
    result = estimate_table(
        table.location,
        settings=table.settings,
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        policy=args.policy,
        days=args.days,
        every=args.every,
        merge_mb_per_second=args.merge_mb_per_second,
    )
    if args.json:
        print_json(result.to_dict())
    else:
        render_estimate(result, Console())
    return 0


def render_estimate(result: TableEstimate, console: Console) -> None:
    shape, initial = result.shape, result.initial
    speed = "given" if result.calibration is None else f"measured on {result.calibration.files} files"
    console.print(
        f"{result.table} (version {result.version}) by ({', '.join(result.key)}), policy {result.policy}\n"
        f"learned from {shape.appends:,} appends ({shape.rows_per_append:,.0f} rows, "
        f"{shape.rows_per_append * shape.bytes_per_row / MB:,.2f} MB each; {shape.appends_per_day:,.1f} per day): "
        f"{shape.describe()}\n"
        f"initial FINAL: {initial.files:,} files, {initial.bytes / MB:,.1f} MB -> {initial.files_written:,} files, "
        f"{initial.seconds:,.1f} s at {result.merge_mb_per_second:,.1f} MB/s ({speed})"
    )
    grid = Table(show_edge=False)
    for header in ("strategy", "row WA", "depth", "files read", "files", "MB/day", "merges/day", "s/day", "churn MB"):
        grid.add_column(header, justify="left" if header == "strategy" else "right")
    for s in result.strategies:
        day = s.per_day
        reads = ", ".join(f"{v:,.2f}" for v in s.files_read_per_predicate.values())
        grid.add_row(
            s.name,
            f"{s.write_amplification:.2f}",
            f"{s.time_averaged_depth:.2f}",
            reads,
            f"{s.files:,}",
            f"{day.bytes_rewritten / MB:,.1f}",
            f"{day.merges:,.1f}",
            f"{day.compute_seconds:,.1f}",
            f"{day.storage_churn_bytes / MB:,.1f}",
        )
    console.print(grid)
    for note in result.notes:
        console.print(f"note: {note}")
