"""FINAL recluster against delta-rs z_order on the same data: `python -m bench.output_bench [--quick]`.

Both rewrite copies of one table of overlapping appends (random int64 keys, a float, a 20-letter string, an int;
40 files, about 290 MB as delta-rs writes them, so FINAL's one task is above merge.in_process_max_bytes and runs in
Spark): the bytes of the live files afterwards (and per row), with the codecs
read from the Parquet footers, and the throughput (input MB / wall seconds), each side timed once on its own copy.
Goals (issue 18): bytes per row no larger than z_order's; throughput >= 1.1x z_order's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.merge_bench import (
    SUMMARY_HEADERS,
    append,
    log,
    machine,
    markdown_table,
    quick_cli,
    random_batch,
    start_spark,
    summary_records,
    write_results,
)
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import Settings


def live_files(path: Path) -> list[str]:
    return [uri.removeprefix("file://") for uri in DeltaTable(str(path)).file_uris()]


def table_bytes(path: Path) -> int:
    return sum(Path(f).stat().st_size for f in live_files(path))


def codecs(path: Path) -> list[str]:
    found = set()
    for name in live_files(path):
        metadata = pq.ParquetFile(name).metadata
        found |= {
            metadata.row_group(g).column(c).compression
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        }
    return sorted(found)


def main(quick: bool = False) -> dict[str, Any]:
    files, rows = (10, 100_000) if quick else (40, 150_000)
    spark = start_spark()
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory(prefix="recluster-output-bench-") as scratch:
        source = Path(scratch) / "source"
        log(f"output bench: {files} appends x {rows:,} rows")
        for _ in range(files):
            append(source, random_batch(rng, rows))
        total_rows = files * rows
        ours, theirs = Path(scratch) / "ours", Path(scratch) / "theirs"
        shutil.copytree(source, ours)
        shutil.copytree(source, theirs)
        started = time.perf_counter()
        settings = Settings()
        loader = snapshot_loader(str(ours), settings, None)
        recluster_table(str(ours), loader, settings=settings, spark_factory=lambda: spark, final=True)
        ours_seconds = time.perf_counter() - started
        started = time.perf_counter()
        DeltaTable(str(theirs)).optimize.z_order(["k"])
        theirs_seconds = time.perf_counter() - started
        ours_rows = pa.table(DeltaTable(str(ours)).to_pyarrow_table()).num_rows
        theirs_rows = pa.table(DeltaTable(str(theirs)).to_pyarrow_table()).num_rows
        assert ours_rows == theirs_rows == total_rows, (ours_rows, theirs_rows, total_rows)
        source_bytes, ours_bytes, theirs_bytes = table_bytes(source), table_bytes(ours), table_bytes(theirs)
        ours_codecs, theirs_codecs = codecs(ours), codecs(theirs)
        result: dict[str, Any] = {
            "quick": quick,
            "files": files,
            "rows": total_rows,
            "source_bytes": source_bytes,
            "recluster": {"bytes": ours_bytes, "codecs": ours_codecs, "seconds": ours_seconds},
            "z_order": {"bytes": theirs_bytes, "codecs": theirs_codecs, "seconds": theirs_seconds},
            "machine": machine(),
        }
    spark.stop()
    rows_out = [
        [
            "bytes per row after FINAL vs delta-rs z_order",
            ours_bytes / total_rows,
            theirs_bytes / total_rows,
            ours_bytes / theirs_bytes,
            "<= 1.0",
        ],
        [
            "FINAL throughput vs delta-rs z_order, MB/s",
            source_bytes / 1e6 / ours_seconds,
            source_bytes / 1e6 / theirs_seconds,
            theirs_seconds / ours_seconds,
            ">= 1.1",
        ],
    ]
    result["summary"] = summary_records(rows_out)
    print("\n### output: recluster FINAL vs delta-rs z_order on the same data\n")
    print(markdown_table(SUMMARY_HEADERS, rows_out))
    print(f"\ncodecs: recluster {ours_codecs}, z_order {theirs_codecs}")
    print(f"wrote {write_results('output-quick' if quick else 'output', result)}")
    return result


if __name__ == "__main__":
    quick_cli("python -m bench.output_bench", main, description=__doc__.splitlines()[0] if __doc__ else None)
