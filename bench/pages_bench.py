"""Status pages for many tables: `python -m bench.pages_bench [--quick]` (issue 22: under a second for 50 tables).

50 tables (quick: 10) of 6 overlapping appends each, one full optimize recorded in the history per table. Timed,
best of 5, over HTTP from the server `recluster ui` runs (every request reads the tables' logs): `GET /` and
`GET /tables/<name>` of one table, against the same work without a page (`recluster status --json`'s computation:
read_snapshot + table_status for every table) as the baseline. Writes bench/results/pages-<date>.json.
"""

from __future__ import annotations

import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from bench.common import log, publish, quick_cli
from jobs.health import HealthServer
from jobs.pages import PageSource, snapshot_views
from recluster.delta.log_writer import set_table_properties
from recluster.engine.api import read_snapshot
from recluster.engine.optimizer import history_store, table_status
from recluster.settings import CLUSTER_BY_PROPERTY, Settings
from recluster.settings_job import HttpSettings

REPEATS = 5


def best(action: Any) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        body: bytes = response.read()
        return body


def main(quick: bool = False) -> dict[str, Any]:
    count = 10 if quick else 50
    rng = np.random.default_rng(9)
    with tempfile.TemporaryDirectory(prefix="recluster-pages-bench-") as scratch:
        root = Path(scratch)
        settings = Settings(self_optimizing={"history_location": str(root / "history")})
        uris = []
        for index in range(count):
            path = root / f"table-{index:03d}"
            for _ in range(6):
                write_deltalake(
                    str(path), pa.table({"k": rng.integers(0, 10**9, 500), "v": rng.random(500)}), mode="append"
                )
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
            uris.append(str(path))
        log(f"pages bench: {count} tables written")
        history = history_store(settings)
        server = HealthServer(
            HttpSettings(port=0), pages=PageSource(lambda only: snapshot_views(uris, settings, history, only))
        )
        server.start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            index_seconds = best(lambda: fetch(base + "/"))
            table_seconds = best(lambda: fetch(f"{base}/tables/{urllib.parse.quote(uris[0], safe='')}"))
            size = len(fetch(base + "/"))
        finally:
            server.stop()

        def status_json() -> None:
            for uri in uris:
                table_status(read_snapshot(uri, settings=settings, keyless=True), settings=settings, history=history)

        status_seconds = best(status_json)
    rows = [
        [f"GET / for {count} tables, s (vs status --json's work)", index_seconds, status_seconds,
         index_seconds / status_seconds, "< 1 s"],
        ["GET /tables/<name>, s (vs status --json's work for all tables)", table_seconds, status_seconds,
         table_seconds / status_seconds, ""],
    ]  # fmt: skip
    result = {
        "quick": quick,
        "tables": count,
        "index_bytes": size,
        "index_seconds": index_seconds,
        "table_seconds": table_seconds,
        "status_seconds": status_seconds,
    }
    return publish("pages", "status pages", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.pages_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
