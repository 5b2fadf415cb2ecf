"""The Delta Spark referee: one local Spark session with Delta Spark's jars, in its own venv and process
(`./dev referee` makes both), serving requests from the tests as JSON lines on stdin/stdout.

It imports nothing of recluster's: it is the protocol's reference implementation reading and writing the tables
recluster rewrites. Requests, one JSON object a line:
- {"op": "sql", "sql": ...}: the statement's rows;
- {"op": "read", "table" or "sql": ..., "out": ...}: a table's or a query's rows to a Parquet file;
- {"op": "stream", "table": ..., "checkpoint": ..., "out": ...}: a Delta streaming read of all available data,
  appended to a Parquet sink;
- {"op": "scan", "sql": ...}: the query's rows and the files its scans read after data skipping.
Each answer is one line: {"ok": true, ...} or {"ok": false, "error": ...}.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import traceback
from typing import Any

from pyspark.sql import SparkSession

TEST_SHORTCUTS = {
    "spark.sql.shuffle.partitions": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
    # small tables, many statements: fewer tasks, no .crc files, no MERGE source copy, no code generation
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.databricks.delta.merge.materializeSource": "none",
    "spark.sql.codegen.wholeStage": "false",
    # nor for single expressions: generating and compiling their Java code was a fifth of the referee's CPU (a
    # profile of its statements), and interpreted evaluation answers the same on a few thousand rows
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",  # the scan's metrics stay on the plan that ran
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",  # VACUUM lists in 2 tasks, not 10,000: 34 -> 3 s
    # a JVM of short statements spends its CPU compiling: the quick compiler only, and no concurrent collector
    # threads, cut the CPU of writing the feature tables (tests/delta_spark_tables.py) from 187 to 123 s
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # the plan each statement reports to Spark's listeners in its simple form, and joins by sorting rather than by
    # broadcasting a side (a job of its own): with TEST_MASTER, a few percent of the referee's CPU at most
    # (docs/getting-started.md#test-time)
    "spark.sql.ui.explainMode": "simple",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}
"""Settings that make the tests' many small statements fast; a benchmark (REFEREE_DEFAULTS=1) runs on Spark's and
Delta's defaults instead, as users do."""

TEST_MASTER = "local[1]"
"""The tests' referee runs its tasks one at a time: the suite is bound by the machine's CPU, not by the referee's
wall time, and a second task thread costs CPU in hand-offs and in more, smaller scan tasks. A benchmark's
(REFEREE_DEFAULTS=1) runs on two, like our own local Spark; REFEREE_MASTER overrides both."""


def session(jars_dir: str) -> SparkSession:
    jars = sorted(glob.glob(os.path.join(jars_dir, "*.jar")))
    if not jars:
        raise SystemExit(f"no Delta Spark jars in {jars_dir} (run ./dev referee)")
    defaults = os.environ.get("REFEREE_DEFAULTS") == "1"
    builder = (
        SparkSession.builder.master(os.environ.get("REFEREE_MASTER") or ("local[2]" if defaults else TEST_MASTER))
        .appName("delta-spark-referee")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("REFEREE_DRIVER_MEMORY", "1g"))
        .config("spark.sql.warehouse.dir", os.path.join(os.environ.get("REFEREE_WORK", "/tmp"), "warehouse"))
    )
    if not defaults:
        for key, value in TEST_SHORTCUTS.items():
            builder = builder.config(key, value)
    for key, value in json.loads(os.environ.get("REFEREE_CONF", "{}")).items():  # e.g. a cluster's driver host
        builder = builder.config(key, value)
    return builder.getOrCreate()


def plain(value: Any) -> Any:
    """A JSON-safe form of a Spark value (rows as dicts, dates and decimals as strings)."""
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def files_scanned(data_frame: Any) -> int:
    """Files the query's file scans read after partition pruning and data skipping (their numFiles metric)."""
    plan = data_frame._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    total = 0
    for index in range(leaves.size()):
        leaf = leaves.apply(index)
        metrics = leaf.metrics()
        if metrics.contains("numFiles"):
            total += int(metrics.apply("numFiles").value())
    return total


def write_arrow(data_frame: Any, out: str) -> int:
    import pyarrow.parquet as pq

    table = data_frame.toArrow()
    pq.write_table(table, out)
    return int(table.num_rows)


def serve(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "sql":
        frame = spark.sql(request["sql"])
        return {"rows": [plain(row) for row in frame.collect()]}
    if op == "read":
        if "sql" in request:
            frame = spark.sql(request["sql"])
        else:
            frame = spark.read.format("delta").options(**request.get("options", {})).load(request["table"])
        return {"count": write_arrow(frame, request["out"])}
    if op == "scan":
        frame = spark.sql(request["sql"])
        rows = frame.collect()
        return {"rows": [plain(row) for row in rows], "files": files_scanned(frame)}
    if op == "stream":
        reader = spark.readStream.format("delta").options(**request.get("options", {})).load(request["table"])
        query = (
            reader.writeStream.format("parquet")
            .option("checkpointLocation", request["checkpoint"])
            .trigger(availableNow=True)
            .start(request["out"])
        )
        query.awaitTermination()
        progress = query.recentProgress
        return {"batches": len(progress), "rows": sum(int(p["numInputRows"]) for p in progress)}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    out = os.fdopen(os.dup(1), "w")  # answers only: the JVM and everything else write to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spark = session(sys.argv[1])
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ok": True, "ready": spark.version}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "stop":
            break
        try:
            answer = {"ok": True, **serve(spark, request)}
        except Exception as error:
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"[:4000], "trace": traceback.format_exc()}
        print(json.dumps(answer), file=out, flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
