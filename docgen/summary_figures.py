"""README blocks of the benchmarks that report summary rows (measure, recluster, baseline, ratio, goal): output,
fixed costs, curves, estimates, the cluster, time-like keys (and their trigger in the model), idle tables, many
tables, big tables and the status pages. Registered in `readme_figures.BLOCKS`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from docgen.figures import MB, Json, Results, num, ratio_row, source, summary_records, table


def summary_table(summary: Sequence[Json]) -> str:
    """A bench's summary rows (measure, recluster, baseline, ratio, goal) as a README table."""
    rows = [[m["measure"], num(m["recluster"]), num(m["baseline"]), num(m["ratio"]), m["goal"]] for m in summary]
    return table(("measure", "recluster", "baseline", "ratio", "goal"), rows, "lrrrl")


def bench_block(title: str, bench: str, file: str, details: str, summary: Sequence[Json]) -> str:
    """The usual README block: a bold title, the command and results file, what was measured, the summary table."""
    return f"**{title}** (`python -m bench.{bench}`, {source(file)}; {details}):\n\n" + summary_table(summary)


def output(results: Results) -> str:
    file, o = results.get("output")
    codecs = "; ".join(
        f"{size['label']}: " + ", ".join(f"{side} {'/'.join(best['codecs'])}" for side, best in size["best"].items())
        for size in o["sizes"]
    )
    details = (
        "40 files per table, each side on its own copy in a process of its own, the rewrite timed; baseline = "
        f"z_order, raw Spark's sort or raw Spark's JVM as the row says; Parquet codecs read from the footers: {codecs}"
    )
    return bench_block("FINAL against delta-rs z_order and raw Spark", "output_bench", file, details, o["summary"])


def fixed_cost(results: Results) -> str:
    file, f = results.get("fixed-cost")
    rounds = f["per_append_round"]
    details = (
        f"cold commands in fresh processes, best of {len(f['info']['recluster_seconds'])}; per-append rounds in a warm "
        f"process, the slowest of {len(rounds['round_seconds'])}, {sum(t > 0 for t in rounds['tasks'])} of them merged"
    )
    return bench_block("Fixed costs", "fixed_cost_bench", file, details, f["summary"])


def curve(results: Results) -> str:
    file, c = results.get("curve")
    real = c["real_data"]
    details = (
        f"random (a, b) int64 keys, {c['appends']} appends x {c['rows_per_append']:,} rows, {c['target_rows']:,} rows "
        f"per file; then real data: TPC-H lineitem SF 0.5 ({real['tpch_lineitem']['rows']:,} rows) on (l_shipdate, "
        f"l_partkey) and NYC flights 2013 ({real['nyc_flights_2013']['rows']:,} rows) on (origin, time_hour); the "
        "share of files a narrow predicate on one column reads after Delta min/max pruning, averaged over 200 "
        "predicates at random places each covering 0.1% of the column's domain (a string column: one value); row "
        "write amplification = rows rewritten / rows appended"
    )
    return bench_block("Multi-column keys on a curve", "curve_bench", file, details, c["summary"])


def estimate(results: Results) -> str:
    file, e = results.get("estimate")
    details = (
        "per workload 40 appends of 2,000 rows (files of 10,000) and 400 of 500 (files of 2,500); `estimate` reads "
        "a table holding only the appends, the baseline is the real run: the same batches appended to a second table "
        "with a recluster round (default settings) after every append; the initial FINAL is timed on the first "
        f"table; the last row: `estimate` on a log of {e['speed']['commits']:,} commits"
    )
    return bench_block("recluster estimate against a real run", "estimate_bench", file, details, e["summary"])


def cluster(results: Results) -> str:
    file, c = results.get("cluster")
    one, two = c["runs"]
    return (
        f"Measured (`python -m bench.cluster_bench`, {source(file)}): `run --final` on "
        f"{c['input_bytes'] / 1e6:,.0f} MB ({c['rows']:,} rows in {c['input_files']} files), every merge in Spark "
        "tasks, on a cluster of one worker "
        f"and of two (1 core and 1.5 GB each, 1 GB executors) on this 2-core machine that also runs the driver: "
        f"{num(one['seconds'])} s and {num(two['seconds'])} s, {one['tasks']} and {two['tasks']} merge tasks, rows "
        "unchanged; the executors' peak resident memory (JVM plus Python workers) stayed bounded:\n\n"
        + summary_table(c["summary"])
    )


