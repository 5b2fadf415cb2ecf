"""The Delta Spark side of a streaming-writers run (tests/streaming_writers.py), run with the referee environment's
python (pyspark 4.2, Delta Spark 4.4: `./dev referee`); it imports nothing of recluster's.

Creates a `CLUSTER BY (a, b)` table, waits for the go file (the driver starts `recluster watch` first), then for
`--seconds` (or until the `--stop` file appears): a Structured Streaming query appends rate-source rows every
second (`writeStream.format("delta")`), with keys that drift over time; DELETE, UPDATE and MERGE in turn every
`--dml-every` seconds, each on a range of rows already written (so that its effect does not depend on when it ran:
the driver replays the ones that committed on a table nobody rewrites); with `--optimize-every`, Delta's `OPTIMIZE`
every so many seconds. Every statement's outcome and the query's state are events, one JSON object a line, in
`--events`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def row_columns(rate: int) -> list[str]:
    """The table's columns as SQL expressions of `v` (the rate source's value): `a` moves to a new block of 1,000
    values every minute of rows, `b` to a new block of 100,000 every 90 seconds of rows; `c` counts updates."""
    return [
        "v",
        f"floor(v / {rate * 60}) * 1000 + pmod(hash(v, 1), 1000) AS a",
        f"floor(v / {rate * 90}) * 100000 + pmod(hash(v, 2), 100000) AS b",
        "CAST(0 AS BIGINT) AS c",
    ]


def statement(kind: str, table: str, low: int, high: int, number: int, rate: int) -> str:
    """One DML statement on the rows `low <= v <= high` (written before it starts); MERGE also inserts 50 new
    rows with negative values of their own."""
    target = f"delta.`{table}`"
    if kind == "delete":
        return f"DELETE FROM {target} WHERE v BETWEEN {low} AND {high} AND pmod(v, 3) = 0"
    if kind == "update":
        return f"UPDATE {target} SET c = c + 1, a = a + 1 WHERE v BETWEEN {low} AND {high}"
    columns = ", ".join(row_columns(rate)).replace("CAST(0 AS BIGINT) AS c", "CAST(100 AS BIGINT) AS c")
    source = (
        f"SELECT {columns} FROM (SELECT id AS v FROM range({low}, {high + 1}) "
        f"UNION ALL SELECT -{number * 100} - id - 1 AS v FROM range(0, 50))"
    )
    return (
        f"MERGE INTO {target} AS t USING ({source}) AS s ON t.v = s.v "
        "WHEN MATCHED THEN UPDATE SET c = t.c + 10 WHEN NOT MATCHED THEN INSERT *"
    )


class Events:
    def __init__(self, path: Path) -> None:
        self._out = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def write(self, event: str, **fields: Any) -> None:
        with self._lock:
            record = {"event": event, "t": round(time.monotonic() - self.started, 3), **fields}
            self._out.write(json.dumps(record) + "\n")
            self._out.flush()


CONFLICT = re.compile(r"\[(DELTA_CONCURRENT_[A-Z_]+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED)")
WINNER_VERSION = re.compile(r"committed at version (\d+)|Conflicting commit: \{[^\n]*?\"version\":(\d+)")
ATTEMPTS = 5
"""A statement that lost to a concurrent commit is run again (as users do), up to this many times in all."""


def winner(table: str, version: int) -> str:
    """Who wrote a version: `recluster` for our rewrites, else Delta's operation (STREAMING UPDATE, OPTIMIZE...)."""
    lines = (Path(table) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    info: dict[str, Any] = next((json.loads(line)["commitInfo"] for line in lines if '"commitInfo"' in line), {})
    return "recluster" if info.get("recluster.producer") == "recluster" else str(info.get("operation"))


def outcome(table: str, error: BaseException) -> dict[str, Any]:
    """A failed statement's conflict (Delta's error class) and the commit it lost to, where Delta names it."""
    text = str(error)
    conflict = CONFLICT.search(text)
    version = WINNER_VERSION.search(text)
    lost_to = winner(table, int(version.group(1) or version.group(2))) if version else None
    return {"conflict": conflict.group(1) if conflict else None, "winner": lost_to, "error": text[:1500]}


def run_statement(spark: Any, table: str, text: str, events: Events, **fields: Any) -> bool:
    """Run `text`, again after each conflict, up to ATTEMPTS times; every failed attempt is an event. True when
    it committed (a failed attempt commits nothing)."""
    for attempt in range(1, ATTEMPTS + 1):
        started = time.monotonic()
        try:
            spark.sql(text).collect()
            events.write("statement", **fields, attempt=attempt, ok=True, seconds=time.monotonic() - started)
            return True
        except Exception as error:
            failed = outcome(table, error)
            events.write("statement", **fields, attempt=attempt, ok=False, **failed)
            if failed["conflict"] is None:
                return False
    return False


def dml_loop(spark: Any, args: argparse.Namespace, events: Events, stop: threading.Event) -> None:
    rng = random.Random(11)
    kinds = ("delete", "update", "merge")
    number = 0
    while not stop.wait(args.dml_every):
        newest = spark.sql(f"SELECT max(v) AS v FROM delta.`{args.table}`").collect()[0]["v"]
        margin = args.rate * 5
        if newest is None or newest < margin + args.dml_rows:
            continue
        low = rng.randrange(0, int(newest) - margin - args.dml_rows)
        kind = kinds[number % len(kinds)]
        text = statement(kind, args.table, low, low + args.dml_rows - 1, number, args.rate)
        ok = run_statement(spark, args.table, text, events, kind=kind, number=number)
        events.write("dml", kind=kind, number=number, sql=text, ok=ok)
        number += 1


def optimize_loop(spark: Any, args: argparse.Namespace, events: Events, stop: threading.Event) -> None:
    number = 0
    while not stop.wait(args.optimize_every):
        run_statement(spark, args.table, f"OPTIMIZE delta.`{args.table}`", events, kind="optimize", number=number)
        number += 1


def referee_session(jars: str) -> Any:
    """The referee's Spark session (tests/referee/server.py: the same jars and settings as the tests')."""
    spec = importlib.util.spec_from_file_location("referee_server", ROOT / "tests" / "referee" / "server.py")
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    return server.session(jars)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jars", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--go", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--stop", type=Path, help="stop writing once this file exists (before --seconds are up)")
    parser.add_argument("--rate", type=int, default=1000, help="rows a second")
    parser.add_argument("--dml-every", type=float, default=5)
    parser.add_argument("--dml-rows", type=int, default=2000)
    parser.add_argument("--optimize-every", type=float, default=0)
    args = parser.parse_args()
    events = Events(args.events)
    spark = referee_session(args.jars)
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(  # deletion vectors: DML marks rows deleted instead of copying whole files (Databricks' default)
        f"CREATE TABLE delta.`{args.table}` (v BIGINT, a BIGINT, b BIGINT, c BIGINT) USING delta CLUSTER BY (a, b) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    events.write("created", spark=spark.version)
    while not args.go.exists():
        time.sleep(0.2)
    rows = spark.readStream.format("rate").option("rowsPerSecond", args.rate).load()
    query = (
        rows.withColumnRenamed("value", "v")
        .selectExpr(*row_columns(args.rate))
        .writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="1 second")
        .start(args.table)
    )
    events.write("writing", query=str(query.id))
    stop = threading.Event()
    loops = [threading.Thread(target=dml_loop, args=(spark, args, events, stop), daemon=True)]
    if args.optimize_every > 0:
        loops.append(threading.Thread(target=optimize_loop, args=(spark, args, events, stop), daemon=True))
    for loop in loops:
        loop.start()
    deadline = time.monotonic() + args.seconds
    failed = None
    while time.monotonic() < deadline and not (args.stop and args.stop.exists()):
        time.sleep(1)
        if not query.isActive:
            failed = query.exception()
            events.write("writer_failed", error=str(failed)[:3000] if failed else "stopped")
            break
    stop.set()
    for loop in loops:
        loop.join()
    progress = query.recentProgress
    active = query.isActive
    if active:
        query.stop()
    events.write("stopped", active=active, batches=len(progress) and int(progress[-1]["batchId"]) + 1)
    spark.stop()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        raise
