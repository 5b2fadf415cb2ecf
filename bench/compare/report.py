"""The anchor suite's report: goals, where each side wins, the markdown tables, and the figures cited from the
other benchmarks' latest results (merge throughput, metrics timings, streaming latency are not re-run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import markdown_table
from bench.compare.strategies import RECLUSTER
from bench.compare.workloads import Params
from docgen.figures import MB, RESULTS

# ---- references (existing benchmarks' latest JSON) ------------------------------------------------------------


def latest(name: str) -> tuple[Path | None, dict[str, Any] | None]:
    """Newest bench/results/<name>[-quick]-<date>.json; on the same date a full run wins over --quick."""
    pattern = re.compile(rf"^{name}(-quick)?-(\d{{4}}-\d{{2}}-\d{{2}})\.json$")
    found = []
    for path in RESULTS.glob(f"{name}-*.json"):
        match = pattern.match(path.name)
        if match:
            found.append((match[2], match[1] is None, path))
    if not found:
        return None, None
    path = max(found)[2]
    return path, json.loads(path.read_text(encoding="utf-8"))


def references() -> dict[str, Any]:
    refs: dict[str, Any] = {}
    path, merge = latest("merge")
    if merge:
        t = merge["throughput"]
        refs["merge_throughput"] = {
            "source": path.name if path else None,
            "recluster_mb_per_s": t["recluster_mb_per_s"],
            "raw_spark_mb_per_s": t["raw_mb_per_s"],
            "ratio": t["ratio_recluster_to_raw"],
            "input_mb": t["input_bytes"] / MB,
            "rows": t["rows"],
        }
    path, metrics = latest("metrics")
    if metrics:
        measures = metrics.get("measures", [])
        info = next(
            (m for m in measures if m["measure"].startswith("clustering_info") and "int64" in m["measure"]), None
        )
        incremental = next((m for m in measures if m["measure"].startswith("apply(")), None)
        refs["metrics"] = {
            "source": path.name if path else None,
            "clustering_info": info and {"measure": info["measure"], "seconds": info["seconds"], "goal": 3.0},
            "incremental_update": incremental
            and {"measure": incremental["measure"], "seconds": incremental["seconds"], "goal": 0.1},
        }
    path, stream = latest("stream")
    if stream:
        s = stream["stream"]
        refs["stream_latency"] = {
            "source": path.name if path else None,
            "p50_seconds": s["latency_median_seconds"],
            "p95_seconds": s["latency_p95_seconds"],
            "trigger_seconds": s["trigger_interval_seconds"],
            "appends": s["appends_timed"],
            "goal": 2.0,
        }
    return refs


# ---- goals, competitor wins, tables ----------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "missed"


def goals(workloads: dict[str, Any], refs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    a = workloads.get("a_uniform", {}).get("strategies", {}).get(RECLUSTER)
    if a:
        depth_ok = a["final_average_depth"] <= 2 and a["second_half_average_depth"] <= 2
        ok = depth_ok and a["write_amplification"] <= 3
        out.append(
            {
                "goal": "recluster incremental on (a): average_depth <= 2 with WA <= 3",
                "value": f"final depth {a['final_average_depth']:.2f}, second-half mean "
                f"{a['second_half_average_depth']:.2f}, WA {a['write_amplification']:.2f}",
                "met": ok,
            }
        )
    ratios = {
        name: w["strategies"][RECLUSTER]["scan"]["ratio_to_optimum"]
        for name, w in workloads.items()
        if RECLUSTER in w["strategies"]
    }
    if ratios:
        out.append(
            {
                "goal": "recluster incremental: range scans <= 1.25x optimum (every workload)",
                "value": ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()),
                "met": all(r <= 1.25 for r in ratios.values()),
            }
        )
    merge = refs.get("merge_throughput")
    out.append(
        {
            "goal": "merge throughput >= 0.8x raw Spark sort+write",
            "value": f"{merge['ratio']:.3f}x ({merge['recluster_mb_per_s']:.1f} vs {merge['raw_spark_mb_per_s']:.1f} "
            f"MB/s, {merge['input_mb']:,.0f} MB, {merge['source']})"
            if merge
            else "no merge benchmark results found",
            "met": bool(merge and merge["ratio"] >= 0.8),
        }
    )
    return out


WIN_FIGURES: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
    ("time-avg depth", lambda r: r["time_averaged_average_depth"]),
    ("final depth", lambda r: r["final_average_depth"]),
    ("scan ratio", lambda r: r["scan"]["ratio_to_optimum"]),
    ("rows scanned", lambda r: r["scan"]["mean_rows_scanned_share"]),
    ("WA", lambda r: r["write_amplification"]),
    ("maintenance s", lambda r: r["maintenance_seconds"]),
)


def _better(winner: dict[str, Any], loser: dict[str, Any]) -> list[str]:
    """Figures (lower is better) where `winner` beats `loser` by more than 5%."""
    return [
        f"{label} {value(winner):.3g} vs {value(loser):.3g}"
        for label, value in WIN_FIGURES
        if value(winner) < value(loser) * 0.95 - 1e-9
    ]


def _pairs(workloads: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(workload, other strategy, ours, theirs) for every maintained strategy beside recluster incremental."""
    for name, workload in workloads.items():
        strategies = workload["strategies"]
        ours = strategies.get(RECLUSTER)
        if not ours:
            continue
        for other, theirs in strategies.items():
            if other not in (RECLUSTER, "none"):
                yield name, other, ours, theirs


