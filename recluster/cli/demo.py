"""`demo`: a local table written to and reclustered live."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from recluster.cli.common import UsageError, print_json, settings_of
from recluster.cli.render import render_info, render_status
from recluster.cli.watch import run_until_signal, stop_signals
from recluster.engine.api import table_info
from recluster.settings import TableSettings, table_storage_options


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil
    import threading
    import time

    import numpy as np
    from deltalake import DeltaTable
    from rich.live import Live

    from jobs.autorecluster import start_job
    from recluster.delta.storage import normalize_uri
    from recluster.engine.demo import append_demo_batch, history_totals
    from recluster.spark.session import spark_session

    if args.rows < 1 or args.target_rows < 1 or args.seconds <= 0 or args.interval <= 0:
        raise UsageError("--rows and --target-rows must be positive numbers, --seconds and --interval above 0")
    root = Path(args.path)
    table, checkpoint = args.table or str(root / "events"), root / "checkpoint"
    base = settings_of(args)
    options = table_storage_options(base, None)
    if args.table and DeltaTable.is_deltatable(table, dict(options)):
        raise UsageError(f"{table} is already a Delta table: the demo writes a new one (choose another --table)")
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(args.seed)
    append_demo_batch(table, rng, args.rows, 0, options)
    settings = base.model_copy(
        update={
            "clustering": base.clustering.model_copy(update={"target_rows": args.target_rows}),
            "stream": base.stream.model_copy(
                update={"checkpoint_location": str(checkpoint), "starting_version": "earliest"}
            ),
            "tables": [TableSettings(uri=table)],
        }
    )
    console = Console(stderr=True)
    console.print(f"demo table {table}: appending {args.rows:,} random-key rows every {args.interval}s")
    with stop_signals() as stop:  # a Ctrl-C while Spark starts stops the demo once it runs
        spark = spark_session(settings.spark)
        stop.catch()
        query, handler = start_job(spark, settings, settings.tables)
        watched = normalize_uri(table)  # the job keys its tables by normalized URI (a relative path is made absolute)
        appended = [1]
        stop_writer = threading.Event()

        def writer() -> None:
            while not stop_writer.wait(args.interval):
                append_demo_batch(table, rng, args.rows, appended[0], options)
                appended[0] += 1

        thread = threading.Thread(target=writer, name="demo-writer", daemon=True)
        started = time.monotonic()
        thread.start()
        with Live(console=console, auto_refresh=False, transient=not console.is_terminal) as live:

            def tick() -> None:
                status = handler.status.get(watched)
                live.update(render_status(status, appended[0], time.monotonic() - started), refresh=True)

            try:
                run_until_signal(query, handler, args.seconds, tick, stop)
            finally:
                stop_writer.set()
                thread.join()
    result = table_info(table, settings=settings)  # the summary: from the table's log, its whole history
    bytes_appended, bytes_written, merges = history_totals(table, options)
    summary: dict[str, Any] = {
        "appends": appended[0],
        "rows": result.info.table.total_rows,
        "merges": merges,
        "bytes_appended": bytes_appended,
        "bytes_written": bytes_written,
        "info": result.to_dict(),
    }
    if args.json:
        print_json(summary)
    else:
        render_info(result, Console())
        appended_bytes = max(summary["bytes_appended"], 1)
        Console().print(
            f"{summary['appends']} appends, {summary['merges']} merges, write amplification "
            f"{summary['bytes_written'] / appended_bytes:.2f} (bytes rewritten / bytes appended)"
        )
    return 0
