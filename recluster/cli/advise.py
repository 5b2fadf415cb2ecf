"""`advise`: cluster keys advised from the queries in Spark's event logs (docs/advise.md)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from recluster.cli.common import UsageError, print_json, settings_of
from recluster.engine.advise import Advice, advise


def cmd_advise(args: argparse.Namespace) -> int:
    if args.apply_factor is not None and not args.apply_factor > 1:
        raise UsageError(f"--apply-factor must be above 1 (got {args.apply_factor:g})")
    if args.sample_rows < 1 or args.min_queries < 1:
        raise UsageError("--sample-rows and --min-queries must be positive")
    result = advise(
        args.event_logs,
        settings=settings_of(args),
        tables=args.table or (),
        target_rows=args.target_rows,
        sample_rows=args.sample_rows,
        cost=not args.no_cost,
        apply_factor=args.apply_factor if args.apply else None,
        min_queries=args.min_queries,
    )
    for problem in result.problems:
        print(f"recluster: warning: {problem}", file=sys.stderr)
    if args.json:
        print_json(result.to_dict())
    else:
        render_advice(result, Console())
    return 0


def render_advice(result: Advice, console: Console) -> None:
    console.print(f"{result.scans:,} Delta scans in {result.log_files:,} event log files ({result.seconds:,.1f} s)")
    for table in result.tables:
        workload = table.workload
        names = f" ({', '.join(workload.names)})" if workload.names else ""
        current = ", ".join(table.current_key) or "none"
        console.print(
            f"\n{table.table}{names}: {workload.queries:,} queries over {workload.days:,.2f} days "
            f"(confidence {workload.confidence}); key now ({current}); {table.files:,} files now, "
            f"{table.files_after:,} once clustered\n"
            f"a query reads {table.now_files_read:,.1f} files now"
            + ("" if table.observed_files_read is None else f" ({table.observed_files_read:,.1f} by its metrics)")
            + f"; on {table.best.key}: {table.best.files_read:,.1f} ({table.predicted_factor:,.1f}x fewer)"
            + (f"; applied: CLUSTER BY {table.applied}" if table.applied else "")
        )
        grid = Table(show_edge=False)
        for header in ("key", "files read / query", "share", "MB rewritten / day", "s / day"):
            grid.add_column(header, justify="left" if header == "key" else "right")
        for s in table.candidates:
            grid.add_row(
                str(s.key) + (" (current)" if s.current else ""),
                f"{s.files_read:,.1f}",
                f"{s.read_share:.1%}",
                "-" if s.cost_mb_per_day is None else f"{s.cost_mb_per_day:,.1f}",
                "-" if s.cost_seconds_per_day is None else f"{s.cost_seconds_per_day:,.1f}",
            )
        console.print(grid)
        for note in table.notes:
            console.print(f"note: {note}")
