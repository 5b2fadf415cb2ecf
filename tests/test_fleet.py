"""Three `recluster watch` processes sharing the tables of one storage root on the S3 emulator through leases on it
(docs/discovery.md#several-jobs): every table owned by exactly one job, balanced; one job killed with SIGKILL and its
tables owned again by the others within a bounded time; no two rounds on one table overlapping (checked from the
tables' logs: a round of ours reads at one version and commits after it, and the next round must read at or after
that commit); every appended row still there."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from recluster.delta.log_listing import log_versions
from tests.fleet_support import merged_in_each, ours, overlapping_rounds, partition, rss_mb, start_job, status
from tests.helpers import (
    append_clustered,
    http_get,
    kill_tree,
    row_multiset,
    wait_for,
)
from tests.s3_server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLES, JOBS, TTL = 18, 3, 15.0


def test_three_jobs_share_a_root_and_take_over_a_killed_jobs_tables(s3: S3Server, tmp_path: Path) -> None:
    options = s3.options()
    lake, leases = s3.table_uri("lake"), s3.table_uri("leases")
    rng = np.random.default_rng(44)
    uris = {f"{lake}/t{index:02d}" for index in range(TABLES)}
    appended: dict[str, list[pa.Table]] = {uri: [] for uri in uris}

    def append(uri: str) -> None:
        keys = rng.integers(0, 10**9, 1_000)
        appended[uri].append(append_clustered(uri, pa.table({"k": pa.array(keys, pa.int64())}), options))

    for uri in sorted(uris):
        append(uri)
    started = time.monotonic()
    jobs = [start_job(tmp_path, f"job{index}", s3, lake, leases, TTL) for index in range(JOBS)]
    ports = [port for _, port in jobs]
    stop_appends = threading.Event()

    def keep_appending() -> None:
        while not stop_appends.wait(0.2):
            append(sorted(uris)[int(rng.integers(0, TABLES))])

    appender = threading.Thread(target=keep_appending, daemon=True)
    try:
        shares: list[list[set[str]] | None] = [None]

        def settled(live: list[int]) -> bool:
            time.sleep(1)  # each request asks a driver's JVM for its query's progress: not 20 times a second
            shares[0] = partition(live, uris)
            return shares[0] is not None and max(map(len, shares[0])) - min(map(len, shares[0])) <= 1

        wait_for(lambda: settled(ports), "every table owned once, balanced", jobs[0][0], timeout=600)
        print(f"every table owned once after {time.monotonic() - started:.0f} s: {sorted(map(len, shares[0] or []))}")
        fleets = [(status(port) or {}).get("fleet", {}) for port in ports]
        assert len({fleet["job"] for fleet in fleets}) == JOBS  # each job names itself
        wait_for(
            lambda: all((status(p) or {}).get("fleet", {}).get("tables") == TABLES for p in ports),
            "every job's /status to show the fleet's totals",
            timeout=60,
        )
        assert all(len((status(p) or {})["fleet"]["jobs"]) == JOBS for p in ports)
        for port in ports:  # the page shows the same fleet: every job, this one marked, the tables each owns
            code, page = http_get(f"http://127.0.0.1:{port}/")
            assert code == 200 and f"Fleet: {JOBS} job(s) own {TABLES} table(s)" in page, page[-2000:]
            assert page.count("(this job)") == 1
            assert sum(map(int, re.findall(r'<span class="owned">(\d+)</span>', page))) == TABLES
        owners = list(shares[0] or [])
        appender.start()
        appending = time.monotonic()
        before = {uri: max(log_versions(uri, options)) for uri in uris}
        wait_for(  # the job about to be killed has rounds of its own on the tables the others take over
            lambda: merged_in_each([owners[-1]], before, options),
            "a merge by the job to be killed on a table it owns, while appends arrive",
            jobs[-1][0],
            timeout=180,
        )
        print(f"a merge by the job to be killed {time.monotonic() - appending:.1f} s after the appends began")
        memory = {f"job{i}": rss_mb(process) for i, (process, _) in enumerate(jobs)}
        print(f"resident memory (MB, the driver and its JVM): {memory}")
        killed = time.monotonic()
        kill_tree(jobs[-1][0])
        orphaned = owners[-1]
        wait_for(lambda: settled(ports[:-1]), "the killed job's tables owned by the others", jobs[0][0], timeout=120)
        takeover = time.monotonic() - killed
        print(f"takeover after kill -9: {takeover:.1f} s (ttl {TTL:.0f} s): {sorted(map(len, shares[0] or []))}")
        assert takeover < 60
        taken = {uri: max(log_versions(uri, options)) for uri in orphaned}
        wait_for(
            lambda: merged_in_each([orphaned], taken, options),
            "a merge by a survivor on a table the killed job owned",
            jobs[0][0],
            timeout=180,
        )
        print(f"a survivor's merge on a taken-over table {time.monotonic() - killed - takeover:.1f} s after takeover")
    finally:
        stop_appends.set()
        if appender.is_alive():
            appender.join()
        exits = []
        for index, (process, _) in enumerate(jobs):  # every job stopped, whatever failed
            if process.poll() is None and index < JOBS - 1:
                os.killpg(process.pid, signal.SIGTERM)
                exits.append(process.wait(timeout=120))
            elif process.poll() is None:
                kill_tree(process)
            if index < JOBS - 1 and process.returncode != 0:
                print((tmp_path / f"job{index}.log").read_text(errors="replace")[-5000:])
    assert exits == [0] * (JOBS - 1)  # the survivors stopped cleanly on SIGTERM
    for uri in sorted(uris):
        assert overlapping_rounds(uri, options) == [], uri
        table = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=["k"])
        assert row_multiset(table) == row_multiset(pa.concat_tables(appended[uri]))
    merged = sum(1 for uri in uris for v in log_versions(uri, options) if ours(uri, v, options))
    print(f"our commits over the run: {merged}")
    assert merged > 0