WATERMARK_STRATEGIES = {
    "absorb": "recluster (default settings)",
    "z_order": "z_order every 5",
    "compact": "compact every 5",
}
WATERMARK_CASES = {
    "late_4": "5% late by <= 4 appends",
    "late_any": "5% late by any amount",
    "random": "random int64 keys",
}


def watermark(results: Results) -> str:
    file, w = results.get("watermark")
    rows = []
    for case in w["cases"].values():
        for name, label in WATERMARK_STRATEGIES.items():
            r = case["strategies"][name]
            figures = (r["time_averaged_average_depth"], r["row_write_amplification"], r["scan"]["ratio_to_optimum"])
            workload = f"{WATERMARK_CASES[case['workload']]}, {case['appends']} appends"
            rows.append([workload, label, *map(num, figures), f"{r['final_files']:,}", num(r["file_fill"])])
    headers = ("workload", "strategy", "depth (time-avg)", "row WA", "1% range scan / optimum", "files", "fill")
    return (
        f"**Time-like keys** (`python -m bench.watermark_bench`, {source(file)}; identical appends for every "
        "strategy, 40 x 10,000 rows (files of 50,000) and 400 x 2,000 (files of 10,000); depth averaged over every "
        "append; fill = rows / files / target rows; goals and ratios in the summary below):\n\n"
        + table(headers, rows, "llrrrrr")
        + "\n\n"
        + summary_table(w["summary"])
    )


def watermark_model(results: Results) -> str:
    """The trigger's sweep and other lateness shapes, in the model."""
    file, m = results.get("watermark-model")
    sizes = list(m["sweep"][0]["cases"])

    def pair(case: Json) -> str:
        return f"{num(case['time_averaged_average_depth'])} at {num(case['row_write_amplification'])}"

    sweep = [
        [f"{s['RENT_SHARE']:.2f}", f"{s['DILUTION']:.1f}", *(pair(s["cases"][n]) for n in sizes)] for s in m["sweep"]
    ]
    shapes = [
        [
            f"{c['share']:.0%} late by <= {c['lateness']} append{'s' if c['lateness'] > 1 else ''}",
            str(c["appends"]),
            pair(c["default"]),
            pair(c["previous"]),
        ]
        for c in m["shapes"]
    ]
    defaults, previous = m["defaults"], m["previous"]
    return (
        f"**The time-like trigger in the model** (`python -m bench.watermark_model_bench`, {source(file)}; the real "
        "selection over files holding the bench's timestamps, cut as the merge kernel cuts; time-averaged depth at row "
        "WA). The rent share and the dilution exponent on the issue's workload (5% late by <= 4 appends; 40 x 10,000 "
        f"rows, 400 x 2,000; defaults: share {defaults['RENT_SHARE']:.2f}, exponent {defaults['DILUTION']:.1f}):\n\n"
        + table(("rent share", "dilution", *(f"{n} appends" for n in sizes)), sweep, "rr" + "r" * len(sizes))
        + "\n\nOther lateness bounds and late shares, the defaults against the previous trigger (share "
        f"{previous['RENT_SHARE']:.2f}, no dilution):\n\n"
        + table(("workload", "appends", "default", "previous"), shapes, "lrrr")
    )


def idle(results: Results) -> str:
    file, i = results.get("idle")
    details = (
        f"one scheduling pass of the job, the median of {i['passes']}, with no new commits: every table evaluated, as "
        "every pass did before, against the idle pass that skips tables until a commit or their next interval trigger"
    )
    return bench_block("Idle watched tables", "idle_bench", file, details, i["summary"])


def job_scale(results: Results) -> str:
    file, j = results.get("job-scale")
    many = j["runs"][-1]
    details = (
        f"{j['commits_per_second']} commits/s round-robin for {j['seconds']:.0f} s over {many['tables']:,} tables "
        f"against 1 table in the same run; latency over the second half of the commits; every commit of the "
        f"{many['tables']:,}-table run was the first its table received since the job started ({many['tracked']:,} "
        "tables tracked by the end), so it includes loading that table; every table's maintenance fell due at the start"
    )
    return bench_block("Many tables in one job", "job_scale_bench", file, details, j["summary"])


