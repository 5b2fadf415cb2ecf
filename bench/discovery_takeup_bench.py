"""A first start on many found tables: `python -m bench.discovery_takeup_bench [--quick] [--tables N]` (issue 44).

N small Delta tables (one 200-row commit each, cluster key from the root's properties) under one root on the S3
emulator (moto_server), read through the fault front of tests/faults adding LATENCY_MS to every request (an object
store answers in tens of milliseconds; moto on loopback in a few, and it is one Python process, so on this 2-core
machine the emulator's CPU, not the waiting, would be measured). One job's discovery
(`recluster/engine/job_discovery.py`, no Spark: loading a found table needs none) sweeps the root and takes every
table up: first reading one table at a time (the baseline: `discovery.threads: 1`), then with the default threads,
alternating, twice each. Reported: the seconds from the first pass to every table taken up (the root's listing and
each table's properties read included), and the process's peak memory. N = 2,000 (quick: 200). Writes
bench/results/discovery-takeup[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from bench.common import log, process_peak_rss_mb, publish
from docgen.figures import ratio_row
from recluster.engine.handler import ReclusterHandler
from recluster.engine.job_discovery import JobDiscovery
from recluster.settings import Settings
from recluster.settings_discovery import DiscoverySettings, StorageRoot
from tests.faults.front import FaultFront
from tests.faults.plan import FaultKind, FaultRule, Target
from tests.s3_server import moto_server

ROWS = 200
ROUNDS = 2
LATENCY_MS = 20


def write_tables(root: str, count: int, options: dict[str, str]) -> None:
    rng = np.random.default_rng(44)

    def write(index: int) -> None:
        keys = pa.array(rng.integers(0, 10**9, ROWS), pa.int64())
        write_deltalake(f"{root}/t{index:05d}", pa.table({"k": keys}), storage_options=options)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(count)))


def take_up_everything(root: str, count: int, options: dict[str, str], threads: int) -> tuple[float, int]:
    """Seconds until every table below `root` is taken up by a fresh job's discovery, and the passes it took."""
    discovery_settings = DiscoverySettings(
        interval_seconds=0.001,  # every pass lists again: the root's listing budget is resumed pass after pass
        roots=[StorageRoot(uri=root, max_depth=1, properties={"recluster.clusterBy": "k"})],
        threads=threads,
    )
    settings = Settings(discovery=discovery_settings, storage_options=options)
    handler = ReclusterHandler(settings, settings.tables, spark=None)
    discovery = JobDiscovery(settings, None, frozenset(), handler.take_up_found, handler.let_go, None)
    started, passes = time.monotonic(), 0
    while len(discovery.found_by) < count:
        discovery.run_pass()
        passes += 1
        if discovery.errors:
            raise RuntimeError(f"discovery failed: {discovery.errors}")
    seconds = time.monotonic() - started
    loaded = sum(1 for status in handler.status.values() if status.error is None)
    if loaded != count:
        raise RuntimeError(f"{count - loaded} tables failed to load: the figures would be wrong")
    return seconds, passes


def main(quick: bool = False, tables: int | None = None) -> dict[str, Any]:
    count = tables or (200 if quick else 2_000)
    began = time.monotonic()
    default_threads = DiscoverySettings().threads
    times: dict[int, list[float]] = {1: [], default_threads: []}
    passes: dict[int, int] = {}
    with (
        tempfile.TemporaryDirectory(prefix="recluster-takeup-") as work,
        moto_server(Path(work)) as s3,
        FaultFront(s3.endpoint, Path(work) / "front.log") as front,
    ):
        root = s3.table_uri("lake")
        started = time.monotonic()
        write_tables(root, count, s3.options())
        log(f"{count} tables written in {time.monotonic() - started:.0f} s")
        front.plan(0, FaultRule(FaultKind.LATENCY, Target.ANY, latency_seconds=LATENCY_MS / 1000))
        options = {**s3.options(), "AWS_ENDPOINT_URL": front.endpoint}
        for round_ in range(ROUNDS):
            for threads in (1, default_threads) if round_ % 2 == 0 else (default_threads, 1):
                seconds, passes[threads] = take_up_everything(root, count, options, threads)
                times[threads].append(seconds)
                log(f"threads={threads}: {count} tables taken up in {seconds:.1f} s ({passes[threads]} passes)")
    serial, threaded = statistics.median(times[1]), statistics.median(times[default_threads])
    rows = [
        ratio_row(f"{count} found tables taken up (s, median of {ROUNDS})", threaded, serial, "< 0.5"),
        ratio_row("per table (ms)", threaded / count * 1000, serial / count * 1000, "-"),
    ]
    result = {
        "tables": count,
        "latency_ms": LATENCY_MS,
        "threads": default_threads,
        "take_up_seconds": {str(k): v for k, v in times.items()},
        "passes": {str(k): v for k, v in passes.items()},
        "peak_rss_mb": process_peak_rss_mb(),
        "seconds": time.monotonic() - began,
    }
    return publish(
        "discovery-takeup",
        f"First start on {count} found tables on the S3 emulator ({LATENCY_MS} ms a request): {default_threads} "
        "threads vs one at a time",
        quick,
        rows,
        result,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.discovery_takeup_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 tables")
    parser.add_argument("--tables", type=int, help="how many tables (default 2,000; 200 with --quick)")
    arguments = parser.parse_args()
    main(quick=arguments.quick, tables=arguments.tables)
