"""The absorb suite's report (issue 11): its acceptance goals and table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import markdown_table
from bench.compare.report import met
from bench.compare.workloads import ALL_ABSORB
from recluster.settings import PRESET_BETAS

ABSORB = "absorb"
LEVELS = "recluster_incr"


def absorb_goals(cases: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's acceptance goals, each with the measured values and by how much it is missed."""

    def get(case: str, strategy: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = cases.get(case, {}).get("strategies", {}).get(strategy)
        return result

    out: list[dict[str, Any]] = []
    for case, max_depth, max_wa in (("random_40", 2.0, 4.3), ("time_40", 1.5, 2.3), ("time_400", 1.3, 2.0)):
        r = get(case, ABSORB)
        if r:
            depth, wa = r["time_averaged_average_depth"], r["row_write_amplification"]
            out.append(
                {
                    "goal": f"{case}: absorb time-avg depth <= {max_depth:g} at row WA <= {max_wa:g}",
                    "value": f"depth {depth:.2f} (x{depth / max_depth:.2f} of goal), row WA {wa:.2f} "
                    f"(x{wa / max_wa:.2f} of goal)",
                    "met": depth <= max_depth and wa <= max_wa,
                }
            )
    ours, zorder = get("random_400", ABSORB), get("random_400", "z_order")
    if ours and zorder:
        wa, z_wa = ours["row_write_amplification"], zorder["row_write_amplification"]
        depth, z_depth = ours["time_averaged_average_depth"], zorder["time_averaged_average_depth"]
        out.append(
            {
                "goal": "random_400: absorb row WA <= 1/5 of z_order every 5, at no worse time-avg depth",
                "value": f"row WA {wa:.2f} vs z_order {z_wa:.2f} (ratio {wa / z_wa:.3f}); depth {depth:.2f} vs "
                f"{z_depth:.2f}",
                "met": wa <= z_wa / 5 and depth <= z_depth,
            }
        )
    for case in ("random_40", "random_400", "time_40", "time_400"):
        levels = get(case, LEVELS)
        variants = [(n, r) for n in ALL_ABSORB if n.startswith(ABSORB) and (r := get(case, n))]
        if not levels or not variants:
            continue
        cheaper = [
            (n, r) for n, r in variants if r["row_write_amplification"] <= levels["row_write_amplification"] * 1.05
        ]
        best = min(cheaper or variants, key=lambda item: item[1]["time_averaged_average_depth"])
        out.append(
            {
                "goal": f"{case}: absorb beats levels on depth at equal (or lower) row WA",
                "value": f"{best[0]} depth {best[1]['time_averaged_average_depth']:.2f} at row WA "
                f"{best[1]['row_write_amplification']:.2f} vs levels depth "
                f"{levels['time_averaged_average_depth']:.2f} at row WA {levels['row_write_amplification']:.2f}",
                "met": bool(cheaper) and best[1]["time_averaged_average_depth"] < levels["time_averaged_average_depth"],
            }
        )
    return out


ABSORB_HEADERS = (
    "workload",
    "strategy",
    "time-avg depth",
    "mean depth before maint.",
    "final depth",
    "row WA",
    "byte WA",
    "scan ratio",
    "maint. s",
    "files",
)


def absorb_rows(cases: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            case,
            strategy,
            r["time_averaged_average_depth"],
            r["pre_maintenance_average_depth_mean"] or "",
            r["final_average_depth"],
            r["row_write_amplification"],
            r["write_amplification"],
            r["scan"]["ratio_to_optimum"],
            r["maintenance_seconds"],
            r["final_files"],
        ]
        for case, workload in cases.items()
        for strategy, r in workload["strategies"].items()
    ]


def render_absorb(result: dict[str, Any], path: Path | str) -> None:
    print("\n### absorb suite (issue 11)" + (" (--quick)" if result["quick"] else "") + "\n")
    for name, case in result["cases"].items():
        p = case["parameters"]
        print(
            f"- {name}: {case['description']}, {p['batches']} appends x {p['rows_per_batch']:,} rows, "
            f"target_rows {p['target_rows']:,}, z_order every {p['maintenance_every_k']}"
        )
    print()
    print(markdown_table(ABSORB_HEADERS, absorb_rows(result["cases"])))
    print(
        "\ntime-avg depth = mean over appends of average_depth after that append's maintenance (what queries see); "
        "mean depth before maint. = mean of average_depth right before each maintenance (absorb/levels: right "
        "after each append); row WA = rows written by maintenance / rows appended; byte WA likewise in bytes. "
        f"absorb runs at the default beta {result['default_beta']:g}; presets quality {PRESET_BETAS['quality']:g}, "
        f"economy {PRESET_BETAS['economy']:g}. Rows verified equal to the appended rows for every table."
    )
    print("\n#### goals\n")
    for goal in result["goals"]:
        print(f"- {goal['goal']}: {goal['value']} -> **{met(goal['met'])}**")
    print(f"\nabsorb suite: {result['seconds']:.0f} s; results in {path}")
