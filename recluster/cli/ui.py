"""`recluster ui TABLE...`: the job's status pages, read-only, without running the job."""

from __future__ import annotations

import argparse
import sys
import time

from recluster.cli.common import UsageError, settings_of


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve `/`, `/tables/<name>` and `/api/tables` for the given tables until interrupted (or --seconds)."""
    from jobs.health import HealthServer
    from jobs.pages import PageSource, snapshot_views
    from recluster.engine.optimizer import history_store

    settings = settings_of(args)
    uris = args.table or [t.uri for t in settings.tables]
    if not uris:
        raise UsageError("no tables: pass TABLE_URI arguments or list tables in --config")
    http = settings.http.model_copy(update={"port": args.port, **({"host": args.host} if args.host else {})})
    history = history_store(settings)
    pages = PageSource(lambda only: snapshot_views(uris, settings, history, only), title="recluster (read-only)")
    try:
        server = HealthServer(http, pages=pages).start()
    except OSError as error:
        raise UsageError(f"cannot serve HTTP on {http.host}:{http.port}: {error.strerror}") from None
    print(f"serving the status pages of {len(uris)} table(s) at http://{http.host}:{server.port}/", flush=True)
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.stop()
    return 0
