"""recluster against its anchors, side by side in one run (issue 5).

Run from the project root: `python -m bench.compare [--quick]` (also part of `python -m bench`).

Workloads (seeded numpy, streaming appends; full mode 60 x 50,000 rows, quick 30 x 10,000):
  (a) uniform   - uniformly random int64 keys;
  (b) time      - microsecond timestamps increasing with the batch index (one hour per batch), 5% late rows
                  drawn uniformly from the past;
  (c) two-col   - key (a int in [0, 1000), b 10-letter string);
  (d) zipf      - numpy zipf(a=1.3) keys clipped to 1,000,000.
Each batch also carries a float and a 20-character string payload.

Strategies, each on its own copy of the table receiving the identical sequence of appends (write_deltalake
append; `recluster.clusterBy` set after the first append); k = 10 (quick 5):
  none            no maintenance;
  compact         delta-rs `optimize.compact()` every k appends;
  z_order         delta-rs `optimize.z_order(key)` every k appends;
  spark_sort      a full Spark sort rewrite every k appends: the live files -> repartitionByRange(ceil(rows /
                  target_rows)) -> sortWithinPartitions(key) -> toArrow -> write_deltalake overwrite (the
                  "OPTIMIZE ZORDER"-like full rewrite; bytes written = sizes of the new files);
  recluster_incr  one `recluster_table(..., final=False)` round after every append (the streaming job's decision
                  logic: same selection, merge and commit);
  recluster_final `recluster_table(..., final=True)` every k appends.
The delta-rs strategies and the Spark rewrite get a file-size target of target_rows x the appended bytes per row,
so every strategy aims at the same file size as recluster (delta-rs' default 100 MB would make one file).

Figures per (workload, strategy): average/p99 depth (recluster's `clustering_info`) after every append, and
just before each maintenance for the every-k strategies; the time-averaged average depth (mean over appends of
the depth queries see after that append's maintenance); files scanned by 200 seeded range queries over 1% of
the first key column's domain, as a ratio to a perfectly sorted layout of equal-row files with the same file
count (built from the actual keys: quantile boundaries); write amplification (bytes written by maintenance /
bytes appended); maintenance seconds; peak memory during maintenance (driver Python VmHWM over RSS at start,
Spark JVM VmHWM, and the sampled RSS of the Spark Python workers; peaks reset through /proc/<pid>/clear_refs).
Every final table is checked to hold exactly the appended rows (count + order-independent hash).

Merge throughput, metrics timings and streaming latency are not re-run: they are read from the latest
bench/results/{merge,metrics,stream}-*.json.

Prints markdown tables and writes JSON to bench/results/compare[-quick]-<YYYY-MM-DD>.json (per-append series
included); `python -m bench.compare --report FILE` prints the tables of a stored result again without running.
Runtime on 2 cores: --quick ~3-4 min, full ~12-13 min.
"""

from __future__ import annotations

from bench.compare.absorb_report import render_absorb
from bench.compare.report import render
from bench.compare.suites import main, main_absorb

__all__ = ["main", "main_absorb", "render", "render_absorb"]