def big_table(results: Results) -> str:
    file, b = results.get("big-table")
    sizes = sorted({t["files"] for t in b["tables"]})
    shapes = list(dict.fromkeys(t["shape"] for t in b["tables"]))
    details = (
        f"tables of {' and '.join(f'{n:,}' for n in sizes)} files in {len(shapes)} shapes ({', '.join(shapes)}: "
        "appends of 1,000 files, one backfill commit, one absorb-written run plus 20 appends, a foreign ZORDER "
        f"plus 20 appends, {b['partitions']} partitions, a two-column Hilbert key), their logs written by delta-rs "
        "and checkpointed; each measurement in a fresh interpreter, three times interleaved, the least reported; "
        "baseline = delta-rs opening the table and listing its add actions, what any planner must read; `info` = "
        "`recluster info`, `plan` = `recluster run --dry-run`, `levels` = the same with `--policy levels`"
    )
    return bench_block("Big tables", "big_table_bench", file, details, b["summary"])


def delta_optimize_rows(name: str, measured: dict[str, Any]) -> list[list[Any]]:
    """The summary of one data set from its measured layouts (the figures are made from the same)."""
    layouts = measured["layouts"]
    c1, c2 = measured["columns"]
    rows: list[list[Any]] = []
    pairs = [
        (f"recluster FINAL ({c1})", f"Delta ZORDER BY ({c1})", (c1,)),
        (f"recluster FINAL ({c1}, {c2})", f"Delta ZORDER BY ({c1}, {c2})", (c1, c2)),
        ("recluster FINAL (liquid table)", "Delta liquid OPTIMIZE FULL", (c1, c2)),
    ]
    for ours, theirs, columns in pairs:
        mine, delta = layouts[ours], layouts[theirs]
        label = f"{name}: {ours} vs {theirs}"
        rows.append(ratio_row(f"{label}, MB/s (cold)", mine["mb_per_second"], delta["mb_per_second"], ">= 2x"))
        warm = mine["warm_mb_per_second"], delta["warm_mb_per_second"]
        rows.append(ratio_row(f"{label}, MB/s of the statement alone (its process already started)", *warm, ""))
        rows.append(
            ratio_row(f"{label}, output MB", mine["output_bytes"] / 1e6, delta["output_bytes"] / 1e6, "<= 1.0x")
        )
        rows.append(ratio_row(f"{label}, output files", mine["files"], delta["files"], ""))
        read = [[side["files_read"][c] for c in columns] for side in (mine, delta)]
        if len(columns) == 1:
            rows.append(ratio_row(f"{label}, files read by a {c1} predicate", read[0][0], read[1][0], "<= 1.0x"))
            continue
        rows.extend(
            ratio_row(f"{label}, files read by a {c} predicate", a, b, "")
            for c, a, b in zip(columns, *read, strict=True)
        )
        rows.append(ratio_row(f"{label}, files read, worst key column", max(read[0]), max(read[1]), "<= 1.0x"))
        means = (float(np.mean(read[0])), float(np.mean(read[1])))
        rows.append(ratio_row(f"{label}, files read, mean of the key columns", *means, "<= 1.0x"))
    return rows


def delta_cluster_rows(measured: dict[str, Any]) -> list[list[Any]]:
    """[measure, recluster, Delta, ratio, goal] rows of one table size."""
    ours, theirs, label = measured["recluster"], measured["delta_zorder"], measured["label"]
    mbps, bytes_ratio = ours["mb_per_s"] / theirs["mb_per_s"], ours["output_bytes"] / theirs["output_bytes"]
    memory = max(ours["executor_peak_rss_bytes"]) / max(theirs["executor_peak_rss_bytes"])
    met = {True: "met", False: "MISSED"}
    return [
        ratio_row(f"{label}: cold MB/s", ours["mb_per_s"], theirs["mb_per_s"], f">= 1.2 ({met[mbps >= 1.2]})"),
        ratio_row(f"{label}: statement MB/s", ours["statement_mb_per_s"], theirs["statement_mb_per_s"], "-"),
        ratio_row(
            f"{label}: output MB",
            ours["output_bytes"] / MB,
            theirs["output_bytes"] / MB,
            f"<= 1.0 ({met[bytes_ratio <= 1.0]})",
        ),
        ratio_row(
            f"{label}: largest executor peak RSS, MB",
            max(ours["executor_peak_rss_bytes"]) / MB,
            max(theirs["executor_peak_rss_bytes"]) / MB,
            f"<= 1.0 ({met[memory <= 1.0]})",
        ),
    ]


