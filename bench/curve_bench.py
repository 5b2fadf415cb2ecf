"""Multi-column keys on curves against delta-rs z_order: `python -m bench.curve_bench [--quick]` (issue 19).

Workload: random (a, b) int64 keys plus a 64-letter payload, 40 appends x 50,000 rows (quick: 12 x 20,000),
target 50,000 rows per file (about 4 MB). Every figure is the share of files a point predicate on one column
alone reads after min/max pruning, averaged over 99 points at the data's quantiles of that column (the same
points for every layout, computed from the rows themselves).
1. After FINAL on the same data: recluster HILBERT, ZORDER and LINEAR, and delta-rs `optimize.z_order(["a", "b"])`
   (with its default file size, and cut to the same file count as ours), each on its own copy. Goal: each column
   <= 1.3 / sqrt(files) for HILBERT.
2. Over the appends: after each append, one incremental round with the default policy on the HILBERT key, against
   delta-rs z_order every 5 appends; the per-column share averaged over every append (time-averaged) and the row
   write amplification (rows rewritten / rows appended; z_order every 5 of 40 appends: 4.5). Goal: each column
   <= 0.4 at WA <= 4.5.
Rows are checked unchanged (count + order-independent hash) on every table. Writes bench/results/curve-<date>.json.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.compare.measurement import row_fingerprint
from bench.merge_bench import (
    letters,
    log,
    publish,
    quick_cli,
)
from recluster.delta.log_writer import set_table_properties
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import CLUSTER_BY_PROPERTY, CURVE_PROPERTY, Settings

COLUMNS = ("a", "b")
POINTS = 99


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


def scan_shares(path: Path, points: dict[str, np.ndarray]) -> dict[str, float]:
    """Per column: mean over the points of the share of live files whose min/max contain the point."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    shares = {}
    for name in COLUMNS:
        low = actions[f"min.{name}"].to_numpy()
        high = actions[f"max.{name}"].to_numpy()
        hits = (low[None, :] <= points[name][:, None]) & (points[name][:, None] <= high[None, :])
        shares[name] = float(hits.mean())
    return shares


def quantile_points(table: pa.Table) -> dict[str, np.ndarray]:
    return {name: np.quantile(table[name].to_numpy(), np.linspace(0, 1, POINTS + 2)[1:-1]) for name in COLUMNS}


def settings_for(curve: str, target_rows: int) -> Settings:
    return Settings(clustering={"target_rows": target_rows, "curve": curve})


def after_final(source: Path, scratch: Path, target_rows: int, points: dict[str, np.ndarray]) -> dict[str, Any]:
    expected = row_fingerprint(DeltaTable(str(source)).to_pyarrow_table())
    layouts: dict[str, Any] = {}
    for name in ("hilbert", "zorder", "linear", "z_order_delta_rs", "z_order_delta_rs_same_files"):
        copy = scratch / name
        shutil.copytree(source, copy)
        if name.startswith("z_order"):
            files = layouts["hilbert"]["files"]
            size = sum(f.stat().st_size for f in copy.glob("*.parquet")) // files if "same" in name else None
            DeltaTable(str(copy)).optimize.z_order(list(COLUMNS), **({"target_size": size} if size else {}))
        else:
            settings = settings_for(name, target_rows)
            loader = snapshot_loader(str(copy), settings, None)
            recluster_table(str(copy), loader, settings=settings, spark_factory=no_spark, final=True)
        assert row_fingerprint(DeltaTable(str(copy)).to_pyarrow_table()) == expected, f"{name} changed the rows"
        layouts[name] = {"files": len(DeltaTable(str(copy)).file_uris()), "scan": scan_shares(copy, points)}
        log(f"final {name}: {layouts[name]}")
        shutil.rmtree(copy)
    return layouts


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
        points = quantile_points(pa.concat_tables(everything))
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
        traces["recluster"].append(scan_shares(ours, points))
        traces["z_order"].append(scan_shares(theirs, points))
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


def ratio_row(measure: str, ours: float, theirs: float, goal: str) -> list[Any]:
    return [measure, ours, theirs, ours / theirs, goal]


def summary_rows(final: dict[str, Any], incremental: dict[str, Any], appends: int) -> list[list[Any]]:
    hilbert, z_order = final["hilbert"], final["z_order_delta_rs_same_files"]
    bound = f"<= {1.3 / hilbert['files'] ** 0.5:.3f}"
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
        points = quantile_points(DeltaTable(str(source)).to_pyarrow_table())
        final = after_final(source, work, target_rows, points)
        incremental = over_appends(work, appends, rows, target_rows, seed=6)
    rows_out = summary_rows(final, incremental, appends)
    result = {
        "quick": quick,
        "appends": appends,
        "rows_per_append": rows,
        "target_rows": target_rows,
        "final": final,
        "incremental": {side: {k: v for k, v in data.items() if k != "trace"} for side, data in incremental.items()},
        "traces": {side: data["trace"] for side, data in incremental.items()},
    }
    return publish("curve", "curves: multi-column keys against delta-rs z_order", quick, rows_out, result)


if __name__ == "__main__":
    quick_cli("python -m bench.curve_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
