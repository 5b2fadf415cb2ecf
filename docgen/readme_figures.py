"""Writes the figures of README.md and docs/ from bench/results/*.json: `python -m docgen.readme_figures [--check]`.

Hand-typed figures drift from what the benchmarks measured, so every figure sits between `<!-- figures:NAME -->` and
`<!-- /figures:NAME -->` in whichever Markdown file holds it (README.md or docs/**/*.md, each block in exactly one)
and is generated here from the newest results file of its benchmark (by the date in the file name); the pictures
(`docgen.depth_figure.PICTURES`) are SVG files written the same way. Without `--check` the files are rewritten in
place; with `--check` the command prints a diff and exits 1 when any differs from what it would write
(tests/test_readme_figures.py, `./dev docs`).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from docgen.depth_figure import PICTURES, picture
from docgen.figures import (
    BLOCK,
    MB,
    NO_BREAKS,
    OPENING,
    RESULTS,
    ROOT,
    WIDTH,
    Json,
    Results,
    goal_lines,
    met,
    num,
    source,
    span,
    table,
    whole,
)
from docgen.storage_faults_report import storage_faults
from docgen.summary_figures import (
    big_table,
    cluster,
    curve,
    delta_cluster,
    delta_optimize,
    estimate,
    fixed_cost,
    idle,
    job_scale,
    output,
    pages,
    watermark,
    watermark_model,
)
from docgen.upkeep_report import upkeep

# ---- Performance: metrics, merge, stream ----------------------------------------------------------------------


def measure(metrics: Json, prefix: str, contains: str = "") -> Json:
    found: Json = next(m for m in metrics["measures"] if m["measure"].startswith(prefix) and contains in m["measure"])
    return found


def placement_pairs(t: Json) -> str:
    """Per alternating run: the Spark placement's throughput over the in-process one (seconds over seconds)."""
    return ", ".join(
        num(s / p) for s, p in zip(t["recluster_seconds"], t["recluster_spark_placement_seconds"], strict=True)
    )


def performance(results: Results) -> str:
    metrics_file, metrics = results.get("metrics")
    merge_file, merge = results.get("merge")
    quick_file, quick = results.get("merge-quick")
    stream_file, stream = results.get("stream")
    p, t, w, s = metrics["parameters"], merge["throughput"], merge["write_amplification"], stream["stream"]
    info = measure(metrics, "clustering_info", "int64")
    inc, full = measure(metrics, "apply("), measure(metrics, "full clustering_metrics")
    q = quick["throughput"]
    goal = t.get("goal_ratio", 0.8)
    trigger = s["trigger_interval_seconds"]
    median, p95 = s["latency_median_seconds"], s["latency_p95_seconds"]
    rows = [
        ["metrics", f"`clustering_info` of {p['blocks']:,} blocks (int64 key)", f"{num(info['seconds'])} s", "", "",
         f"< {info['goal_seconds']:g} s, {met(info['met'])}"],
        ["metrics", f"incremental update: {p['changes']} added + {p['changes']} removed on a "
         f"{p['level_blocks']:,}-block level", f"{num(inc['seconds'])} s", f"{num(full['seconds'])} s full recompute",
         num(inc["seconds"] / full["seconds"]), f"< {inc['goal_seconds']:g} s, {met(inc['met'])}"],
        ["merge", f"throughput, {t['input_bytes'] / MB:,.0f} MB / {t['rows']:,} rows / {t['files']} overlapping "
         f"files -> {t['recluster_result']['files_added']} sorted files", f"{num(t['recluster_mb_per_s'])} MB/s",
         f"{num(t['raw_mb_per_s'])} MB/s raw Spark `repartitionByRange+sortWithinPartitions+write.parquet`",
         num(t["ratio_recluster_to_raw"]), f">= {goal:g}, {met(t['ratio_recluster_to_raw'] >= goal)} (quick size, "
         f"{q['input_bytes'] / MB:,.0f} MB: {num(q['ratio_recluster_to_raw'])})"],
        ["merge", "the same merge in Spark tasks (`merge.placement: spark`, the path a cluster takes) on the same "
         f"two cores, best of {len(t['recluster_spark_placement_seconds'])} alternating runs",
         f"{num(t['recluster_spark_placement_mb_per_s'])} MB/s ({num(min(t['recluster_spark_placement_seconds']))} s)",
         f"{num(t['recluster_mb_per_s'])} MB/s ({num(min(t['recluster_seconds']))} s) in the process",
         num(t["ratio_spark_placement_to_process"]), f"reported (pairs {placement_pairs(t)}; quick size, "
         f"{q['input_bytes'] / MB:,.0f} MB: {num(q['ratio_spark_placement_to_process'])}, "
         f"pairs {placement_pairs(q)})"],
        ["merge", f"write amplification, {w['appends']} appends x {w['rows_per_append']:,} random keys, one round "
         "after each", num(w["write_amplification"]), f"{num(w['full_rewrite_write_amplification'])} (full rewrite "
         "every append)", num(w["ratio_wa_to_full_rewrite"]), ""],
        ["merge", "average depth at the end of that run", whole(w["final_average_depth"]), "1 (full rewrite)", "", ""],
        ["stream", f"commit-to-decision latency at a {trigger:g} s trigger, median / p95",
         f"{num(median)} s / {num(p95)} s", f"{trigger:g} s trigger", f"{num(median / trigger)} / {num(p95 / trigger)}",
         f"< 2 s, {met(p95 < 2)} (warm JVM)"],
        ["stream", f"steady-state average depth over {s['appends_timed']} appends", num(s["steady_average_depth"]),
         "", "", ""],
        ["stream", "write amplification of the job", num(s["write_amplification"]),
         f"{num(s['full_rewrite_write_amplification'])} (full rewrite every append)",
         num(s["ratio_wa_to_full_rewrite"]), ""],
    ]  # fmt: skip
    loads = [d["machine"]["loadavg"][0] for d in (metrics, merge, stream)]
    return (
        table(("benchmark", "measure", "recluster", "baseline", "ratio", "goal"), rows, "llrrrl")
        + f"\n\nFrom {source(metrics_file, merge_file, quick_file, stream_file)}; 1-minute load "
        f"average at the end of the metrics, merge and stream runs: {span(loads)}."
    )


