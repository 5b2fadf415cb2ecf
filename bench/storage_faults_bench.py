"""Storage faults, the long seeded run (issue 41 item 2): `python -m bench.storage_faults_bench [--quick] [--seed N]
[--faults N]`.

recluster's commands on tables on moto_server, every request of theirs through the fault front of tests/faults: per
table `run --final`, `run` after appends, `optimize --type minor` after small appends, `run` again, `clean` and
`maintain` (orphans, vacuum, a checkpoint, log cleanup), each under every cell of the fault matrix (tests/faults/
runs.py: lost answers, 500 after an applied PUT or batch delete, 503 SlowDown, 500 on reads, resets, latency; x commit
files, data files, checkpoints, `_last_checkpoint`, listings, batch deletes) at `RATE` with at most `BUDGET` faults
per cell and command, plus one fault kind forced on the first commit PUT of each command that commits (in turn:
answer lost, 500 after it was applied, reset before it, 503). Before the second `run`, a commit fails with outputs
the store will not delete (every commit PUT reset, every delete answered 500, no client retries: orphans for
`clean`), and when orphans are left after `clean` and `maintain` failed under faults, `clean` runs again without
faults (as a user would run it again). Tables alternate between object_store's own retries (10, as deployed) and
two (more faults reach recluster's code) until `--faults` faults were injected; then `recluster watch` runs through
the front while appends land, under faults on the log's reads and the matrix. Appends are delta-rs's, straight to
moto.

After every command, on a copy of the table taken around the front: Delta Spark (the tests' referee, `./dev
referee`) reads exactly the rows appended (count + order-independent hash; rows lost and duplicated counted when
not), every file the latest version references exists, our files no retained version references are counted
(orphans), and the command's exit code and JSON are compared with the commits the log gained. Writes
bench/results/storage-faults[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import log, markdown_table, write_results
from tests.faults.front import FaultFront
from tests.faults.plan import FaultKind, FaultRule, Target
from tests.faults.runs import (
    COMMANDS_THAT_COMMIT,
    ORPHANING_SETTINGS,
    FaultRun,
    Operation,
    StepResult,
    matrix_rules,
    orphaning_rules,
)
from tests.referee import Referee, referee_missing
from tests.s3_server import moto_server

SEED = 20261127
RATE = 0.3
BUDGET = 2
TABLE_STEPS = (
    Operation.FINAL,
    Operation.INCREMENTAL,
    Operation.OPTIMIZE,
    Operation.INCREMENTAL,
    Operation.CLEAN,
    Operation.MAINTAIN,
)
ORPHANING_AFTER = 3
"""Before the step at this index, a table's commit fails with outputs the store will not delete (orphans)."""
FORCED_ON_COMMIT = (FaultKind.LOST_RESPONSE, FaultKind.APPLIED_ERROR, FaultKind.RESET, FaultKind.SLOW_DOWN)
WATCH_LOG_RULES = (
    (FaultKind.SERVER_ERROR, Target.COMMIT, "HEAD", 0.4, 10),
    (FaultKind.RESET, Target.COMMIT, "GET", 0.2, 10),
    (FaultKind.SERVER_ERROR, Target.LAST_CHECKPOINT, "GET", 0.2, 6),
)
"""The watch's extra rules on the log's reads: (kind, target, method, rate, budget)."""


def step_record(table: int, step: StepResult, before: tuple[str, ...]) -> dict[str, Any]:
    """One command's figures; `before`: the orphans the table had before it."""
    report = step.report or {}
    check = step.check
    return {
        "table": table,
        "operation": str(step.operation),
        "client_retries": "default" if step.client_retries is None else step.client_retries,
        "faults": len(step.faults),
        "faults_by_kind": dict(Counter(str(f.kind) for f in step.faults)),
        "commit_put_faults": dict(
            Counter(str(f.kind) for f in step.faults if f.target is Target.COMMIT and f.method == "PUT")
        ),
        "exit_code": step.exit_code,
        "error": (step.error.splitlines() or [""])[-1],
        "stderr": step.error[-2000:] if step.honesty_problem() else "",
        "reported": {k: report[k] for k in ("tasks", "conflicts", "failures") if k in report},
        "commits_landed": step.landed,
        "honesty_problem": step.honesty_problem(),
        "rows": check.rows,
        "rows_expected": check.expected_rows,
        "rows_exact": check.rows_exact,
        "lost_rows": check.lost_rows,
        "duplicated_rows": check.duplicated_rows,
        "dangling": list(check.dangling),
        "orphans_left": len(check.orphans),
        "orphans_before": len(before),
        "orphans_gone": len(set(before) - set(check.orphans)),
        "seconds": round(step.seconds, 1),
    }


def forced(operation: Operation, index: int) -> tuple[FaultRule, ...]:
    if operation not in COMMANDS_THAT_COMMIT:
        return ()
    kind = FORCED_ON_COMMIT[index % len(FORCED_ON_COMMIT)]
    return (FaultRule(kind, Target.COMMIT, ("PUT",), budget=1),)


def run_table(run: FaultRun, steps: tuple[Operation, ...], first: int) -> None:
    run.append(6)
    for index, operation in enumerate(steps):
        if index == ORPHANING_AFTER:
            retries, run.client_retries = run.client_retries, 0
            logged(run.step(Operation.INCREMENTAL, orphaning_rules(run.prefix), overrides=ORPHANING_SETTINGS), run)
            run.client_retries = retries
        rules = (*forced(operation, first + index), *matrix_rules(RATE, BUDGET, run.prefix))
        logged(run.step(operation, rules), run)
    if run.steps[-1].check.orphans:  # `clean` and `maintain` failed under faults before removing them: run it again
        logged(run.step(Operation.CLEAN, ()), run)


