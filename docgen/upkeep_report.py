"""The summary, goals and docs block of bench.upkeep_bench (issue 33's incremental upkeep), from its results JSON.

Goals, per case (workload x appends) and each evaluated where its baseline ran:
- against liquid `OPTIMIZE` every 5 appends: at write amplification no higher than its, time-averaged files read per
  predicate <= 0.6x its figure;
- against liquid `OPTIMIZE` after every append: write amplification <= 0.5x at time-averaged files read no worse.
"""

from __future__ import annotations

from typing import Any

from docgen.figures import Json, Results, goal_lines, num, ratio_row, source, table, whole

OURS = "recluster"
BASELINES = (
    ("liquid_every_5", "liquid OPTIMIZE every 5"),
    ("liquid_every_1", "liquid OPTIMIZE every append"),
    ("zorder_every_5", "ZORDER BY every 5"),
)
LABELS = {
    "recluster": "recluster (absorb, a round per append)",
    "recluster_spark_appends": "recluster, Delta Spark appends",
    "liquid_every_1": "liquid OPTIMIZE every append",
    "liquid_every_5": "liquid OPTIMIZE every 5",
    "zorder_every_5": "ZORDER BY every 5",
}


def summary_rows(result: Json) -> list[list[Any]]:
    """Per case, recluster against each Delta strategy that ran: files read, write amplification, depth, seconds."""
    rows: list[list[Any]] = []
    for name, case in result["cases"].items():
        runs = case["strategies"]
        if OURS not in runs:
            continue
        ours = runs[OURS]
        for baseline, label in BASELINES:
            if baseline not in runs:
                continue
            theirs = runs[baseline]
            prefix = f"{name}: vs {label}"
            files_goal = {"liquid_every_5": "<= 0.6x", "liquid_every_1": "<= 1.0x"}.get(baseline, "")
            wa_goal = {"liquid_every_5": "<= 1.0x", "liquid_every_1": "<= 0.5x"}.get(baseline, "")
            rows += [
                ratio_row(
                    f"{prefix}, files read per predicate (time-averaged)",
                    ours["time_averaged_files_read"],
                    theirs["time_averaged_files_read"],
                    files_goal,
                ),
                ratio_row(
                    f"{prefix}, write amplification",
                    ours["write_amplification"],
                    theirs["write_amplification"],
                    wa_goal,
                ),
                ratio_row(
                    f"{prefix}, depth (time-averaged)", ours["time_averaged_depth"], theirs["time_averaged_depth"], ""
                ),
                ratio_row(
                    f"{prefix}, compute s per append (warm)",
                    ours["compute_seconds_per_append"],
                    theirs["compute_seconds_per_append"],
                    "",
                ),
            ]
    return rows


def goals(result: Json) -> list[dict[str, Any]]:
    """The issue's two goals per case whose baseline ran: {case, goal, value, met, ratios}."""
    out: list[dict[str, Any]] = []
    for name, case in result["cases"].items():
        runs = case["strategies"]
        if OURS not in runs:
            continue
        ours = runs[OURS]
        for baseline, files_limit, wa_limit, text in (
            ("liquid_every_5", 0.6, 1.0, "files read <= 0.6x liquid OPTIMIZE every 5, at write amplification <= its"),
            ("liquid_every_1", 1.0, 0.5, "write amplification <= 0.5x liquid OPTIMIZE every append, files read <= its"),
        ):
            if baseline not in runs:
                continue
            theirs = runs[baseline]
            files = ours["time_averaged_files_read"] / theirs["time_averaged_files_read"]
            wa = ours["write_amplification"] / theirs["write_amplification"]
            value = (
                f"files read {num(files)}x ({num(ours['time_averaged_files_read'])} vs "
                f"{num(theirs['time_averaged_files_read'])}), write amplification {num(wa)}x "
                f"({num(ours['write_amplification'])} vs {num(theirs['write_amplification'])})"
            )
            every = runs.get("liquid_every_1")
            bound = every["time_averaged_files_read"] / theirs["time_averaged_files_read"] if every else None
            if bound is not None and baseline == "liquid_every_5":
                value += f"; the table clustered whole after every append (liquid every append) reads {num(bound)}x"
            out.append(
                {
                    "case": name,
                    "baseline": baseline,
                    "goal": f"{name}: {text}",
                    "value": value,
                    "files_read_ratio": files,
                    "write_amplification_ratio": wa,
                    "met": files <= files_limit and wa <= wa_limit,
                    "clustered_after_every_append_ratio": bound if baseline == "liquid_every_5" else None,
                }
            )
    return out