def commit(results: Results) -> str:
    file, c = results.get("commit")
    baselines = ("; baseline delta-rs `create_write_transaction`", "; baseline delta-rs alone listing the files", "")
    rows = [
        [m["measure"].removesuffix(", s") + b, f"{num(m['recluster'])} s", f"{num(m['baseline'])} s", num(m["ratio"])]
        for m, b in zip(c["summary"], baselines, strict=True)
    ]
    own, _, replay = (m["ratio"] for m in c["summary"])
    return (
        f"**Our own log commits** (`python -m bench.commit_bench`, {source(file)}, best of {c['runs']} alternating "
        f"runs, {c['files']}-file table):\n\n"
        + table(("measure", "recluster", "baseline", "ratio"), rows, "lrrr")
        + f"\n\nWriting the commit ourselves takes {num(own)}x the time of delta-rs's transaction (no snapshot "
        "rebuild, one create). What deletion vectors cost is the log replay that finds their descriptors (delta-rs's "
        f"file list does not carry them): a snapshot of a table with the deletionVectors feature takes {num(replay)}x "
        "as long as one without (the last row compares our own snapshot with and without the replay); tables without "
        "the feature skip it."
    )


# ---- Performance: the anchors (bench.compare) -----------------------------------------------------------------

ANCHOR_ROWS = {
    "a_uniform": ("(a) uniform int64", "none compact z_order spark_sort recluster_incr recluster_final absorb"),
    "b_time": ("(b) timestamps, 5% late", "recluster_incr z_order"),
    "c_two_col": ("(c) (int, string) key", "recluster_incr recluster_final z_order spark_sort"),
    "d_zipf": ("(d) zipf", "recluster_incr z_order"),
}
ANCHOR_LABELS = {
    "none": "no maintenance",
    "compact": "delta-rs compact every {k}",
    "z_order": "delta-rs z_order every {k}",
    "spark_sort": "full Spark sort every {k}",
    "recluster_incr": "**recluster incremental (each commit)**",
    "recluster_final": "recluster FINAL every {k}",
    "absorb": "recluster `absorb` (each commit)",
}
"""The README's selection of (workload, strategy) rows; the full table is in the JSON and printed by the bench."""


