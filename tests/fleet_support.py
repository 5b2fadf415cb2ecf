"""Several `recluster watch` processes sharing a storage root's tables through leases on the S3 emulator: starting
them, reading what each owns from its `/status`, and checking from the tables' logs that no two rounds on one table
overlapped. Used by tests/test_fleet.py and bench/fleet_scale_bench.py."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from recluster.delta.log import PRODUCER, PRODUCER_KEY
from recluster.delta.log_listing import log_versions
from recluster.delta.storage import read_log_actions
from tests.helpers import descendants, http_get, start_logged
from tests.s3_server import S3Server
from tests.spark_cluster import free_port


def start_job(
    tmp_path: Path,
    name: str,
    s3: S3Server,
    lake: str,
    leases: str,
    ttl: float,
    renew: float = 3.0,
    interval: float = 3.0,
    properties: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """A `recluster watch` on every table below `lake` (which inherit `properties`), sharing them through leases
    under `leases`, with `env` over the suite's environment; (process, its HTTP port)."""
    port = free_port()
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage_options": s3.options(),
                "discovery": {
                    "interval_seconds": interval,
                    "roots": [{"uri": lake, "max_depth": 1, "properties": properties or {}}],
                    "leases": {"root": leases, "ttl_seconds": ttl, "renew_seconds": renew},
                },
                "clustering": {"target_rows": 4_000},
                "spark": {"master": "local[1]"},
                "stream": {"checkpoint_location": str(tmp_path / name / "checkpoint"), "trigger_interval_seconds": 1},
                "http": {"port": port},
            }
        )
    )
    log = tmp_path / f"{name}.log"
    process = start_logged([sys.executable, "-m", "recluster.cli", "watch", "--config", str(config), "-v"], log, env)
    return process, port


def status(port: int) -> dict[str, Any] | None:
    code, body = http_get(f"http://127.0.0.1:{port}/status")
    answer: dict[str, Any] | None = json.loads(body) if code == 200 else None
    return answer


def owned(port: int) -> set[str] | None:
    answer = status(port)
    return None if answer is None else {table["table"] for table in answer["tables"]}


def leases_held(port: int) -> int | None:
    """How many tables the job holds the lease of, as its last lease pass left it (None: no answer)."""
    answer = status(port)
    if answer is None:
        return None
    fleet = answer["fleet"]
    return int(next(job["tables"] for job in fleet["jobs"] if job["job"] == fleet["job"]))


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
        info: dict[str, Any] = next(
            (a["commitInfo"] for a in read_log_actions(uri, version, options) if "commitInfo" in a), {}
        )
        if info.get(PRODUCER_KEY) == PRODUCER:
            read, commits = rounds.setdefault(info["recluster.runId"], [int(info["recluster.readVersion"]), version])
            rounds[info["recluster.runId"]] = [read, max(commits, version)]
    ordered = sorted(rounds.items(), key=lambda item: item[1][0])
    return [(a, b) for (a, (_, end)), (b, (start, _)) in itertools.pairwise(ordered) if start < end]


def merged_in_each(shares: list[set[str]], since: dict[str, int], options: dict[str, str]) -> bool:
    """Whether each share holds a table with a commit of ours after its version in `since` (a table has one owner
    at a time, so that owner made it)."""
    time.sleep(1)  # one listing of each table's log a second, not 20
    return all(any(ours_after(uri, since[uri], options) for uri in share) for share in shares)


def ours_after(uri: str, version: int, options: dict[str, str]) -> bool:
    return any(ours(uri, v, options) for v in log_versions(uri, options) if v > version)


def ours(uri: str, version: int, options: dict[str, str]) -> bool:
    return any(a.get("commitInfo", {}).get(PRODUCER_KEY) == PRODUCER for a in read_log_actions(uri, version, options))


def rss_mb(process: subprocess.Popen[bytes], *, peak: bool = False) -> float:
    """Resident memory of the process and its descendants in MB (`peak`: each one's high-water mark, summed)."""
    total = 0
    field = "VmHWM:" if peak else "VmRSS:"
    for pid in [process.pid, *descendants(process.pid)]:
        try:
            fields = Path(f"/proc/{pid}/status").read_text().split(field)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[0])
    return round(total / 1024, 1)