def strategy_table(result: Json) -> str:
    """Every strategy of every case: the four measures and the files at the end."""
    rows = []
    for name, case in result["cases"].items():
        for strategy, run in case["strategies"].items():
            rows.append(
                [
                    name,
                    LABELS.get(strategy, strategy),
                    num(run["time_averaged_depth"]),
                    num(run["time_averaged_files_read"]),
                    num(run["write_amplification"]),
                    num(run["compute_seconds_per_append"]),
                    whole(run["final_files"]),
                ]
            )
    headers = ("case", "strategy", "depth", "files read", "write ampl.", "s / append", "files at end")
    return table(headers, rows, "llrrrrr")


def not_run(result: Json) -> list[str]:
    """What was planned but not run, and why (skipped strategies of the cases, cases past the time budget)."""
    lines = sorted({f"- {case['skipped']}" for case in result["cases"].values() if case.get("skipped")})
    unfinished = [
        f"- {name}: {', '.join(s for s in case['planned'] if s not in case['strategies'])} (the run was stopped)"
        for name, case in result["cases"].items()
        if not result["complete"] and set(case["planned"]) - set(case["strategies"])
    ]
    budget = [f"- {name}: {why}" for name, why in result.get("not_run", {}).items()]
    reached = set(result["cases"]) | set(result.get("not_run", {}))
    unreached = [
        f"- {name}: not reached (the run was stopped)"
        for name in result.get("planned_cases", [])
        if name not in reached
    ]
    return lines + unfinished + budget + unreached


def sizes(result: Json) -> str:
    seen: dict[tuple[int, int, int], list[str]] = {}
    for name, case in result["cases"].items():
        seen.setdefault((case["appends"], case["rows_per_append"], case["rows"] // case["target_rows"]), []).append(
            name
        )
    return "; ".join(
        f"{appends} appends of {rows:,} rows, target files of 1/{files} of the table ({', '.join(names)})"
        for (appends, rows, files), names in seen.items()
    )


def upkeep(results: Results) -> str:
    """The docs block: what ran, the strategy table, the goals."""
    full = results.newest_name("upkeep") is not None  # else the quick run's (fewer, smaller appends, same method)
    file, u = results.get("upkeep" if full else "upkeep-quick")
    details = (
        f"{sizes(u)}; Delta Spark 4.4 (pyspark 4.2) in one warm process for the whole run (its JVM start in no "
        f"figure), {', '.join(f'{k}={v}' for k, v in u['spark_conf'].items())}, `optimize.maxFileSize` = "
        "recluster's target file bytes; liquid tables appended to by Delta Spark, the others by delta-rs, from the "
        "same Parquet slices; depth = recluster's depth on each key column's min/max, mean over the key columns; files "
        "read = per key column, 200 predicates covering 0.1% of the range appended so far (a string column: one "
        "value), measured after every append and averaged; write amplification = bytes maintenance wrote / bytes "
        "appended; s / append = maintenance wall seconds / appends, both sides warm"
        + ("; quick sizes" if u["quick"] else "")
    )
    if u.get("runs"):
        budgets = [r["budget_minutes"] for r in u["runs"]] + [u["budget_minutes"]]
        details += (
            f"; run in {len(budgets)} parts, the later ones with `--resume` (each part's cases not started within its "
            f"`--budget` of {', '.join(f'{b:g}' for b in budgets)} minutes are listed below)"
        )
    parts = [
        f"**Incremental upkeep against Delta's OPTIMIZE** (`python -m bench.upkeep_bench`, {source(file)}; {details}):",
        strategy_table(u),
        "Goals (issue 33):",
        "\n".join(goal_lines(goals(u))),
    ]
    missing = not_run(u)
    if missing:
        parts += ["Not run:", "\n".join(missing)]
    return "\n\n".join(parts)
