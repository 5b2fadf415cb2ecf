"""`info`, `run` and `sql`: one table's clustering, reclustering it, and the SQL front end."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console

from recluster.cli.common import EXIT_ERROR, UsageError, parse_partition, print_json, settings_of
from recluster.cli.render import render_info, render_result
from recluster.core.errors import TableError
from recluster.core.keys import parse_columns
from recluster.engine.api import table_info
from recluster.engine.table_names import LocatedTable, UnknownTableError, locate_table
from recluster.settings import (
    Settings,
)

if TYPE_CHECKING:
    pass


def located(reference: str, settings: Settings) -> LocatedTable:
    """The command's table, by path or by name (docs/discovery.md#tables-by-name); a name's location is said on
    stderr, so the output that follows is known to be that table's."""
    table = locate_table(reference, settings)
    if table.name is not None:
        print(f"{table.name}: {table.location}", file=sys.stderr)
    return table


def cmd_info(args: argparse.Namespace) -> int:
    table = located(args.table, settings_of(args))
    result = table_info(
        table.location,
        settings=table.settings,
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        partition=parse_partition(args.partition),
    )
    if args.json:
        print_json(result.to_dict())
    else:
        render_info(result, Console())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    table = located(args.table, settings_of(args))
    return recluster_and_report(
        table.location,
        settings=table.settings,
        cluster_by=parse_columns(args.cluster_by) if args.cluster_by else None,
        final=args.final,
        where=args.where,
        limit=args.limit,
        dry_run=args.dry_run,
        as_json=args.json,
        policy=args.policy,
        beta=args.beta,
    )


def recluster_and_report(
    uri: str,
    *,
    settings: Settings,
    cluster_by: list[str] | None,
    final: bool,
    where: str | None,
    limit: int | None,
    dry_run: bool,
    as_json: bool,
    where_offset: int = 0,
    policy: str | None = None,
    beta: float | None = None,
) -> int:
    from recluster.core.sql_predicates import parse_predicate
    from recluster.engine.rounds import recluster_table, snapshot_loader
    from recluster.spark.session import spark_session

    if limit is not None and limit < 1:
        raise UsageError("--limit must be a positive number of files")
    if beta is not None and not beta > 0:
        raise UsageError(f"--beta must be a positive number (got {beta:g})")
    loader = snapshot_loader(uri, settings, cluster_by)
    block_filter = None
    if where:
        block_filter = parse_predicate(where, loader.key, loader.partition_columns, where_offset).may_match
    console = Console(stderr=True)
    with console.status("reclustering", spinner="dots") as status:

        def progress(event: str, fields: dict[str, Any]) -> None:
            status.update(f"reclustering: {event} " + " ".join(f"{k}={v}" for k, v in fields.items()))

        result = recluster_table(
            uri,
            loader,
            settings=settings,
            spark_factory=lambda: spark_session(settings.spark),
            final=final,
            block_filter=block_filter,
            file_limit=limit,
            dry_run=dry_run,
            progress=progress if console.is_terminal else None,
            policy=policy,
            beta=beta,
        )
    if as_json:
        print_json(result.to_dict())
    else:
        render_result(result, Console())
    return 0 if result.totals.failures == 0 else EXIT_ERROR


def cmd_sql(args: argparse.Namespace) -> int:
    from recluster.core.sql import ClusterByStatement, parse_statement
    from recluster.core.table_names import TableNameError
    from recluster.delta.snapshot import open_table
    from recluster.engine.api import set_cluster_key, storage_options_for

    statement = parse_statement(args.statement)
    try:
        table = located(statement.table, settings_of(args))
        settings, uri = table.settings, table.location
        options = storage_options_for(settings, uri)
        open_table(uri, options)
    except TableError as error:
        missing = isinstance(error, UnknownTableError) or not isinstance(error, TableNameError)  # not a bad name
        if statement.if_exists and missing:
            print(f"table {statement.table} does not exist; nothing to do (IF EXISTS)", file=sys.stderr)
            return 0
        raise
    if isinstance(statement, ClusterByStatement):
        key = set_cluster_key(uri, statement.columns, statement.curve, settings=settings, options=options)
        summary = {
            "table": statement.table,
            "cluster_by": list(key.names),
            "curve": str(key.curve),
            "fingerprint": key.fingerprint,
        }
        if args.json:
            print_json(summary)
        else:
            print(
                f"cluster key of {statement.table} is now ({key}), fingerprint {key.fingerprint}; files sorted "
                f"by an older key are left alone until `recluster run --final`"
                + ("" if not key.on_curve else " (on a curve, files not yet on it are merged onto it over time)")
            )
        return 0
    return recluster_and_report(
        uri,
        settings=settings,
        cluster_by=None,
        final=statement.final,
        where=statement.where,
        limit=statement.limit,
        dry_run=args.dry_run,
        as_json=args.json,
        where_offset=statement.where_offset,
    )
