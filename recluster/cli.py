"""The `recluster` command line. Bad input is one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from recluster.api import TableInfo, table_info
from recluster.metrics import ClusteringMetrics
from recluster.settings import Settings, SettingsError, load_settings
from recluster.table import TableError, parse_columns

EXIT_ERROR = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input that argparse itself cannot catch."""


def _parse_partition(values: Sequence[str] | None) -> dict[str, str]:
    partition = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--partition {item!r} is not of the form column=value")
        partition[name] = value
    return partition


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, args.set or [])


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _metrics_row(name: str, m: ClusteringMetrics) -> list[str]:
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
    for header in ("", "blocks", "rows", "MB", "avg depth", "p95", "p99", "avg overlaps", "const", "unclust"):
        grid.add_column(header, justify="left" if not header else "right")
    grid.add_row(*_metrics_row("table", info.table), style="bold")
    for level, metrics in info.levels.items():
        grid.add_row(*_metrics_row(f"level {level}", metrics))
    console.print(grid)
    histogram = info.table.block_depth_histogram
    if histogram:
        console.print("depth histogram (blocks per depth bucket)")
        widest = max(histogram.values())
        for bucket, count in histogram.items():
            bar = "█" * max(1, round(40 * count / widest))
            console.print(f"  {bucket} {bar} {count}")


def cmd_info(args: argparse.Namespace) -> int:
    result = table_info(
        args.table,
        settings=_settings(args),
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        partition=_parse_partition(args.partition),
    )
    if args.json:
        print_json(result.to_dict())
    else:
        render_info(result, Console())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil

    import numpy as np

    from recluster.demo import append_demo_batch

    shutil.rmtree(args.path, ignore_errors=True)
    rng = np.random.default_rng(args.seed)
    for batch in range(args.batches):
        append_demo_batch(args.path, rng, args.rows, batch)
    result = table_info(args.path, settings=_settings(args))
    if args.json:
        print_json(result.to_dict())
    else:
        render_info(result, Console())
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML settings file")
    parser.add_argument(
        "--set",
        action="append",
        metavar="SECTION.FIELD=VALUE",
        help="override one setting, e.g. --set clustering.depth_ratio=0.2 (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recluster",
        description="Keep Delta Lake tables clustered by a key while they keep receiving writes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser(
        "info",
        help="how well a table is clustered (depth, overlaps, histogram; per level)",
        description="Clustering information of a Delta table by its cluster key (DESIGN §4 metrics).",
    )
    info.add_argument("table", metavar="TABLE_URI", help="table path, file:// or object-store URI")
    info.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    info.add_argument(
        "--partition", action="append", metavar="COLUMN=VALUE", help="only this partition (repeatable)"
    )
    _common(info)
    info.set_defaults(handler=cmd_info)

    demo = commands.add_parser(
        "demo",
        help="create a local demo table receiving random-key appends and show its clustering",
        description="Creates a demo table (random int64 keys, one file per append) and measures it.",
    )
    demo.add_argument("--path", default="recluster-demo/events", help="where to create the demo table")
    demo.add_argument("--batches", type=int, default=20, help="appends to write")
    demo.add_argument("--rows", type=int, default=20_000, help="rows per append")
    demo.add_argument("--seed", type=int, default=7)
    _common(demo)
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except (SettingsError, UsageError) as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TableError as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("recluster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