def compare_anchors(results: Results) -> str:
    file, c = results.get("compare")
    p, k = c["parameters"], c["parameters"]["maintenance_every_k"]
    rows = []
    for workload, (label, strategies) in ANCHOR_ROWS.items():
        ran = c["workloads"].get(workload, {}).get("strategies", {})
        for index, strategy in enumerate(s for s in strategies.split() if s in ran):
            r = ran[strategy]
            rows.append(
                [label if index == 0 else "", ANCHOR_LABELS[strategy].format(k=k), whole(r["final_average_depth"]),
                 num(r["time_averaged_average_depth"]), num(r["scan"]["ratio_to_optimum"]),
                 num(r["write_amplification"]), num(r["maintenance_seconds"])]
            )  # fmt: skip
    verified = [r["rows_verified"] for w in c["workloads"].values() for r in w["strategies"].values()]
    headers = ("workload", "strategy", "final depth", "time-avg depth", "scan ratio", "write amplification")
    return (
        f"**Against the anchors** (`python -m bench.compare`, full mode: {p['batches']} appends x "
        f"{p['rows_per_batch']:,} rows per workload, maintenance every k={k} appends for the periodic strategies, "
        f"target {p['target_rows']:,} rows per file; {c['seconds'] / 60:.0f} minutes; "
        + (
            "every strategy's final rows checked equal to the appended rows"
            if all(verified)
            else f"rows NOT verified for {verified.count(False)} of {len(verified)} tables"
        )
        + f"). Scan ratio = files a random {p['query_fraction']:.0%}-of-domain range query must read, over the "
        "optimum for that file count.\n\n"
        + table((*headers, "maintenance s"), rows, "llrrrrr")
        + "\n\nThe full table with p99, rows scanned and memory is printed by the command and stored in "
        + f"{source(file)}."
    )


def compare_goals(results: Results) -> str:
    c = results.get("compare")[1]
    finals = [
        w["strategies"]["recluster_final"] for w in c["workloads"].values() if "recluster_final" in w["strategies"]
    ]
    extra = {}
    scans = next((i for i, g in enumerate(c["goals"]) if "range scans" in g["goal"]), None)
    if scans is not None and finals:
        ratios = [r["scan"]["ratio_to_optimum"] for r in finals]
        extra[scans] = f" (recluster FINAL every k: {span(ratios)}x, {met(max(ratios) <= 1.25)})"
    return "Goals of the benchmark issue:\n\n" + "\n".join(goal_lines(c["goals"], extra))


def compare_peers(results: Results) -> str:
    c, merge = results.get("compare")[1], results.get("merge")[1]
    p = c["parameters"]
    every = [w["strategies"] for w in c["workloads"].values()]
    sorts = [s[n] for s in every for n in ("z_order", "spark_sort") if n in s]
    z, ours = (c["workloads"]["a_uniform"]["strategies"][n] for n in ("z_order", "recluster_incr"))
    periodic = [r for s in every for r in s.values() if r["pre_maintenance_average_depth_last"] is not None]
    periodic = [r for r in periodic if r["strategy"] != "recluster_incr"]
    ratio = merge["throughput"]["ratio_recluster_to_raw"]
    return (
        f"- **Depth and scans.** z_order and full sorts every k appends end at depth "
        f"{span((r['final_average_depth'] for r in sorts), whole)} and scan ratio "
        f"{span(r['scan']['ratio_to_optimum'] for r in sorts)} at WA {span(r['write_amplification'] for r in sorts)} "
        f"over {p['batches']} appends (their WA grows with table age: z_order on (a) "
        f"{num(z['write_amplification_at_half'])} -> {num(z['write_amplification'])} from {p['batches'] // 2} to "
        f"{p['batches']} appends). The `levels` policy keeps depth at about the number of non-empty levels "
        f"({whole(ours['final_average_depth'])} here) because each level sits at its own threshold and files are "
        "never merged across levels (as docs/concepts.md predicts), and it does not exploit time-ordered keys. "
        f"It wins only on time-averaged depth ({num(ours['time_averaged_average_depth'])} vs "
        f"{num(z['time_averaged_average_depth'])} for z_order on (a): the periodic strategies climb to depth "
        f"{span((r['pre_maintenance_average_depth_last'] for r in periodic), whole)} before each run). The `absorb` "
        'policy, now the default, is the answer on depth (below); this table was measured with `levels` ("recluster '
        'incremental"), as were the merge and stream figures above.\n'
        f"- **Raw merge speed.** Our merge reaches {num(ratio)}x the throughput of a bare Spark sort+write on the same "
        "cores, while also cutting files at key boundaries and writing Delta stats (a raw Spark write does neither): "
        "the in-process kernel reads, sorts and writes Arrow with no JVM in the way."
    )


# ---- Performance: the absorb suite (bench.compare --suite absorb) ----------------------------------------------


