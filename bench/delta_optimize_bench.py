"""Delta's own OPTIMIZE as the anchor (issue 33): `python -m bench.delta_optimize_bench [--quick]`.

recluster FINAL against Delta Spark's `OPTIMIZE ZORDER BY` (one column, two columns) and liquid clustering's
`OPTIMIZE ... FULL` on a `CLUSTER BY (c1, c2)` table, on identical data and the same two cores, each side cold in
its own process: Delta Spark (4.4 on pyspark 4.2, the tests' referee environment, `./dev referee`) in a fresh JVM
with Spark's and Delta's default settings, timed from process start to the statement's end; recluster as the
`recluster run --final` command, timed from process start to its exit. Data sets: random (a, b) int64 keys with a
64-letter payload, TPC-H lineitem on (l_shipdate, l_partkey) and NYC flights 2013 on (origin, time_hour), each
written in 20 commits (liquid tables by Delta Spark: CTAS, ALTER TABLE ... CLUSTER BY, then INSERTs), so every side
starts from the same unclustered files. Both sides aim at the same output file size (Delta's `optimize.maxFileSize`
= recluster's `target_file_bytes` = the input's bytes / 32). Reported per layout: cold wall, MB/s of input bytes
(also of the statement alone: the JVM start and imports excluded, not the first statement's class loading), output
bytes and files, and per key column the files a narrow predicate reads after Delta min/max pruning (mean over 200
predicates at random places covering 0.1% of the column's range; a string column: one value). Rows are checked
unchanged (count + order-independent hash) on every table.
Goals: FINAL >= 2x the MB/s of ZORDER BY on the same columns, output bytes <= 1.0x, files read per column <= Delta's
(ZORDER and liquid), worst column and mean. Writes bench/results/delta-optimize[-quick]-<date>.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from bench.common import log, publish, quick_cli, random_predicates, scan_shares
from bench.curve_data import RealData, flights, lineitem
from docgen.summary_figures import delta_optimize_rows
from tests.fingerprints import row_fingerprint
from tests.referee import Referee, referee_missing
from tests.workload_data import letters

COMMITS = 20
OUTPUT_FILES = 32
"""Both sides aim at the input's bytes / OUTPUT_FILES per output file."""
DRIVER_MEMORY = "3g"
RECLUSTER = Path(sys.executable).with_name("recluster")


def random_ab(rows: int, seed: int = 3) -> RealData:
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "a": rng.integers(0, 1 << 62, rows),
            "b": rng.integers(0, 1 << 62, rows),
            "payload": letters(rng, rows, 64),
        }
    )
    return RealData("random_ab", table, ("a", "b"))


def live_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) of the table's live files."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return int(pc.sum(actions["size_bytes"]).as_py() or 0), actions.num_rows


