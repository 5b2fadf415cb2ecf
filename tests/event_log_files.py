"""Spark event log content for the advise and benefit tests: one query's events (plan, driver metrics, end), the
framings Spark's lz4 and snappy codecs write (lz4-java's and snappy-java's streams), and real Spark applications that
write event logs (tests/spark_event_logs.py, run by the referee's Python)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa

from recluster.core.advice.scans import DRIVER_METRICS, SQL_END, SQL_START
from recluster.engine.event_logs import LZ4_MAGIC, SNAPPY_MAGIC
from tests.referee import REFEREE_JARS, REFEREE_PYTHON, referee_environment

SPARK_APPLICATIONS = Path(__file__).with_name("spark_event_logs.py")


def plan(location: str, name: str = "Scan parquet", files_id: int = 10) -> dict[str, Any]:
    scan = {
        "nodeName": name,
        "metadata": {"Location": location, "PushedFilters": "[EqualTo(a,5)]", "PartitionFilters": "[]"},
        "metrics": [
            {"name": "number of files read", "accumulatorId": files_id},
            {"name": "size of files read", "accumulatorId": files_id + 1},
        ],
        "children": [],
    }
    return {"nodeName": "Filter", "metadata": {}, "metrics": [], "children": [scan]}


def execution(number: int, location: str, files: int, name: str = "Scan parquet") -> list[dict[str, Any]]:
    return [
        {"Event": SQL_START, "executionId": number, "time": 1_000 * number, "sparkPlanInfo": plan(location, name)},
        {"Event": DRIVER_METRICS, "executionId": number, "accumUpdates": [[10, files], [11, 100 * files]]},
        {"Event": SQL_END, "executionId": number, "time": 1_000 * number + 5},
    ]


def lz4_java(data: bytes, block: int = 1000) -> bytes:
    """lz4-java's LZ4BlockOutputStream framing (Spark's lz4 codec), checksums left zero (not checked)."""
    codec, out = pa.Codec("lz4_raw"), b""
    for start in range(0, len(data), block):
        chunk = data[start : start + block]
        packed = codec.compress(chunk).to_pybytes()
        out += LZ4_MAGIC + bytes([0x25]) + struct.pack("<iii", len(packed), len(chunk), 0) + packed
    return out + LZ4_MAGIC + bytes([0x10]) + struct.pack("<iii", 0, 0, 0)


def snappy_java(data: bytes, block: int = 1000) -> bytes:
    """snappy-java's SnappyOutputStream framing (Spark's snappy codec)."""
    codec, out = pa.Codec("snappy"), SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    for start in range(0, len(data), block):
        packed = codec.compress(data[start : start + block]).to_pybytes()
        out += struct.pack(">i", len(packed)) + packed
    return out


def run_spark_applications(applications: list[dict[str, Any]], work: Path) -> None:
    """Run Spark applications (each `{"conf": {...}, "sql": [...]}`, event logs on) through Delta Spark, one session
    each, in the referee's Python; they must all succeed."""
    spec = work / "applications.json"
    spec.write_text(json.dumps(applications))
    done = subprocess.run(
        [str(REFEREE_PYTHON), str(SPARK_APPLICATIONS), str(REFEREE_JARS), str(spec)],
        capture_output=True,
        text=True,
        cwd=work,
        env=referee_environment(work),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