def absorb_labels(a: Json, k: int) -> dict[str, str]:
    return {
        "z_order": f"z_order every {k}",
        "recluster_incr": "levels",
        "absorb": f"absorb (beta {a['default_beta']:g})",
        "absorb_quality": f"absorb quality ({a['presets']['quality']:g})",
        "absorb_economy": f"absorb economy ({a['presets']['economy']:g})",
    }


def absorb_table(results: Results) -> str:
    file, a = results.get("absorb")
    rows: list[list[str]] = []
    sizes: dict[tuple[int, int, int, int], list[str]] = {}
    for name, case in a["cases"].items():
        p = case["parameters"]
        size = (p["batches"], p["rows_per_batch"], p["target_rows"], p["maintenance_every_k"])
        sizes.setdefault(size, []).append(name)
        labels = absorb_labels(a, p["maintenance_every_k"])
        for strategy, r in case["strategies"].items():
            pre = r["pre_maintenance_average_depth_mean"]
            rows.append(
                [name, labels.get(strategy, strategy), num(r["time_averaged_average_depth"]),
                 "" if pre is None else num(pre), whole(r["final_average_depth"]),
                 num(r["row_write_amplification"]), num(r["write_amplification"]), num(r["scan"]["ratio_to_optimum"]),
                 num(r["maintenance_seconds"])]
            )  # fmt: skip
    cases = "; ".join(
        f"{' and '.join(names)}: {b} appends x {rows_:,} rows with {target:,}-row files, z_order every {k} appends"
        for (b, rows_, target, k), names in sizes.items()
    )
    m = a["machine"]
    headers = ("workload", "strategy", "time-avg depth", "before maint.", "final depth", "row WA", "byte WA")
    return (
        f"Cases: {cases}. Measured {a['date']} in {a['seconds'] / 60:.0f} minutes on {m['cpus']} cores shared with "
        f"other Spark workloads (load average {span(m['loadavg'])} at the end): the maintenance seconds are not "
        f"comparable between rows; depth and WA do not depend on the load. Results: {source(file)} (per-append series "
        "included).\n\n" + table((*headers, "scan ratio", "maint. s"), rows, "llrrrrrrr")
    )


def absorb_goals(results: Results) -> str:
    return "Goals (issue 11):\n\n" + "\n".join(goal_lines(results.get("absorb")[1]["goals"]))


def absorb_presets(results: Results) -> str:
    a = results.get("absorb")[1]
    case = a["cases"]["random_40"]["strategies"]
    presets = [("absorb_quality", "`quality`"), ("absorb", "default"), ("absorb_economy", "`economy`")]
    beta = {
        "absorb_quality": a["presets"]["quality"],
        "absorb": a["default_beta"],
        "absorb_economy": a["presets"]["economy"],
    }
    ran = [(s, label) for s, label in presets if s in case]
    figures = "; ".join(
        f"{label} (beta {beta[s]:g}) depth {num(case[s]['time_averaged_average_depth'])} at row WA "
        f"{num(case[s]['row_write_amplification'])}"
        for s, label in ran
    )
    steps = "; ".join(
        f"from beta {beta[hi]:g} to {beta[lo]:g}: depth "
        f"{num(case[lo]['time_averaged_average_depth'] - case[hi]['time_averaged_average_depth'])} for row WA "
        f"+{num(case[lo]['row_write_amplification'] - case[hi]['row_write_amplification'])}"
        for (lo, _), (hi, _) in reversed(list(itertools.pairwise(ran)))
    )  # fmt: skip
    return f"- **Presets, measured on random_40:** {figures}. A lower beta buys depth with rewriting: {steps}."


def absorb_time(results: Results) -> str:
    cases = results.get("absorb")[1]["cases"]
    pairs = []
    for size in ("40", "400"):
        t, r = cases[f"time_{size}"]["strategies"]["absorb"], cases[f"random_{size}"]["strategies"]["absorb"]
        pairs.append(
            f"over {size} appends depth {num(t['time_averaged_average_depth'])} vs "
            f"{num(r['time_averaged_average_depth'])} at row WA {num(t['row_write_amplification'])} vs "
            f"{num(r['row_write_amplification'])}"
        )
    return f"Measured, time-like vs random keys with `absorb`: {'; '.join(pairs)}."


# ---- Guarantees: planning memory --------------------------------------------------------------------------------


def memory(results: Results) -> str:
    file, m = results.get("memory")
    ours, base = m["recluster"], m["baseline"]
    return (
        f"Planning memory (scenario 7; `python -m bench.memory_bench`, {source(file)}): `info` + selection on a "
        f"{m['files']:,}-file table peaks at {num(ours['peak_rss_above_imports_mb'])} MB of driver RSS above imports, "
        f"{num(ours['peak_rss_above_imports_mb'] / base['peak_rss_above_imports_mb'])}x delta-rs alone loading the "
        f"same snapshot, in {num(ours['seconds'])} s against {num(base['seconds'])} s."
    )


