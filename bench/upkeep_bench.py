"""Incremental upkeep against Delta's OPTIMIZE (issue 33): `python -m bench.upkeep_bench [--quick] [--budget MIN]`.

The same appends (40 and 400 of them) of four workloads: uniform int64 keys `k`; timestamps `ts` with 5% late rows,
late by at most 4 hours ("late-by-4") or by any amount ("late-by-any"); random `(a, b)` (an int in [0, 1000), a
10-letter string). Strategies, each on its own table: recluster's default policy (one `absorb` round after every
append, as the job does) in this process; liquid clustering (`CLUSTER BY` the key) with `OPTIMIZE` after every
append and after every 5; a plain table with `OPTIMIZE ... ZORDER BY (key)` every 5. Delta runs in one warm Delta
Spark 4.4 process (pyspark 4.2, the tests' referee environment, `./dev referee`) for the whole run: the JVM start
is not in any figure. Appends are the same Parquet slices: liquid tables get them through Delta Spark (`INSERT INTO
... SELECT * FROM parquet.`slice``: delta-rs cannot write a table with the `clustering` writer feature), the
recluster and ZORDER tables through delta-rs; `recluster_spark_appends` (40-append cases) is recluster on a table
Delta Spark appends to. Both sides aim at the same file size (recluster's `target_file_bytes` = Delta's
`optimize.maxFileSize` = the data's bytes / `files`, recluster's `target_rows` = the rows / `files`).

Measured after every append (after its maintenance, when due): depth (recluster's metric on each key column's min/max
alone, mean over the key columns, so it means the same on every table) and files read per predicate (per key column,
200 predicates at random places covering 0.1% of the range the appended rows span so far, a string column: one
value appended so far; the files whose min/max stats intersect; mean over predicates, then over key columns). Per
strategy: their time averages, write amplification (bytes of the files maintenance added / bytes the appends added,
each table's own), compute seconds per append (maintenance wall seconds / appends, warm) and the rows checked at
the end (count + order-independent hash against the input). Writes bench/results/upkeep[-quick]-<date>.json after
every strategy; the summary and goals come from docgen.upkeep_report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from bench.common import log, publish, write_results
from bench.compare.measurement import depth, live_sizes
from bench.compare.strategies import Context, recluster_round
from bench.compare.workloads import SEED
from bench.upkeep_cases import EVERY, STRATEGIES, Case, Strategy, cases
from docgen.figures import RESULTS
from docgen.upkeep_report import goals, summary_rows
from recluster.settings import CLUSTER_BY_PROPERTY, ClusteringSettings, Settings
from tests.file_stats import Predicates, files_read
from tests.fingerprints import row_fingerprint
from tests.referee import Referee, referee_missing
from tests.workload_data import append

DRIVER_MEMORY = "3g"
SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "2"}
"""Session settings for Delta on two cores: on its defaults (200 shuffle partitions, 50 snapshot partitions) one
OPTIMIZE of a 1 MB table took 17 s on this machine, 4 s with these; maxFileSize is set per case."""


def key_depth(path: Path, settings: Settings, key: tuple[str, ...]) -> float:
    """recluster's average depth on each key column alone, mean over the columns (a curve key's depth needs
    recluster's range bounds, which only its own table has)."""
    return float(np.mean([depth(path, settings, (name,))[0] for name in key]))


# ---- one strategy on one case -------------------------------------------------------------------------------


class DeltaSpark:
    """The warm Delta Spark process: appends of Parquet slices and OPTIMIZE statements."""

    def __init__(self, work: Path) -> None:
        self.referee = Referee(work, defaults=True, driver_memory=DRIVER_MEMORY)
        for name, value in SPARK_CONF.items():
            self.referee.sql(f"SET {name}={value}")

    def set_file_bytes(self, file_bytes: int) -> None:
        self.referee.sql(f"SET spark.databricks.delta.optimize.maxFileSize={file_bytes}")

    def append(self, table: Path, part: Path, first: bool, key: tuple[str, ...], liquid: bool) -> None:
        if not first:
            self.referee.sql(f"INSERT INTO delta.`{table}` SELECT * FROM parquet.`{part}`")
            return
        self.referee.sql(f"CREATE TABLE delta.`{table}` USING delta AS SELECT * FROM parquet.`{part}`")
        if liquid:  # (CTAS takes no CLUSTER BY on a path)
            self.referee.sql(f"ALTER TABLE delta.`{table}` CLUSTER BY ({', '.join(key)})")
        else:
            self.referee.sql(
                f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{CLUSTER_BY_PROPERTY}' = '{','.join(key)}')"
            )

    def run(self, statement: str) -> None:
        self.referee.sql(statement)

    def stop(self) -> None:
        self.referee.stop()