def competitor_wins(workloads: dict[str, Any]) -> list[str]:
    """Where another strategy beats recluster incremental, figure by figure (`none` left out: it wins on cost
    trivially)."""
    return [
        f"{name}: {other} beats {RECLUSTER} on " + "; ".join(better) + f" (its WA after half the "
        f"appends {theirs['write_amplification_at_half']:.2f} -> end {theirs['write_amplification']:.2f})"
        for name, other, ours, theirs in _pairs(workloads)
        if (better := _better(theirs, ours))
    ]


def recluster_wins(workloads: dict[str, Any]) -> list[str]:
    """Where recluster incremental beats each other maintained strategy."""
    return [
        f"{name}: {RECLUSTER} beats {other} on " + "; ".join(better)
        for name, other, ours, theirs in _pairs(workloads)
        if (better := _better(ours, theirs))
    ]


HEADERS = (
    "workload",
    "strategy",
    "final avg depth",
    "p99",
    "time-avg depth",
    "depth before last maint.",
    "scan ratio",
    "rows scanned %",
    "WA",
    "maint. s",
    "peak MB driver+/JVM/workers",
    "files",
)


def table_rows(workloads: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, workload in workloads.items():
        for strategy, r in workload["strategies"].items():
            peak = r["peak_memory_mb"]
            pre = r["pre_maintenance_average_depth_last"]
            rows.append(
                [
                    name,
                    strategy,
                    r["final_average_depth"],
                    r["final_p99_depth"],
                    r["time_averaged_average_depth"],
                    "" if pre is None else f"{pre:.2f} (p99 {r['pre_maintenance_p99_depth_last']})",
                    r["scan"]["ratio_to_optimum"],
                    100 * r["scan"]["mean_rows_scanned_share"],
                    r["write_amplification"],
                    r["maintenance_seconds"],
                    "-"
                    if not r["maintenance_calls"]
                    else f"{peak['driver_delta']:.0f}/{peak['jvm']:.0f}/{peak['spark_workers']:.0f}",
                    r["final_files"],
                ]
            )
    return rows


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Rows for `python -m bench`'s combined table: recluster incremental against the full Spark sort rewrite."""
    rows: list[list[Any]] = []
    for name, workload in result["workloads"].items():
        ours, base = workload["strategies"].get(RECLUSTER), workload["strategies"].get("spark_sort")
        if not ours or not base:
            continue
        rows.append(
            [
                f"{name}: time-avg depth, recluster_incr vs spark_sort every k",
                ours["time_averaged_average_depth"],
                base["time_averaged_average_depth"],
                ours["time_averaged_average_depth"] / base["time_averaged_average_depth"],
                f"<= 2 ({met(ours['time_averaged_average_depth'] <= 2)})" if name == "a_uniform" else "",
            ]
        )
        rows.append(
            [
                f"{name}: write amplification, recluster_incr vs spark_sort every k",
                ours["write_amplification"],
                base["write_amplification"],
                ours["write_amplification"] / base["write_amplification"] if base["write_amplification"] else "",
                f"<= 3 ({met(ours['write_amplification'] <= 3)})" if name == "a_uniform" else "",
            ]
        )
        rows.append(
            [
                f"{name}: range-scan files / optimum, recluster_incr vs spark_sort every k",
                ours["scan"]["ratio_to_optimum"],
                base["scan"]["ratio_to_optimum"],
                ours["scan"]["ratio_to_optimum"] / base["scan"]["ratio_to_optimum"],
                f"<= 1.25 ({met(ours['scan']['ratio_to_optimum'] <= 1.25)})",
            ]
        )
    return rows


def reference_lines(refs: dict[str, Any]) -> list[str]:
    lines = []
    if "merge_throughput" in refs:
        m = refs["merge_throughput"]
        lines.append(
            f"- merge throughput: recluster {m['recluster_mb_per_s']:.1f} MB/s vs raw Spark sort+write "
            f"{m['raw_spark_mb_per_s']:.1f} MB/s = {m['ratio']:.3f}x ({m['input_mb']:,.0f} MB; {m['source']})"
        )
    metrics = refs.get("metrics") or {}
    if metrics.get("clustering_info"):
        c = metrics["clustering_info"]
        lines.append(
            f"- {c['measure']}: {c['seconds']:.3f} s (goal < {c['goal']:g} s: {met(c['seconds'] < c['goal'])};"
            f" {metrics['source']})"
        )
    if metrics.get("incremental_update"):
        c = metrics["incremental_update"]
        lines.append(
            f"- per-commit incremental update, {c['measure']}: {c['seconds'] * 1000:.1f} ms "
            f"(goal < {c['goal'] * 1000:g} ms: {met(c['seconds'] < c['goal'])}; {metrics['source']})"
        )
    if "stream_latency" in refs:
        s = refs["stream_latency"]
        lines.append(
            f"- commit-to-decision latency: p50 {s['p50_seconds']:.2f} s, p95 {s['p95_seconds']:.2f} s over "
            f"{s['appends']} appends, trigger {s['trigger_seconds']:g} s (goal < {s['goal']:g} s: "
            f"{met(s['p95_seconds'] < s['goal'])}; {s['source']})"
        )
    return lines or ["- no results of the other benchmarks found in bench/results/"]


def render(result: dict[str, Any], path: Path | str) -> None:
    """Print the tables of one result (also from a stored JSON: `--report FILE`)."""
    workloads, refs, source = result["workloads"], result["references"], result.get("source", {})
    p = result["parameters"]
    params = Params(p["batches"], p["rows_per_batch"], p["maintenance_every_k"], p["target_rows"], p["queries"])
    memory = next(
        (r["memory_method"] for w in workloads.values() for r in w["strategies"].values() if r["maintenance_calls"]),
        "",
    )
    print("\n### compare" + (" (--quick)" if result["quick"] else "") + "\n")
    print(
        f"{params.batches} appends x {params.rows:,} rows per workload; maintenance every k={params.every} appends; "
        f"target_rows={params.target_rows:,} (recluster, and the file-size target of every other strategy); "
        f"{params.queries} range queries over {params.query_fraction:.0%} of the first key column's domain.\n"
    )
    print(markdown_table(HEADERS, table_rows(workloads)))
    print(
        "\nfinal/p99/time-avg depth: recluster clustering_info (time-avg = mean over appends of the depth after that "
        "append's maintenance); depth before last maint. = right before the last maintenance (recluster_incr: "
        "right after the last append); scan ratio = files scanned / files a perfectly sorted equal-row layout "
        "with the same file count scans; rows scanned % = "
        "share of the table's rows in scanned files; WA = bytes written by maintenance / bytes appended; peak MB = "
        f"driver Python peak RSS over its RSS at the start of each maintenance call / Spark JVM peak RSS (absolute) / "
        f"Spark Python workers (sampled), measured as {memory}; the JVM keeps heap it grew for earlier strategies and "
        "idle reusable workers count, so only the driver column is comparable between strategies. Rows verified "
        "equal to the appended rows (count + order-independent hash) for every table."
    )
    print("\n#### goals\n")
    for goal in result["goals"]:
        print(f"- {goal['goal']}: {goal['value']} -> **{met(goal['met'])}**")
    print("\n#### where a competitor wins\n")
    for line in competitor_wins(workloads) or ["(nowhere)"]:
        print(f"- {line}")
    print(f"\n#### where {RECLUSTER} wins\n")
    for line in recluster_wins(workloads) or ["(nowhere)"]:
        print(f"- {line}")
    print("\n#### references (not re-run; latest results of the other benchmarks)\n")
    print("\n".join(reference_lines(refs)))
    if source.get("uncommitted_engine_files"):
        print(
            f"\nengine: commit {source['commit'][:12]} with uncommitted changes: {source['uncommitted_engine_files']}"
        )
    print(f"\ncompare: {result['seconds']:.0f} s; results in {path}")