def logged(step: StepResult, run: FaultRun) -> None:
    log(
        f"table {run.prefix} {step.operation}: exit {step.exit_code}, {len(step.faults)} faults, "
        f"{step.landed} commits, rows exact {step.check.rows_exact}, orphans {len(step.check.orphans)}"
        + (f", honesty: {step.honesty_problem()}" if step.honesty_problem() else "")
    )


def watch_rules(prefix: str) -> tuple[FaultRule, ...]:
    on_log = tuple(FaultRule(k, t, (m,), rate=r, budget=b, prefix=prefix) for k, t, m, r, b in WATCH_LOG_RULES)
    return (*on_log, *matrix_rules(RATE / 3, BUDGET, prefix))


def summary(records: list[dict[str, Any]], faults: Counter[tuple[str, str, str]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(r[key]) for r in records)

    def by(position: int) -> dict[str, int]:
        counted: Counter[str] = Counter()
        for cell, count in faults.items():
            counted[cell[position]] += count
        return dict(counted.most_common())

    last_of_table = {r["table"]: r for r in records}
    return {
        "faults_injected": sum(faults.values()),
        "faults_by_kind": by(0),
        "faults_by_target": by(1),
        "faults_by_operation": by(2),
        "matrix_cells_hit": len(faults),
        "operations_run": dict(Counter(r["operation"] for r in records)),
        "commands_failed": sum(1 for r in records if r["exit_code"] != 0),
        "commits_made": total("commits_landed"),
        "rows_checked": total("rows"),
        "lost_rows": total("lost_rows"),
        "duplicated_rows": total("duplicated_rows"),
        "dangling_log_entries": sum(len(r["dangling"]) for r in records),
        "orphans_made": sum(r["orphans_left"] - r["orphans_before"] + r["orphans_gone"] for r in records),
        "orphans_cleaned": total("orphans_gone"),
        "commit_put_faults": dict(
            sum((Counter(r["commit_put_faults"]) for r in records), Counter[str]()).most_common()
        ),
        "lost_answer_commands_reported_exactly": sum(
            1
            for r in records
            if {"lost_response", "applied_error"} & set(r["commit_put_faults"])
            and r["commits_landed"]
            and r["reported"].get("tasks") == r["commits_landed"]
        ),
        "orphans_left_at_the_end": sum(r["orphans_left"] for r in last_of_table.values()),
        "honesty_problems": [
            f"{r['table']} {r['operation']}: {r['honesty_problem']}" for r in records if r["honesty_problem"]
        ],
        "errors": sorted({r["error"] for r in records if r["error"]}),
    }


def main(quick: bool = False, seed: int = SEED, faults: int = 200) -> dict[str, Any]:
    missing = referee_missing()
    if missing:
        raise SystemExit(f"storage faults bench: {missing}")
    started = time.monotonic()
    target = 30 if quick else faults
    steps = TABLE_STEPS[:3] if quick else TABLE_STEPS
    records: list[dict[str, Any]] = []
    cells: Counter[tuple[str, str, str]] = Counter()
    with tempfile.TemporaryDirectory(prefix="storage-faults-") as scratch:
        work = Path(scratch)
        referee = Referee(work)
        try:
            with moto_server(work) as s3, FaultFront(s3.endpoint, work / "front.log") as front:
                runs: list[FaultRun] = []
                while sum(cells.values()) < target or len(runs) < 2 - quick:
                    retries = None if len(runs) % 2 == 0 else 2
                    folder = work / f"table-{len(runs)}"
                    folder.mkdir()
                    run = FaultRun(s3, front, referee, folder, seed + len(runs), client_retries=retries)
                    runs.append(run)
                    run_table(run, steps, first=len(runs) * len(steps))
                    cells.update((str(f.kind), str(f.target), str(s.operation)) for s in run.steps for f in s.faults)
                if not quick:
                    folder = work / "watch"
                    folder.mkdir()
                    run = FaultRun(s3, front, referee, folder, seed + len(runs), client_retries=1)
                    runs.append(run)
                    run.append(2)
                    step = run.step(Operation.WATCH, watch_rules(run.prefix), watch_appends=4)
                    log(f"watch: exit {step.exit_code}, {len(step.faults)} faults, {step.landed} commits")
                    cells.update((str(f.kind), str(f.target), str(step.operation)) for f in step.faults)
                for index, run in enumerate(runs):
                    before = [(), *(step.check.orphans for step in run.steps)]
                    records += [step_record(index, s, b) for s, b in zip(run.steps, before, strict=False)]
        finally:
            referee.stop()
    result: dict[str, Any] = {
        "seed": seed,
        "quick": quick,
        "rate": RATE,
        "budget_per_cell_and_command": BUDGET,
        "summary": summary(records, cells),
        "matrix": [{"kind": k, "target": t, "operation": o, "faults": n} for (k, t, o), n in sorted(cells.items())],
        "steps": records,
        "seconds": round(time.monotonic() - started, 1),
    }
    figures = result["summary"]
    print(
        markdown_table(
            ("measure", "value"),
            [(k, v) for k, v in figures.items() if not isinstance(v, (dict, list))]
            + [("faults by kind", figures["faults_by_kind"]), ("operations", figures["operations_run"])],
        )
    )
    path = write_results("storage-faults-quick" if quick else "storage-faults", result)
    log(f"wrote {path}")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.storage_faults_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one table, three commands, about 30 faults")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--faults", type=int, default=200, help="inject at least this many faults (default 200)")
    options = parser.parse_args()
    main(quick=options.quick, seed=options.seed, faults=options.faults)
