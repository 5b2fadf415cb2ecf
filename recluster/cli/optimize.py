"""Self-optimizing commands: `optimize`, `status`, `maintain`, `clean`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from recluster.cli.common import EXIT_ERROR, UsageError, print_json, settings_of
from recluster.cli.tables import located
from recluster.core.keys import parse_columns

if TYPE_CHECKING:
    from recluster.core.target_lag import LagSummary


def cmd_clean(args: argparse.Namespace) -> int:
    """Delete the outputs of rewrites that never committed (see recluster/delta/maintenance.py for the rules)."""
    from recluster.delta.maintenance import clean_orphans
    from recluster.engine.api import storage_options_for

    if args.safety_age_hours < 0:
        raise UsageError("--safety-age-hours must not be negative")
    table = located(args.table, settings_of(args))
    result = clean_orphans(
        table.location,
        safety_age_seconds=args.safety_age_hours * 3600,
        storage_options=storage_options_for(table.settings, table.location),
        dry_run=args.dry_run,
    )
    if args.json:
        print_json(result.to_dict())
        return 0
    verb = "deleted" if result.deleted else "would delete"
    for orphan in result.orphans:
        print(f"{verb} {orphan.path} ({orphan.bytes:,} bytes, {orphan.age_seconds / 3600:.1f} h old)")
    total = sum(o.bytes for o in result.orphans)
    print(
        f"{verb} {len(result.orphans)} orphan file(s), {total:,} bytes; {result.referenced} files referenced by "
        f"versions {result.oldest_version}..{result.latest_version} kept"
    )
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    """Self-optimize a table now: the given type, or whatever its triggers say is due."""
    from recluster.core.scheduling import ProcessType
    from recluster.engine.optimizer import history_store, optimize_table
    from recluster.engine.rounds import snapshot_loader
    from recluster.spark.session import spark_session

    table = located(args.table, settings_of(args))
    settings = table.settings
    key = parse_columns(args.cluster_by) if args.cluster_by else None
    loader = snapshot_loader(table.location, settings, key, keyless=True)
    with Console(stderr=True).status("optimizing", spinner="dots"):
        result = optimize_table(
            loader,
            settings=settings,
            spark_factory=lambda: spark_session(settings.spark, settings.self_optimizing.groups),
            kind=ProcessType(args.type) if args.type else None,
            dry_run=args.dry_run,
            history=None if args.dry_run else history_store(settings),
        )
    if args.json:
        print_json(result.to_dict())
        return 0 if result.totals.failures == 0 else EXIT_ERROR
    if result.plan is not None and (args.dry_run or result.totals.tasks == 0):
        print(result.plan)
    kind = result.type or "nothing"
    print(
        f"{result.outcome}: {kind} ({result.reason}); tasks={result.totals.tasks} "
        f"files {result.totals.files_removed} -> {result.totals.files_added}, "
        f"bytes read {result.totals.bytes_read:,} written {result.totals.bytes_written:,}, "
        f"conflicts={result.totals.conflicts} failures={result.totals.failures}; "
        f"fragments {result.before.fragments} -> {result.after.fragments}"
    )
    return 0 if result.totals.failures == 0 else EXIT_ERROR


def cmd_status(args: argparse.Namespace) -> int:
    """Per table: state, pending work, group, quota and occupation, last process times, health."""
    from dataclasses import asdict, replace

    from recluster.core.discovery import INHERITED_PREFIX, EffectiveProperty, effective_properties
    from recluster.engine.api import read_snapshot
    from recluster.engine.discovery import sweep_roots
    from recluster.engine.job_benefit import tables_benefit
    from recluster.engine.optimizer import history_store, replayed_table_lag, table_status

    settings = settings_of(args)
    uris = args.table or [t.uri for t in settings.tables]
    found = [] if args.table else sweep_roots(settings)  # tables under discovery's roots, with what they inherit
    if not uris and not found and args.json:
        print_json([])  # scripts get an empty list, not an error
        return 0
    if not uris and not found:
        raise UsageError("no tables: pass TABLE_URI arguments or list tables in --config")
    history = history_store(settings)
    key = parse_columns(args.cluster_by) if args.cluster_by else None
    snapshots = [read_snapshot(uri, settings=settings, cluster_by=key, keyless=True) for uri in uris]
    reports = [table_status(snapshot, settings=settings, history=history) for snapshot in snapshots]
    origins: dict[str, list[EffectiveProperty]] = {}
    for discovered in found:
        with_table = settings.model_copy(update={"tables": [*settings.tables, discovered.settings]})
        snapshot = read_snapshot(discovered.uri, settings=with_table, cluster_by=key, keyless=True)
        effective = effective_properties(discovered.layers, snapshot.properties)
        merged = replace(snapshot, properties={k: p.value for k, p in effective.items()})
        reports.append(table_status(merged, settings=with_table, history=history))
        snapshots.append(merged)
        origins[discovered.uri] = [p for k, p in effective.items() if k.startswith(INHERITED_PREFIX)]
    benefits = {uri: b.to_dict() for uri, b in tables_benefit(settings, snapshots, history).items()}  # docs/benefit.md
    lags = {  # docs/operations.md#time-to-clustered-target
        r.table: replayed_table_lag(
            s, target_seconds=r.config.target_lag_seconds, within_target=not r.recluster_pending
        )
        for r, s in zip(reports, snapshots, strict=True)
    }
    if args.json:
        entries = [{**r.to_dict(), "settings": [asdict(p) for p in origins.get(r.table, [])]} for r in reports]
        print_json([{**e, "lag": lags[e["table"]].to_dict(), "benefit": benefits.get(e["table"])} for e in entries])
        return 0
    table = Table(
        "table",
        "state",
        "pending",
        "group",
        "quota",
        "occupation",
        "last minor/major/full/recluster",
        "fragments",
        "small-file",
        "depth",
        "lag p50/p95 (target)",
        "files skipped",
        "paused",
    )
    for report in reports:
        data = report.to_dict()
        last = "/".join(
            str(data["last"].get(k, "-"))[5:16].replace("T", " ") or "-"
            for k in ("minor", "major", "full", "recluster")
        )
        pending = data["pending"] or ("recluster" if data["recluster_pending"] else "-")
        table.add_row(
            report.table,
            str(report.state),
            pending,
            report.config.group,
            f"{report.config.quota:g}",
            f"{report.occupation:.0%}",
            last,
            str(report.health.fragments),
            f"{report.health.small_file_pressure:.0%}",
            f"{report.average_depth:.2f}",
            _lag(lags[report.table]),
            _skipped(benefits.get(report.table)),
            str((benefits.get(report.table) or {}).get("paused") or "-"),
        )
    Console().print(table)
    for uri, shown in origins.items():  # where each effective setting came from (docs/discovery.md)
        print(f"{uri}: {', '.join(map(str, shown)) or 'no recluster settings'}")
    return 0


def _lag(lag: LagSummary) -> str:
    """p50/p95 of the time-to-clustered and the target, met or missed; '-' before any data commit."""
    if lag.p50_seconds is None or lag.p95_seconds is None:
        return "-"
    target = "none" if lag.target_seconds is None else f"{lag.target_seconds:g}s {'met' if lag.met else 'missed'}"
    return f"{lag.p50_seconds:.0f}s/{lag.p95_seconds:.0f}s ({target})"


def _skipped(benefit: dict[str, Any] | None) -> str:
    """Files skipped of the total: the logged scans', or one modelled query's (docs/benefit.md#the-modelled-figure)."""
    if benefit is None:
        return "-"
    counted = f"{benefit['files_skipped']}/{benefit['files_total']}"
    return f"{counted} per query (modelled)" if benefit["source"] == "modelled" else counted


def cmd_maintain(args: argparse.Namespace) -> int:
    """Vacuum, checkpoint, log cleanup and orphan cleanup of one table now (the job does it on a schedule)."""
    from recluster.delta.maintenance import maintain_table
    from recluster.delta.maintenance_steps import MaintenanceStep
    from recluster.engine.api import storage_options_for

    table = located(args.table, settings_of(args))
    result = maintain_table(
        table.location,
        table.settings.self_optimizing.maintenance,
        storage_options=storage_options_for(table.settings, table.location),
        dry_run=args.dry_run,
    )
    if args.json:
        print_json(result.to_dict())
        return 0
    verb = "would delete" if result.dry_run else "deleted"
    refused = {refusal.step for refusal in result.refused}
    checkpoint = "not needed" if result.checkpoint_version is None else f"version {result.checkpoint_version}"
    cleanup = "done" if result.log_cleaned else "skipped"
    print(
        f"{verb} {len(result.vacuumed)} expired file(s) (retention {result.retention_hours:g} h) and "
        f"{len(result.orphans.orphans)} orphan(s); checkpoint: "
        f"{'refused' if MaintenanceStep.CHECKPOINT in refused else checkpoint}; "
        f"log cleanup: {'refused' if MaintenanceStep.LOG_CLEANUP in refused else cleanup}"
    )
    for refusal in result.refused:
        print(refusal)
    return 0
