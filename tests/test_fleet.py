"""Three `recluster watch` processes sharing the tables of one storage root on the S3 emulator through leases on it
(docs/discovery.md#several-jobs): every table owned by exactly one job, balanced; one job killed with SIGKILL and its
tables owned again by the others within a bounded time; no two rounds on one table overlapping (checked from the
tables' logs: a round of ours reads at one version and commits after it, and the next round must read at or after
that commit); every appended row still there."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from recluster.delta.log import PRODUCER, PRODUCER_KEY
from recluster.delta.storage import log_versions, read_log_actions
from tests.helpers import (
    append_clustered,
    descendants,
    http_get,
    kill_tree,
    row_multiset,
    start_logged,
    wait_for,
)
from tests.s3_server import S3Server
from tests.spark_cluster import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLES, JOBS, TTL = 18, 3, 15.0


def start_job(tmp_path: Path, name: str, s3: S3Server, lake: str, leases: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage_options": s3.options(),
                "discovery": {
                    "interval_seconds": 3,
                    "roots": [{"uri": lake, "max_depth": 1}],
                    "leases": {"root": leases, "ttl_seconds": TTL, "renew_seconds": 3},
                },
                "clustering": {"target_rows": 4_000},
                "spark": {"master": "local[1]"},
                "stream": {"checkpoint_location": str(tmp_path / name / "checkpoint"), "trigger_interval_seconds": 1},
                "http": {"port": port},
            }
        )
    )
    log = tmp_path / f"{name}.log"
    process = start_logged([sys.executable, "-m", "recluster.cli", "watch", "--config", str(config), "-v"], log)
    return process, port


def status(port: int) -> dict[str, Any] | None:
    code, body = http_get(f"http://127.0.0.1:{port}/status")
    answer: dict[str, Any] | None = json.loads(body) if code == 200 else None
    return answer


def owned(port: int) -> set[str] | None:
    answer = status(port)
    return None if answer is None else {table["table"] for table in answer["tables"]}


def partition(ports: list[int], tables: set[str]) -> list[set[str]] | None:
    """What each job owns when together they own every table exactly once, else None."""
    shares = [owned(port) for port in ports]
    if any(share is None for share in shares):
        return None
    counted = [table for share in shares for table in share or ()]
    return shares if sorted(counted) == sorted(tables) else None  # type: ignore[return-value]


def overlapping_rounds(uri: str, options: dict[str, str]) -> list[tuple[str, str]]:
    """Pairs of our rounds on one table whose [read version, last commit] intervals overlap."""
    rounds: dict[str, list[int]] = {}
    for version in log_versions(uri, options):
        info = next((a["commitInfo"] for a in read_log_actions(uri, version, options) if "commitInfo" in a), {})
        if info.get(PRODUCER_KEY) == PRODUCER:
            read, commits = rounds.setdefault(info["recluster.runId"], [int(info["recluster.readVersion"]), version])
            rounds[info["recluster.runId"]] = [read, max(commits, version)]
    ordered = sorted(rounds.items(), key=lambda item: item[1][0])
    return [(a, b) for (a, (_, end)), (b, (start, _)) in itertools.pairwise(ordered) if start < end]


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
    jobs = [start_job(tmp_path, f"job{index}", s3, lake, leases) for index in range(JOBS)]
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
        memory = {f"job{i}": _rss_mb(process) for i, (process, _) in enumerate(jobs)}
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
    merged = sum(1 for uri in uris for v in log_versions(uri, options) if _ours(uri, v, options))
    print(f"our commits over the run: {merged}")
    assert merged > 0


def merged_in_each(shares: list[set[str]], since: dict[str, int], options: dict[str, str]) -> bool:
    """Whether each share holds a table with a commit of ours after its version in `since` (a table has one owner
    at a time, so that owner made it)."""
    time.sleep(1)  # one listing of each table's log a second, not 20
    return all(any(_ours_after(uri, since[uri], options) for uri in share) for share in shares)


def _ours_after(uri: str, version: int, options: dict[str, str]) -> bool:
    return any(_ours(uri, v, options) for v in log_versions(uri, options) if v > version)


def _ours(uri: str, version: int, options: dict[str, str]) -> bool:
    return any(a.get("commitInfo", {}).get(PRODUCER_KEY) == PRODUCER for a in read_log_actions(uri, version, options))


def _rss_mb(process: subprocess.Popen[bytes]) -> float:
    total = 0
    for pid in [process.pid, *descendants(process.pid)]:
        try:
            fields = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[0])
    return round(total / 1024, 1)
