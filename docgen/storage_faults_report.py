"""The docs block of bench.storage_faults_bench (docs/guarantees.md#storage-faults), from its results JSON."""

from __future__ import annotations

from docgen.figures import Json, Results, source


def counts(figures: dict[str, int]) -> str:
    return ", ".join(f"{name.replace('_', ' ')} {count:,}" for name, count in figures.items())


def storage_faults(results: Results) -> str:
    file, r = results.get("storage-faults")
    s: Json = r["summary"]
    operations = counts(s["operations_run"])
    failed = s["commands_failed"]
    by_retries: dict[str, list[int]] = {}
    for step in r["steps"]:
        tally = by_retries.setdefault(str(step["client_retries"]), [0, 0])
        tally[0] += step["exit_code"] != 0
        tally[1] += 1
    made = by_retries.pop("0", [0, 0])[0]  # the commits made to fail on purpose (no client retries)
    retries = ", ".join(f"{n} of {total} with object_store's retries at {k}" for k, (n, total) in by_retries.items())
    errors = "; ".join(f"`{e.removeprefix('recluster: error: ')}`" for e in s["errors"]) or "none"
    honesty = "; ".join(s["honesty_problems"]) or "none"
    return (
        f"Seeded run (`python -m bench.storage_faults_bench`, seed {r['seed']}, {source(file)}): "
        f"{s['faults_injected']:,} faults injected in {s['matrix_cells_hit']} cells of kind x target x command (by "
        f"kind: {counts(s['faults_by_kind'])}; by target: {counts(s['faults_by_target'])}; by command: "
        f"{counts(s['faults_by_operation'])}) over {sum(s['operations_run'].values())} commands ({operations}). "
        f"{s['commits_made']} commits made; faults on commit PUTs: {counts(s['commit_put_faults'])}; "
        f"{s['lost_answer_commands_reported_exactly']} commands whose commit PUT lost its answer or got a 500 after it "
        f"was applied reported exactly the commits that landed. {s['rows_checked']:,} rows checked by Delta Spark "
        f"after every command: {s['lost_rows']} lost, {s['duplicated_rows']} duplicated; {s['dangling_log_entries']} "
        f"log entries naming a missing file. Orphans: {s['orphans_made']} made (failed commits and merges), "
        f"{s['orphans_cleaned']} removed by `clean` and `maintain`, {s['orphans_left_at_the_end']} left at the end. "
        f"{failed} commands failed: the {made} made to fail, and {retries}; each with exit 1 and one line "
        f"({errors}); reports that did not match the log: "
        f"{honesty}."
    )