def slices(data: RealData, scratch: Path) -> list[Path]:
    """The data as COMMITS Parquet files (the commits every source table is written in)."""
    out = scratch / f"{data.name}-slices"
    out.mkdir()
    step = -(-data.table.num_rows // COMMITS)
    paths = []
    for index, start in enumerate(range(0, data.table.num_rows, step)):
        paths.append(out / f"slice-{index:02d}.parquet")
        pq.write_table(data.table.slice(start, step), paths[-1])
    return paths


def build_sources(data: RealData, scratch: Path, builder: Referee) -> tuple[Path, Path]:
    """The plain table (delta-rs, COMMITS appends) and the liquid one (Delta Spark: COMMITS writes, CLUSTER BY after the
    first)."""
    parts = slices(data, scratch)
    plain = scratch / f"{data.name}-plain"
    for part in parts:
        write_deltalake(str(plain), pq.read_table(part), mode="append")
    liquid = scratch / f"{data.name}-liquid"
    c1, c2 = data.columns
    builder.sql(f"CREATE TABLE delta.`{liquid}` USING delta AS SELECT * FROM parquet.`{parts[0]}`")
    builder.sql(f"ALTER TABLE delta.`{liquid}` CLUSTER BY ({c1}, {c2})")  # (CTAS takes no CLUSTER BY on a path)
    for part in parts[1:]:
        builder.sql(f"INSERT INTO delta.`{liquid}` SELECT * FROM parquet.`{part}`")
    return plain, liquid


def delta_optimize(table: Path, statement: str, file_bytes: int, work: Path) -> tuple[float, float]:
    """Cold wall of one OPTIMIZE statement in a fresh Delta Spark process (JVM start included), and the
    statement's own seconds."""
    work.mkdir(exist_ok=True)
    started = time.perf_counter()
    referee = Referee(work, defaults=True, driver_memory=DRIVER_MEMORY)
    try:
        referee.sql(f"SET spark.databricks.delta.optimize.maxFileSize={file_bytes}")
        begun = time.perf_counter()
        referee.sql(statement.format(table=f"delta.`{table}`"))
        ended = time.perf_counter()
        return ended - started, ended - begun
    finally:
        referee.stop()


def recluster_final(table: Path, columns: tuple[str, ...] | None, file_bytes: int) -> tuple[float, float]:
    """Cold wall of `recluster run --final` (process start to exit), and the run's own seconds."""
    command = [str(RECLUSTER), "run", str(table), "--final", "--json"]
    command += ["--set", f"clustering.target_file_bytes={file_bytes}", "--set", "clustering.target_rows=1000000000"]
    if columns:
        command += ["--cluster-by", ",".join(columns)]
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, float(json.loads(done.stdout)["seconds"])


def measure_data_set(data: RealData, scratch: Path, builder: Referee) -> dict[str, Any]:
    log(f"delta optimize: {data.name}, {data.table.num_rows:,} rows: building the sources")
    plain, liquid = build_sources(data, scratch, builder)
    expected = row_fingerprint(DeltaTable(str(plain)).to_pyarrow_table())
    assert row_fingerprint(DeltaTable(str(liquid)).to_pyarrow_table()) == expected
    input_bytes, input_files = live_bytes(plain)
    file_bytes = max(input_bytes // OUTPUT_FILES, 1 << 20)
    predicates = random_predicates(data.table, data.columns, seed=11)
    c1, c2 = data.columns
    layouts: dict[str, Any] = {}
    contenders: list[tuple[str, Path, str | None, tuple[str, ...] | None]] = [
        (f"recluster FINAL ({c1})", plain, None, (c1,)),
        (f"Delta ZORDER BY ({c1})", plain, f"OPTIMIZE {{table}} ZORDER BY ({c1})", None),
        (f"recluster FINAL ({c1}, {c2})", plain, None, (c1, c2)),
        (f"Delta ZORDER BY ({c1}, {c2})", plain, f"OPTIMIZE {{table}} ZORDER BY ({c1}, {c2})", None),
        ("recluster FINAL (liquid table)", liquid, None, None),
        ("Delta liquid OPTIMIZE FULL", liquid, "OPTIMIZE {table} FULL", None),
    ]
    for name, source, statement, columns in contenders:
        copy = scratch / "copy"
        shutil.copytree(source, copy)
        before, _ = live_bytes(copy)
        log(f"delta optimize: {data.name}: {name}")
        if statement is None:
            wall, own = recluster_final(copy, columns, file_bytes)
        else:
            wall, own = delta_optimize(copy, statement, file_bytes, scratch / "referee")
        assert row_fingerprint(DeltaTable(str(copy)).to_pyarrow_table()) == expected, f"{name} changed the rows"
        after, files = live_bytes(copy)
        shares = scan_shares(copy, predicates)
        layouts[name] = {
            "seconds": wall,
            "statement_seconds": own,
            "input_bytes": before,
            "mb_per_second": before / wall / 1e6,
            "warm_mb_per_second": before / own / 1e6,
            "output_bytes": after,
            "files": files,
            "files_read": {column: share * files for column, share in shares.items()},
        }
        log(f"delta optimize: {data.name}: {name}: {layouts[name]}")
        shutil.rmtree(copy)
    return {
        "rows": data.table.num_rows,
        "columns": list(data.columns),
        "input_bytes": input_bytes,
        "input_files": input_files,
        "file_bytes": file_bytes,
        "layouts": layouts,
    }


def main(quick: bool = False) -> dict[str, Any]:
    missing = referee_missing()
    if missing:
        raise SystemExit(missing)
    result: dict[str, Any] = {"quick": quick, "commits": COMMITS, "output_files": OUTPUT_FILES, "data_sets": {}}
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="recluster-delta-optimize-") as root:
        scratch = Path(root)
        builder = Referee(scratch, driver_memory=DRIVER_MEMORY)
        try:
            data_sets = [
                random_ab(400_000 if quick else 3_000_000),
                lineitem(0.05 if quick else 0.5, scratch),
                flights(),
            ]
            for data in data_sets:
                work = scratch / data.name
                work.mkdir()
                measured = measure_data_set(data, work, builder)
                result["data_sets"][data.name] = measured
                rows += delta_optimize_rows(data.name, measured)
                shutil.rmtree(work)
        finally:
            builder.stop()
    return publish("delta-optimize", "recluster FINAL vs Delta Spark OPTIMIZE (cold, same cores)", quick, rows, result)


if __name__ == "__main__":
    quick_cli("python -m bench.delta_optimize_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