def run_strategy(
    strategy: Strategy,
    case: Case,
    batches: list[pa.Table],
    parts: list[Path],
    predicates: Predicates,
    spark: DeltaSpark,
    settings: Settings,
    path: Path,
) -> dict[str, Any]:
    key = case.workload.key
    ctx = Context(spark=None, settings=settings, key=key)
    maintain = recluster_round(False, "absorb")
    series: list[dict[str, Any]] = []
    appended = written = 0
    maintenance_seconds = append_seconds = 0.0
    for index, (batch, part) in enumerate(zip(batches, parts, strict=True)):
        before = live_sizes(path) if index else {}
        mark = time.perf_counter()
        if strategy.appends_by == "spark":
            spark.append(path, part, index == 0, key, strategy.liquid)
        elif strategy.statement is None:
            append(path, batch, key)  # sets recluster.clusterBy on the first
        else:
            write_deltalake(str(path), batch, mode="append")
        append_seconds += time.perf_counter() - mark
        files = live_sizes(path)
        step_appended = sum(size for p, size in files.items() if p not in before)
        appended += step_appended
        step_written, seconds = 0, 0.0
        if (index + 1) % strategy.every == 0:
            mark = time.perf_counter()
            if strategy.statement is None:
                maintain(ctx, path)
            else:
                spark.run(strategy.statement.format(table=f"delta.`{path}`", key=", ".join(key)))
            seconds = time.perf_counter() - mark
            step_written = sum(size for p, size in live_sizes(path).items() if p not in files)
        written += step_written
        maintenance_seconds += seconds
        read, live = files_read(path, predicates.at(index))
        series.append(
            {
                "append": index + 1,
                "bytes_appended": step_appended,
                "bytes_written": step_written,
                "maintenance_seconds": seconds,
                "files": live,
                "depth": key_depth(path, settings, key),
                "files_read": read,
            }
        )
    data = DeltaTable(str(path)).to_pyarrow_table().select(batches[0].schema.names).cast(batches[0].schema)
    reads = np.array([[s["files_read"][name] for name in key] for s in series])
    failures = sum(r.totals.failures for r in ctx.results)
    return {
        "description": strategy.description,
        "appends_by": strategy.appends_by,
        "time_averaged_depth": float(np.mean([s["depth"] for s in series])),
        "time_averaged_files_read": float(reads.mean()),
        "time_averaged_files_read_per_column": dict(zip(key, map(float, reads.mean(axis=0)), strict=True)),
        "final_depth": series[-1]["depth"],
        "final_files": series[-1]["files"],
        "final_files_read": float(reads[-1].mean()),
        "bytes_appended": appended,
        "bytes_written": written,
        "write_amplification": written / appended,
        "maintenance_calls": sum(1 for s in series if (s["append"]) % strategy.every == 0),
        "maintenance_seconds": maintenance_seconds,
        "compute_seconds_per_append": maintenance_seconds / len(batches),
        "append_seconds": append_seconds,
        "recluster_failures": failures,
        "rows": data.num_rows,
        "row_fingerprint": row_fingerprint(data),
        "series": series,
    }


# ---- the run --------------------------------------------------------------------------------------------------