BLOCKS: dict[str, Callable[[Results], str]] = {
    "performance": performance,
    "commit": commit,
    "output": output,
    "fixed-cost": fixed_cost,
    "curve": curve,
    "cluster": cluster,
    "estimate": estimate,
    "watermark": watermark,
    "watermark-model": watermark_model,
    "idle": idle,
    "job-scale": job_scale,
    "big-table": big_table,
    "delta-optimize": delta_optimize,
    "delta-cluster": delta_cluster,
    "upkeep": upkeep,
    "pages": pages,
    "compare-anchors": compare_anchors,
    "compare-goals": compare_goals,
    "compare-peers": compare_peers,
    "absorb": absorb_table,
    "absorb-goals": absorb_goals,
    "absorb-presets": absorb_presets,
    "absorb-time": absorb_time,
    "memory": memory,
    "storage-faults": storage_faults,
    "depth-picture": picture("docs/depth-random-40.svg", "random_40"),
    "depth-over-time": picture("depth-random-400.svg", "random_400"),
}


# ---- rewriting the Markdown files ------------------------------------------------------------------------------


def wrap(text: str, width: int) -> str:
    """Prose paragraphs and bullets wrapped like the rest of the docs; table rows stay one line each."""
    out = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith("|"):
            out.append(paragraph)
            continue
        items = re.split(r"\n(?=- )", paragraph)
        out.append(
            "\n".join(
                textwrap.fill(item, width, subsequent_indent="  " if item.startswith("- ") else "", **NO_BREAKS)
                for item in items
            )
        )
    return "\n\n".join(out)


def render(text: str, results: Results) -> str:
    """`text` with every figures block regenerated; unknown, unclosed or misnested blocks are errors."""
    found = BLOCK.findall(text)
    names = [match[1] for match in found]
    opened = OPENING.findall(text)
    if sorted(opened) != sorted(names):
        raise ValueError(f"unclosed or misnested figures blocks: {sorted(set(opened) - set(names)) or opened}")
    if unknown := sorted(set(names) - set(BLOCKS)):
        raise ValueError(f"figures blocks with no generator: {unknown}")

    def replace(match: re.Match[str]) -> str:
        indent, name = match["indent"], match["name"]
        lines = wrap(BLOCKS[name](results), WIDTH - len(indent)).splitlines()
        body = "\n".join((indent + line).rstrip() for line in lines)
        return f"{indent}<!-- figures:{name} -->\n{body}\n{indent}<!-- /figures:{name} -->"

    return BLOCK.sub(replace, text)


def markdown_files(root: Path) -> list[Path]:
    """Where figures blocks may sit: README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def generate(root: Path, results: Results) -> dict[Path, tuple[str, str]]:
    """Every generated file under `root`: path -> (current text, generated text); each block in exactly one file."""
    files: dict[Path, tuple[str, str]] = {}
    holders: dict[str, list[str]] = {}
    for path in markdown_files(root):
        current = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(current):
            holders.setdefault(match["name"], []).append(path.relative_to(root).as_posix())
        files[path] = (current, render(current, results))
    if missing := [name for name in BLOCKS if name not in holders]:
        raise ValueError(f"no Markdown file has a block for: {missing}")
    if duplicated := {name: where for name, where in sorted(holders.items()) if len(where) > 1}:
        raise ValueError(f"figures blocks more than once: {duplicated}")
    for relative, draw in PICTURES.items():
        path = root / relative
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        files[path] = (current, draw(results))
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen.readme_figures", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print a diff and exit 1 if a file is out of date")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        files = generate(args.root, Results(args.results))
    except (ValueError, KeyError, StopIteration) as error:
        print(f"readme_figures: error: {error!r}", file=sys.stderr)
        return 2
    stale = {path: texts for path, texts in files.items() if texts[0] != texts[1]}
    for path, (current, generated) in stale.items():
        if args.check:
            name = str(path.relative_to(args.root))
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True), generated.splitlines(keepends=True), name, f"{name} (generated)"
                )
            )
            print(f"\n{name} differs from bench/results: run `python -m docgen.readme_figures`", file=sys.stderr)
        else:
            path.write_text(generated, encoding="utf-8")
            print(f"rewrote {path}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
