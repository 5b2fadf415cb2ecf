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
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from docgen.compare_figures import (
    absorb_goals,
    absorb_presets,
    absorb_table,
    absorb_time,
    compare_anchors,
    compare_goals,
    compare_peers,
)
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
    kafka_batch,
    log_reads,
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
    "log-reads": log_reads,
    "kafka-batch": kafka_batch,
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