def run_case(
    case: Case, number: int, spark: DeltaSpark, work: Path, out: dict[str, Any], save: Callable[[], None]
) -> None:
    rng = np.random.default_rng(SEED + 1000 + number)
    batches = [case.workload.make(rng, index, case.rows) for index in range(case.appends)]
    everything = pa.concat_tables(batches)
    expected = row_fingerprint(everything)
    scratch = work / case.name
    scratch.mkdir()
    parts = []
    for index, batch in enumerate(batches):
        parts.append(scratch / f"slice-{index:03d}.parquet")
        pq.write_table(batch, parts[-1])
    data_bytes = sum(p.stat().st_size for p in parts)
    file_bytes = max(data_bytes // case.files, 1)
    target_rows = everything.num_rows // case.files
    settings = Settings(clustering=ClusteringSettings(target_rows=target_rows, target_file_bytes=file_bytes))
    spark.set_file_bytes(file_bytes)
    predicates = Predicates(batches, case.workload.key, SEED + 2000 + number)
    measured: dict[str, Any] = {
        "workload": case.workload.name,
        "description": case.workload.description,
        "key": list(case.workload.key),
        "appends": case.appends,
        "rows_per_append": case.rows,
        "rows": everything.num_rows,
        "parquet_bytes": data_bytes,
        "target_file_bytes": file_bytes,
        "target_rows": target_rows,
        "planned": list(case.strategies),
        "skipped": case.skipped,
        "strategies": {},
    }
    out[case.name] = measured
    for name in case.strategies:
        path = scratch / name
        mark = time.perf_counter()
        result = run_strategy(STRATEGIES[name], case, batches, parts, predicates, spark, settings, path)
        result["wall_seconds"] = time.perf_counter() - mark
        result["rows_verified"] = result["rows"] == everything.num_rows and result["row_fingerprint"] == expected
        assert result["rows_verified"], f"{case.name}/{name}: rows differ from the appended rows"
        assert result["recluster_failures"] == 0, f"{case.name}/{name}: failed merges"
        measured["strategies"][name] = result
        log(
            f"upkeep {case.name}/{name}: depth {result['time_averaged_depth']:.2f}, files read "
            f"{result['time_averaged_files_read']:.2f}, WA {result['write_amplification']:.2f}, "
            f"{result['compute_seconds_per_append']:.2f} s/append, final files {result['final_files']}, "
            f"wall {result['wall_seconds']:.0f} s"
        )
        shutil.rmtree(path, ignore_errors=True)
        save()
    shutil.rmtree(scratch, ignore_errors=True)


def main(quick: bool = False, budget_minutes: float | None = None, resume: bool = False) -> dict[str, Any]:
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    name = "upkeep-quick" if quick else "upkeep"
    started = time.perf_counter()
    result: dict[str, Any] = {
        "quick": quick,
        "every": EVERY,
        "spark_conf": SPARK_CONF,
        "strategies": {s.name: s.description for s in STRATEGIES.values()},
        "budget_minutes": budget_minutes,
        "planned_cases": [
            case.name for case in cases(quick)
        ],  # docgen.upkeep_report lists the ones a stopped run missed
        "complete": False,
        "cases": {},
        "not_run": {},
    }

    today = RESULTS / f"{name}-{dt.date.today().isoformat()}.json"
    if resume and today.exists():  # today's earlier run: its cases stay, the ones it did not run are run now
        earlier = json.loads(today.read_text(encoding="utf-8"))
        runs = [
            *earlier.get("runs", []),
            {"budget_minutes": earlier["budget_minutes"], "cases": list(earlier["cases"])},
        ]
        result.update(cases=earlier["cases"], runs=runs)

    def save() -> None:  # after every strategy: a run stopped part-way leaves a consistent file (complete: false)
        result["seconds"] = time.perf_counter() - started
        result["goals"] = goals(result)
        write_results(name, result)

    with tempfile.TemporaryDirectory(prefix="recluster-upkeep-") as root:
        work = Path(root)
        mark = time.perf_counter()
        spark = DeltaSpark(work)
        result["jvm_start_seconds"] = time.perf_counter() - mark
        try:
            for number, case in enumerate(cases(quick)):
                if case.name in result["cases"]:
                    continue
                spent = (time.perf_counter() - started) / 60
                if budget_minutes is not None and spent > budget_minutes:
                    result["not_run"][case.name] = f"time budget: {spent:.0f} of {budget_minutes:g} minutes spent"
                    log(f"upkeep: {case.name} not run ({result['not_run'][case.name]})")
                    continue
                log(f"upkeep: {case.name}: {case.appends} appends of {case.rows:,} rows")
                run_case(case, number, spark, work, result["cases"], save)
        finally:
            spark.stop()
    result["complete"] = not result["not_run"]
    rows = summary_rows(result)
    result["goals"] = goals(result)
    return publish("upkeep", "Incremental upkeep: recluster against Delta's OPTIMIZE (warm)", quick, rows, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.upkeep_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small appends, a few minutes")
    parser.add_argument("--budget", type=float, help="minutes; cases not started by then are recorded as not run")
    parser.add_argument("--resume", action="store_true", help="keep the cases of today's results file, run the rest")
    arguments = parser.parse_args()
    main(quick=arguments.quick, budget_minutes=arguments.budget, resume=arguments.resume)