def delta_optimize(results: Results) -> str:
    full = results.newest_name("delta-optimize") is not None  # else the quick run's (smaller data, same method)
    file, d = results.get("delta-optimize" if full else "delta-optimize-quick")
    data_sets = d["data_sets"].items()
    sets = ", ".join(f"{name} ({m['rows']:,} rows, {m['input_bytes'] / MB:.0f} MB)" for name, m in data_sets)
    details = (
        f"{sets}, each written in {d['commits']} commits; Delta Spark 4.4 on pyspark 4.2 with its default settings "
        "in a fresh JVM, recluster as the `recluster run --final` command, each cold in its own process on the same "
        f"two cores; both aim at the input's bytes / {d['output_files']} per file; files read = mean over 200 "
        "predicates covering 0.1% of a column's range (a string column: one value) of the files Delta's min/max "
        "stats keep" + ("; quick sizes" if d["quick"] else "")
    )
    rows = summary_records([row for name, measured in data_sets for row in delta_optimize_rows(name, measured)])
    return bench_block("Against Delta Spark's own OPTIMIZE", "delta_optimize_bench", file, details, rows)


def delta_cluster(results: Results) -> str:
    full = results.newest_name("delta-cluster") is not None  # else the quick run's (a smaller table, same method)
    file, d = results.get("delta-cluster" if full else "delta-cluster-quick")
    sizes = ", ".join(
        f"{m['input_bytes'] / MB:,.0f} MB ({m['rows']:,} rows, {m['input_files']} files)" for m in d["sizes"]
    )
    details = (
        f"random int64 keys with payload, {sizes}; each side on a fresh standalone cluster of 2 workers (1 core, "
        "1.5 GB, executors of 1 GB heap) on this machine's two cores: `recluster run --final` with merges in Spark "
        "tasks on pyspark 4.3, Delta Spark 4.4's `OPTIMIZE ZORDER BY (k)` on pyspark 4.2 with its default settings; "
        f"both aim at {d['target_file_bytes'] / MB:,.0f} MB files; cold = driver process start to end, the cluster "
        "already up; executor memory = the largest executor JVM plus its Python workers"
        + ("; quick size" if d["quick"] else "")
    )
    rows = summary_records([row for measured in d["sizes"] for row in delta_cluster_rows(measured)])
    title = "On a Spark cluster, against Delta's OPTIMIZE ZORDER BY"
    return bench_block(title, "delta_cluster_bench", file, details, rows)


def pages(results: Results) -> str:
    file, c = results.get("pages")
    return (
        f"Rendering cost (`python -m bench.pages_bench`, {source(file)}; {c['tables']} tables, best of 5 over HTTP "
        "from `recluster ui`, which reads every table's log per request):\n\n" + summary_table(c["summary"])
    )


def log_reads(results: Results) -> str:
    file, r = results.get("log-reads")
    details = (
        f"{r['readers']} threads reading one commit file in a loop on the S3 emulator, {r['latency_ms']} ms added to "
        f"each request, beside a thread counting a Python loop for {r['spin_seconds']:.0f} s; median of "
        f"{len(r['share_of_spin']['obstore'])} rounds, alternating; baseline = delta-rs's file system for pyarrow"
    )
    return bench_block("Reading commits", "log_reads_bench", file, details, r["summary"])


def kafka_batch(results: Results) -> str:
    file, r = results.get("kafka-batch")
    return bench_block(
        "Reading a batch of events",
        "kafka_batch_bench",
        file,
        f"local[1], a topic of {r['partitions']} partitions on Apache Kafka, {r['events_per_second']:.0f} events a "
        f"second for {r['seconds']:.0f} s a run, a trigger every {r['trigger_seconds']:.0f} s; median over the batches "
        f"with events of {r['rounds']} rounds, alternating; baseline = the same source with one task a partition",
        r["summary"],
    )
