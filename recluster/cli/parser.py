"""The argument parser of every command (`recluster --help`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from recluster.cli.advise import cmd_advise
from recluster.cli.common import OneLineErrorParser
from recluster.cli.demo import cmd_demo
from recluster.cli.estimate import cmd_estimate
from recluster.cli.kafka import cmd_metrics_schema, cmd_metrics_tail, cmd_publish_commits
from recluster.cli.optimize import cmd_clean, cmd_maintain, cmd_optimize, cmd_status
from recluster.cli.tables import cmd_info, cmd_run, cmd_sql
from recluster.cli.ui import cmd_ui
from recluster.cli.watch import cmd_watch
from recluster.core.selection.plan import Policy

if TYPE_CHECKING:
    pass


TABLE_HELP = "table path, file:// or object-store URI, or a name db.table / catalog.db.table in the Spark catalog"


def add_common_options(parser: argparse.ArgumentParser) -> None:
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
    parser = OneLineErrorParser(
        prog="recluster",
        description="Keep Delta Lake tables clustered by a key while they keep receiving writes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser(
        "info",
        help="how well a table is clustered (depth, overlaps, histogram; per level)",
        description="Clustering information of a Delta table by its cluster key (docs/concepts.md metrics).",
    )
    info.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    info.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    info.add_argument(
        "--curve",
        choices=("hilbert", "zorder", "linear"),
        help="how a multi-column key orders rows (default: table property, else hilbert for 2+ columns)",
    )
    info.add_argument("--partition", action="append", metavar="COLUMN=VALUE", help="only this partition (repeatable)")
    add_common_options(info)
    info.set_defaults(handler=cmd_info)

    run = commands.add_parser(
        "run",
        help="recluster a table now: one round, or --final until fully clustered",
        description="Plan, merge (Spark) and commit recluster rounds on a Delta table.",
    )
    run.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    run.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    run.add_argument(
        "--curve",
        choices=("hilbert", "zorder", "linear"),
        help="how a multi-column key orders rows (default: table property, else hilbert for 2+ columns)",
    )
    run.add_argument("--final", action="store_true", help="repeat rounds until the table is fully clustered")
    run.add_argument("--where", metavar="EXPR", help="only files whose key/partition stats may match EXPR")
    run.add_argument("--limit", type=int, metavar="N", help="rewrite at most N files in this run")
    run.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    run.add_argument(
        "--policy",
        choices=[str(policy) for policy in Policy],
        help="selection policy for this run (default: table property recluster.policy, else selection.policy)",
    )
    run.add_argument(
        "--beta",
        type=float,
        metavar="B",
        help="absorb: a run absorbs the newer runs once they hold B x its overlapped rows (selection.beta)",
    )
    add_common_options(run)
    run.set_defaults(handler=cmd_run)

    sql = commands.add_parser(
        "sql",
        help="run a statement: ALTER TABLE t RECLUSTER [FINAL] [WHERE c] [LIMIT n] | CLUSTER BY (a, b)",
        description=(
            "Statements: ALTER TABLE [IF EXISTS] t RECLUSTER [FINAL] [WHERE cond] [LIMIT n]; "
            "OPTIMIZE TABLE t RECLUSTER (a FINAL recluster); ALTER TABLE t CLUSTER BY (a, b). "
            "t is delta.`URI`, a quoted path, or a name db.t / catalog.db.t. "
            "WHERE chooses candidate files by their key/partition stats."
        ),
    )
    sql.add_argument("statement", metavar="STATEMENT")
    sql.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    add_common_options(sql)
    sql.set_defaults(handler=cmd_sql)

    watch = commands.add_parser(
        "watch",
        help="run the streaming job: react to commits and keep tables clustered until SIGTERM/Ctrl-C",
        description="Structured Streaming over the tables' Delta logs; foreachBatch plans and runs bounded merges.",
    )
    watch.add_argument(
        "--table", action="append", metavar="URI[:COL1,COL2]", help="table to watch, optionally with its key"
    )
    watch.add_argument("--checkpoint", metavar="DIR", help="checkpoint location (stream.checkpoint_location)")
    watch.add_argument("--trigger-seconds", type=float, help="micro-batch interval (stream.trigger_interval_seconds)")
    watch.add_argument("--starting-version", help="latest, earliest or a version number (first start only)")
    watch.add_argument("--seconds", type=float, help="stop after this many seconds (default: run until a signal)")
    watch.add_argument("--source", choices=["delta-log", "kafka"], help="commit trigger (stream.source)")
    watch.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="Kafka brokers (kafka.bootstrap_servers)")
    watch.add_argument("--commits-topic", metavar="TOPIC", help="commit events topic (kafka.commits_topic)")
    watch.add_argument("--metrics-topic", metavar="TOPIC", help="publish metrics records here (kafka.metrics_topic)")
    watch.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        help="serve /healthz, /readyz, /metrics and /status on this port (http.port; 0: any free port)",
    )
    add_common_options(watch)
    watch.set_defaults(handler=cmd_watch)

    publish = commands.add_parser(
        "publish-commits",
        help="tail Delta logs and publish commit events to Kafka (for writers that cannot publish)",
        description="Publishes {table, version, operation, timestamp} for every new version of the tables.",
    )
    publish.add_argument("--table", action="append", required=True, metavar="URI", help="table to tail (repeatable)")
    publish.add_argument("--bootstrap-servers", metavar="HOST:PORT", help="Kafka brokers (kafka.bootstrap_servers)")
    publish.add_argument("--topic", help="commit events topic (default: kafka.commits_topic)")
    publish.add_argument("--from-version", choices=["latest", "earliest"], default="latest")
    publish.add_argument("--interval", type=float, default=1.0, help="seconds between polls of the logs")
    publish.add_argument("--seconds", type=float, help="stop after this many seconds (default: until a signal)")
    add_common_options(publish)
    publish.set_defaults(handler=cmd_publish_commits)

    metrics = commands.add_parser("metrics", help="read the metrics topic").add_subparsers(
        dest="metrics_command", required=True, metavar="COMMAND"
    )
    tail = metrics.add_parser("tail", help="print metrics records as a live table (or JSON lines with --json)")
    tail.add_argument("--bootstrap-servers", metavar="HOST:PORT")
    tail.add_argument("--topic", help="default: kafka.metrics_topic")
    tail.add_argument("--from-beginning", action="store_true")
    tail.add_argument("--seconds", type=float, help="stop after this many seconds (default: until a signal)")
    add_common_options(tail)
    tail.set_defaults(handler=cmd_metrics_tail)

    clean = commands.add_parser(
        "clean",
        help="delete outputs of rewrites that never committed (orphans); never a reachable file",
        description=(
            "Deletes only files named as recluster writes them, older than --safety-age-hours, and referenced by "
            "no version still in the Delta log (time travel keeps working)."
        ),
    )
    clean.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    clean.add_argument("--safety-age-hours", type=float, default=24.0, help="only files older than this (default 24)")
    clean.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    add_common_options(clean)
    clean.set_defaults(handler=cmd_clean)

    optimize = commands.add_parser(
        "optimize",
        help="self-optimize a table now: minor (compact fragments), major (undersized segments) or full",
        description=(
            "Without --type runs whatever the table's self-optimizing.* triggers say is due. Outputs are sorted "
            "by the cluster key; every task commits atomically and is recorded in the history table."
        ),
    )
    optimize.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    optimize.add_argument("--type", choices=["minor", "major", "full"], help="the process to run (default: due one)")
    optimize.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    optimize.add_argument(
        "--curve",
        choices=("hilbert", "zorder", "linear"),
        help="how a multi-column key orders rows (default: table property, else hilbert for 2+ columns)",
    )
    optimize.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    add_common_options(optimize)
    optimize.set_defaults(handler=cmd_optimize)

    estimate = commands.add_parser(
        "estimate",
        help="what automatic clustering will cost a table, learned from its commits, against the alternatives",
        description=(
            "Learns the shape of the table's appends from its Delta log and projects, with the configured policy, "
            "a first FINAL and the steady state per day, against no clustering, compact and a full sort every N."
        ),
    )
    estimate.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    estimate.add_argument("--cluster-by", metavar="COL1,COL2", help="key columns (default: table property)")
    estimate.add_argument(
        "--policy",
        choices=[str(policy) for policy in Policy],
        help="selection policy (default: table property recluster.policy, else selection.policy)",
    )
    estimate.add_argument("--days", type=float, metavar="N", help="learn from the commits of the last N days only")
    estimate.add_argument(
        "--every", type=int, default=5, metavar="N", help="appends between compact/full-sort runs (default 5)"
    )
    estimate.add_argument(
        "--merge-mb-per-second", type=float, metavar="S", help="merge speed (default: measured on this machine)"
    )
    add_common_options(estimate)
    estimate.set_defaults(handler=cmd_estimate)

    advise = commands.add_parser(
        "advise",
        help="cluster keys advised from the queries in Spark's event logs, with the files they would save",
        description=(
            "Reads Spark event logs (spark.eventLog.dir: files or rolling directories, plain, zstd, lz4 or snappy; "
            "local or an object-store prefix), finds the scans of Delta tables and their filters, and ranks "
            "candidate keys per table by the files the logged queries would read once clustered on each "
            "(docs/advise.md)."
        ),
    )
    advise.add_argument("event_logs", nargs="+", metavar="EVENT_LOGS", help="event log files, directories or prefixes")
    advise.add_argument("--table", action="append", metavar="TABLE_URI", help="only this table (repeatable)")
    advise.add_argument(
        "--target-rows", type=int, metavar="N", help="rows a clustered file holds (default: clustering.target_rows)"
    )
    advise.add_argument(
        "--sample-rows", type=int, default=200_000, metavar="N", help="rows sampled per table (default 200000)"
    )
    advise.add_argument("--min-queries", type=int, default=1, metavar="N", help="skip tables with fewer queries")
    advise.add_argument("--no-cost", action="store_true", help="skip pricing the best keys with the estimate's model")
    advise.add_argument(
        "--apply",
        action="store_true",
        help="set the best key as the table's cluster key where it clears --apply-factor",
    )
    advise.add_argument(
        "--apply-factor",
        type=float,
        default=1.5,
        metavar="X",
        help="--apply only where queries would read X times fewer files than now (default 1.5)",
    )
    add_common_options(advise)
    advise.set_defaults(handler=cmd_advise)

    status = commands.add_parser(
        "status",
        help="per table: state, pending work, group, quota occupation, last optimize times, health",
        description="Reads the tables' snapshots and the history table (self_optimizing.history_location).",
    )
    status.add_argument("table", nargs="*", metavar="TABLE_URI", help="tables (default: the configured tables)")
    status.add_argument("--cluster-by", metavar="a,b", help="cluster key (default: the table property)")
    status.add_argument(
        "--curve",
        choices=("hilbert", "zorder", "linear"),
        help="how a multi-column key orders rows (default: table property, else hilbert for 2+ columns)",
    )
    add_common_options(status)
    status.set_defaults(handler=cmd_status)

    ui = commands.add_parser(
        "ui",
        help="serve the status pages of tables read-only (what `watch --http-port` serves at /)",
        description=(
            "Pages at / (every table) and /tables/<name> (one table), JSON at /api/tables; read from the tables' "
            "logs and the history table at each request. Binds 127.0.0.1 unless --host says otherwise."
        ),
    )
    ui.add_argument("table", nargs="*", metavar="TABLE_URI", help="tables (default: the configured tables)")
    ui.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    ui.add_argument("--host", help="address to bind (default: http.host, 127.0.0.1)")
    ui.add_argument("--seconds", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    add_common_options(ui)
    ui.set_defaults(handler=cmd_ui)

    maintain = commands.add_parser(
        "maintain",
        help="vacuum expired files, checkpoint, clean the log and orphans of a table now",
        description=(
            "Vacuum never uses a retention below the table's delta.deletedFileRetentionDuration; orphan cleanup "
            "follows the rules of `recluster clean`. Settings: self_optimizing.maintenance.*"
        ),
    )
    maintain.add_argument("table", metavar="TABLE_URI", help=TABLE_HELP)
    maintain.add_argument("--dry-run", action="store_true", help="list what would be deleted, change nothing")
    add_common_options(maintain)
    maintain.set_defaults(handler=cmd_maintain)

    schema = commands.add_parser("metrics-schema", help="print the JSON Schema of a metrics record")
    schema.set_defaults(handler=cmd_metrics_schema, verbose=False)

    demo = commands.add_parser(
        "demo",
        help="live demo: a local table receives random-key appends while the job keeps it clustered",
        description=(
            "Creates a demo table, appends a batch of random keys every --interval seconds, runs the streaming "
            "job on it and shows the levels live; stops after --seconds or Ctrl-C with a summary."
        ),
    )
    demo.add_argument("--path", default="recluster-demo", help="folder for the demo table and checkpoint")
    demo.add_argument(
        "--table",
        metavar="URI",
        help="write the demo table here instead (e.g. s3://bucket/demo; must not exist yet); the checkpoint stays "
        "in --path",
    )
    demo.add_argument("--seconds", type=float, default=60, help="how long to run")
    demo.add_argument("--interval", type=float, default=1.0, help="seconds between appends")
    demo.add_argument("--rows", type=int, default=20_000, help="rows per append")
    demo.add_argument("--target-rows", type=int, default=100_000, help="rows per reclustered file")
    demo.add_argument("--seed", type=int, default=7)
    add_common_options(demo)
    demo.set_defaults(handler=cmd_demo)
    return parser
