"""Multi-column keys on curves against delta-rs z_order: `python -m bench.curve_bench [--quick]` (issue 19).

Workload: random (a, b) int64 keys plus a 64-letter payload, 40 appends x 50,000 rows (quick: 12 x 20,000),
target 50,000 rows per file (about 4 MB). Every figure is the share of files a narrow predicate on one column
alone reads after Delta min/max stats pruning, averaged over 200 predicates at random places, each covering 0.1% of
the column's domain (a string column: one value); the same predicates for every layout.
1. After FINAL on the same data: recluster HILBERT, ZORDER and LINEAR, and delta-rs `optimize.z_order(["a", "b"])`
   (with its default file size, and cut to the same file count as ours), each on its own copy. Goal: each column
   <= 1.3 / sqrt(files) for HILBERT.
2. Over the appends: after each append, one incremental round with the default policy on the HILBERT key, against
   delta-rs z_order every 5 appends; the per-column share averaged over every append (time-averaged) and the row
   write amplification (rows rewritten / rows appended; z_order every 5 of 40 appends: 4.5). Goal: each column
   <= 0.4 at WA <= 4.5.
3. Real data no one here wrote (bench/curve_data.py): TPC-H lineitem SF 0.5 on (l_shipdate, l_partkey) and NYC
   flights 2013 on (origin, time_hour), written in 20 commits, FINAL cut to about 48 files, against delta-rs
   z_order cut to the same count. Goals: worst and mean column <= z_order's; each column <= 1.3 / sqrt(files).
Rows are checked unchanged (count + order-independent hash) on every table. Writes bench/results/curve-<date>.json.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from bench.common import ColumnPredicates, log, publish, quick_cli, random_predicates, scan_shares
from bench.curve_data import RealData, flights, lineitem
from docgen.figures import ratio_row
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, Settings
from tests.fingerprints import row_fingerprint
from tests.workload_data import letters

COLUMNS = ("a", "b")
REAL_FILES = 48
"""Files the real tables are cut into (the issue's reference layout has 46 on 2M rows)."""


def batch(rng: np.random.Generator, rows: int) -> pa.Table:
    return pa.table(
        {
            "a": rng.integers(0, 1 << 40, rows),
            "b": rng.integers(0, 1 << 40, rows),
            "payload": letters(rng, rows, 64),
        }
    )


def no_spark() -> Any:
    raise AssertionError("the curve bench runs the kernel in the process")


def settings_for(curve: str, target_rows: int) -> Settings:
    return Settings(clustering={"target_rows": target_rows, "curve": curve})


def after_final(source: Path, scratch: Path, target_rows: int, predicates: ColumnPredicates) -> dict[str, Any]:
    """FINAL on copies of `source` (HILBERT, ZORDER, LINEAR) and delta-rs z_order on the same key columns."""
    columns = list(predicates)
    expected = row_fingerprint(DeltaTable(str(source)).to_pyarrow_table())
    layouts: dict[str, Any] = {}
    for name in ("hilbert", "zorder", "linear", "z_order_delta_rs", "z_order_delta_rs_same_files"):
        copy = scratch / name
        shutil.copytree(source, copy)
        if name == "z_order_delta_rs":
            DeltaTable(str(copy)).optimize.z_order(columns)
        elif name == "z_order_delta_rs_same_files":
            z_order_to_file_count(source, copy, columns, layouts["hilbert"]["files"])
        else:
            settings = settings_for(name, target_rows)
            loader = snapshot_loader(str(copy), settings, None)
            recluster_table(str(copy), loader, settings=settings, spark_factory=no_spark, final=True)
        assert row_fingerprint(DeltaTable(str(copy)).to_pyarrow_table()) == expected, f"{name} changed the rows"
        layouts[name] = {"files": len(DeltaTable(str(copy)).file_uris()), "scan": scan_shares(copy, predicates)}
        log(f"final {name}: {layouts[name]}")
        shutil.rmtree(copy)
    return layouts


def z_order_to_file_count(source: Path, copy: Path, columns: list[str], files: int, tries: int = 5) -> None:
    """delta-rs z_order cut to about `files` files (within 10%): its target is in bytes and its files compress
    differently from the input, so the size is searched (bisection on the log of the size) over a few tries."""
    low, high = 1, 1 << 40
    size = sum(f.stat().st_size for f in source.glob("*.parquet")) // files
    for _ in range(tries):
        DeltaTable(str(copy)).optimize.z_order(columns, target_size=size)
        got = len(DeltaTable(str(copy)).file_uris())
        if abs(got - files) <= files // 10:
            return
        low, high = (size, high) if got > files else (low, size)
        size = int((low * high) ** 0.5) if high < 1 << 40 else size * 2
        shutil.rmtree(copy)
        shutil.copytree(source, copy)
    DeltaTable(str(copy)).optimize.z_order(columns, target_size=size)


def over_appends(scratch: Path, appends: int, rows: int, target_rows: int, seed: int) -> dict[str, Any]:
    """Incremental HILBERT rounds after each append against delta-rs z_order every 5 appends."""
    ours, theirs = scratch / "incremental", scratch / "z_order_every_5"
    rng = np.random.default_rng(seed)
    settings = settings_for("hilbert", target_rows)
    traces: dict[str, list[dict[str, float]]] = {"recluster": [], "z_order": []}
    written = {"recluster": 0, "z_order": 0}
    everything = []
    for index in range(appends):
        data = batch(rng, rows)
        everything.append(data)
        predicates = random_predicates(pa.concat_tables(everything), COLUMNS, seed=index)
        for path in (ours, theirs):
            write_deltalake(str(path), data, mode="append")
            if index == 0:
                set_table_properties(path, {CLUSTER_BY_PROPERTY: ",".join(COLUMNS), CURVE_PROPERTY: "hilbert"})
        result = recluster_table(
            str(ours), snapshot_loader(str(ours), settings, None), settings=settings, spark_factory=no_spark
        )
        written["recluster"] += result.totals.rows_rewritten
        if (index + 1) % 5 == 0:
            metrics = DeltaTable(str(theirs)).optimize.z_order(list(COLUMNS))
            written["z_order"] += sum(rows_of(theirs, metrics))
        traces["recluster"].append(scan_shares(ours, predicates))
        traces["z_order"].append(scan_shares(theirs, predicates))
    expected = row_fingerprint(pa.concat_tables(everything))
    for path in (ours, theirs):
        assert row_fingerprint(DeltaTable(str(path)).to_pyarrow_table()) == expected, f"{path.name} changed the rows"
    appended = appends * rows
    return {
        side: {
            "time_averaged_scan": {c: float(np.mean([t[c] for t in traces[side]])) for c in COLUMNS},
            "row_write_amplification": written[side] / appended,
            "files": len(DeltaTable(str(ours if side == "recluster" else theirs)).file_uris()),
            "trace": traces[side],
        }
        for side in traces
    }


def rows_of(path: Path, metrics: dict[str, Any]) -> list[int]:
    """Rows z_order rewrote: every live row at that point (it rewrites the whole table)."""
    return [DeltaTable(str(path)).to_pyarrow_dataset().count_rows()] if metrics.get("numFilesAdded") else [0]


def summary_rows(final: dict[str, Any], incremental: dict[str, Any], appends: int) -> list[list[Any]]:
    hilbert, z_order = final["hilbert"], final["z_order_delta_rs_same_files"]
    bound = bound_text(hilbert["files"])
    ours, theirs = incremental["recluster"], incremental["z_order"]
    return [
        *(
            ratio_row(
                f"after FINAL, column {c}: share of files read, HILBERT ({hilbert['files']} files) vs delta-rs "
                f"z_order ({z_order['files']} files)",
                hilbert["scan"][c],
                z_order["scan"][c],
                bound,
            )
            for c in COLUMNS
        ),
        *(
            ratio_row(
                f"after FINAL, column {c}: HILBERT vs ZORDER (recluster, same files)",
                hilbert["scan"][c],
                final["zorder"]["scan"][c],
                "< 1",
            )
            for c in COLUMNS
        ),
        *(
            ratio_row(
                f"time-averaged over {appends} appends, column {c}: default policy vs z_order every 5",
                ours["time_averaged_scan"][c],
                theirs["time_averaged_scan"][c],
                "<= 0.4",
            )
            for c in COLUMNS
        ),
        ratio_row(
            "row write amplification over the appends: default policy vs z_order every 5",
            ours["row_write_amplification"],
            theirs["row_write_amplification"],
            "<= 4.5",
        ),
    ]


def real_final(data: RealData, scratch: Path, appends: int = 20) -> dict[str, Any]:
    """FINAL on a real table written in `appends` commits in its own order, cut to about REAL_FILES files."""
    source = scratch / data.name
    step = -(-data.table.num_rows // appends)
    for index, start in enumerate(range(0, data.table.num_rows, step)):
        write_deltalake(str(source), data.table.slice(start, step), mode="append")
        if index == 0:
            set_table_properties(source, {CLUSTER_BY_PROPERTY: ",".join(data.columns)})
    predicates = random_predicates(data.table, data.columns, seed=7)
    layouts = after_final(source, scratch, -(-data.table.num_rows // REAL_FILES), predicates)
    shutil.rmtree(source)
    distinct = {c: len(pc.unique(data.table[c])) for c in data.columns}
    return {"rows": data.table.num_rows, "columns": list(data.columns), "distinct": distinct, "layouts": layouts}


def real_rows(name: str, real: dict[str, Any]) -> list[list[Any]]:
    """Worst and mean column against delta-rs z_order at the same file count, and each column's bound."""
    hilbert, z_order = real["layouts"]["hilbert"], real["layouts"]["z_order_delta_rs_same_files"]
    ours, theirs = list(hilbert["scan"].values()), list(z_order["scan"].values())
    label = f"{name} after FINAL, HILBERT ({hilbert['files']} files) vs delta-rs z_order ({z_order['files']} files)"
    return [
        ratio_row(f"{label}: worst column", max(ours), max(theirs), "<= 1x"),
        ratio_row(f"{label}: mean over columns", float(np.mean(ours)), float(np.mean(theirs)), "<= 1x"),
        *(
            ratio_row(f"{label}: column {c}", hilbert["scan"][c], z_order["scan"][c], column_goal(real, c, hilbert))
            for c in real["columns"]
        ),
    ]


def column_goal(real: dict[str, Any], column: str, layout: dict[str, Any]) -> str:
    """1.3 / sqrt(files) for a high-cardinality column; a column with fewer values than files can do no better
    than one value's share of the files."""
    values = real["distinct"][column]
    if values < layout["files"]:
        return f"low-cardinality ({values} values): >= {1 / values:.3f}"
    return bound_text(layout["files"])


def bound_text(files: int) -> str:
    return f"<= {1.3 / files**0.5:.3f}"


def main(quick: bool = False) -> dict[str, Any]:
    appends, rows, target_rows = (12, 20_000, 20_000) if quick else (40, 50_000, 50_000)
    with tempfile.TemporaryDirectory(prefix="recluster-curve-bench-") as scratch:
        work = Path(scratch)
        source = work / "source"
        rng = np.random.default_rng(5)
        for index in range(appends):
            write_deltalake(str(source), batch(rng, rows), mode="append")
            if index == 0:
                set_table_properties(source, {CLUSTER_BY_PROPERTY: ",".join(COLUMNS)})
        predicates = random_predicates(DeltaTable(str(source)).to_pyarrow_table(), COLUMNS, seed=5)
        final = after_final(source, work, target_rows, predicates)
        real = {data.name: real_final(data, work) for data in (lineitem(0.05 if quick else 0.5, work), flights())}
        incremental = over_appends(work, appends, rows, target_rows, seed=6)
    rows_out = summary_rows(final, incremental, appends)
    for name, measured in real.items():
        rows_out.extend(real_rows(name, measured))
    result = {
        "quick": quick,
        "appends": appends,
        "rows_per_append": rows,
        "target_rows": target_rows,
        "final": final,
        "real_data": real,
        "incremental": {side: {k: v for k, v in data.items() if k != "trace"} for side, data in incremental.items()},
        "traces": {side: data["trace"] for side, data in incremental.items()},
    }
    return publish("curve", "curves: multi-column keys against delta-rs z_order", quick, rows_out, result)


if __name__ == "__main__":
    quick_cli("python -m bench.curve_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
