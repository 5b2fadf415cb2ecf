"""Storage faults through a fault-injecting S3 front (tests/faults/) between recluster and moto: lost PUT answers,
500s after a PUT was applied, 503 SlowDown, 500 on reads, reset connections, latency, aimed at commit files, data
files, checkpoints, `_last_checkpoint` and listings. After every command the table is read by Delta Spark (rows
exact), every file the log references exists, the command's exit code and report match what the log gained, and
`recluster clean` leaves no orphan. `python -m bench.storage_faults_bench` runs the long seeded matrix."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql.streaming.datasource import ReadAllAvailable

from recluster.delta.log import LOG_GAP, read_commits
from recluster.delta.object_store import put_new_object
from recluster.delta.storage import commit_file_exists
from tests.faults.front import FaultFront
from tests.faults.plan import Decider, FaultKind, FaultPlan, FaultRule, Target, classify
from tests.faults.runs import ORPHANING_SETTINGS, FaultRun, Operation, matrix_rules, orphaning_rules
from tests.s3_server import S3Server
from triggers.delta_log import CommitRange, DeltaLogStreamReader, commit_rows, newest_version

SEED = 20261127


@pytest.fixture(scope="module")
def front(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultFront]:
    with FaultFront(s3.endpoint, tmp_path_factory.mktemp("front") / "front.log") as running:
        yield running


def test_requests_are_classified_by_target() -> None:
    assert classify("/lake/t/_delta_log/00000000000000000007.json")[0] is Target.COMMIT
    assert classify("/lake/t/_delta_log/00000000000000000010.checkpoint.parquet")[0] is Target.CHECKPOINT
    assert classify("/lake/t/_delta_log/_last_checkpoint")[0] is Target.LAST_CHECKPOINT
    assert classify("/lake/t/p%3D1/part-L0-x.parquet")[0] is Target.DATA
    assert classify("/lake?list-type=2&prefix=t%2F_delta_log%2F") == (Target.LISTING, "list:t/_delta_log/")
    assert classify("/lake/t/_delta_log/00000000000000000007.crc")[0] is Target.OTHER


def test_decisions_depend_on_the_seed_not_on_the_order_of_requests() -> None:
    plan = FaultPlan(SEED, (FaultRule(FaultKind.SERVER_ERROR, Target.DATA, ("GET",), rate=0.5),))
    paths = [f"/lake/t/f{i}.parquet" for i in range(40)] * 3

    def hits(order: list[str]) -> Counter[str]:
        decider = Decider(plan)
        return Counter(p for p in order if decider.decide("GET", p) is not None)

    forward = hits(paths)
    assert forward == hits(paths[::-1]) and 0 < sum(forward.values()) < len(paths)
    budgeted = Decider(FaultPlan(SEED, (FaultRule(FaultKind.RESET, Target.ANY, budget=2),)))
    assert [budgeted.decide("HEAD", "/lake/x") is not None for _ in range(4)] == [True, True, False, False]


def test_each_fault_kind_reaches_the_client_as_a_store_would_answer(s3: S3Server, front: FaultFront) -> None:
    via = s3.through(front.endpoint)
    uri = s3.table_uri("kinds")
    no_retries = {**via.options(), "max_retries": "0"}
    write_deltalake(uri, pa.table({"k": [1, 2, 3]}), storage_options=s3.options())
    prefix = uri.removeprefix(f"s3://{s3.bucket}/")

    def fault(kind: FaultKind, target: Target, *methods: str) -> None:
        front.plan(SEED, FaultRule(kind, target, methods, budget=1, prefix=prefix))

    already = len(front.faults())
    fault(FaultKind.APPLIED_ERROR, Target.COMMIT, "PUT")  # applied, answered 500: obstore's retry gets 412
    assert not put_new_object(uri, "_delta_log/00000000000000000001.json", b'{"commitInfo":{}}\n', via.options())
    assert commit_file_exists(uri, 1, s3.options())
    fault(FaultKind.LOST_RESPONSE, Target.COMMIT, "PUT")  # applied, no answer: obstore does not retry it
    with pytest.raises(Exception, match="error sending request"):
        put_new_object(uri, "_delta_log/00000000000000000002.json", b'{"commitInfo":{}}\n', via.options())
    assert commit_file_exists(uri, 2, s3.options())
    fault(FaultKind.RESET, Target.COMMIT, "PUT")  # never reached the store
    with pytest.raises(Exception, match="error sending request"):
        put_new_object(uri, "_delta_log/00000000000000000003.json", b'{"commitInfo":{}}\n', via.options())
    assert not commit_file_exists(uri, 3, s3.options())
    fault(FaultKind.SLOW_DOWN, Target.COMMIT, "PUT")  # retried by obstore
    assert put_new_object(uri, "_delta_log/00000000000000000003.json", b'{"commitInfo":{}}\n', via.options())
    fault(FaultKind.SERVER_ERROR, Target.COMMIT, "HEAD")
    with pytest.raises(OSError, match="500"):
        commit_file_exists(uri, 3, no_retries)
    fault(FaultKind.LATENCY, Target.COMMIT, "HEAD")
    assert commit_file_exists(uri, 3, no_retries)
    injected = front.faults()[already:]
    assert [(f.kind, f.target, f.method) for f in injected] == [
        (FaultKind.APPLIED_ERROR, Target.COMMIT, "PUT"),
        (FaultKind.LOST_RESPONSE, Target.COMMIT, "PUT"),
        (FaultKind.RESET, Target.COMMIT, "PUT"),
        (FaultKind.SLOW_DOWN, Target.COMMIT, "PUT"),
        (FaultKind.SERVER_ERROR, Target.COMMIT, "HEAD"),
        (FaultKind.LATENCY, Target.COMMIT, "HEAD"),
    ]
    front.plan(SEED)


def test_a_transient_log_read_error_is_never_a_gap(s3: S3Server, front: FaultFront) -> None:
    """A 500 or a reset on a commit file says nothing about whether it is there: the log reader raises (the
    callers retry), the Delta-log source reads through it; only a file really gone is a LOG_GAP."""
    uri = s3.table_uri("gaps")
    for value in range(3):
        write_deltalake(uri, pa.table({"k": [value]}), mode="append", storage_options=s3.options())
    options = {**s3.through(front.endpoint).options(), "max_retries": "0"}
    prefix = uri.removeprefix(f"s3://{s3.bucket}/")
    front.plan(SEED, FaultRule(FaultKind.SERVER_ERROR, Target.COMMIT, ("GET",), budget=1, prefix=prefix))
    with pytest.raises(OSError):
        list(read_commits(uri, 1, 1, options))
    # every read of a commit file reset until two were: a rate below 1 drew from the table's random name, and one
    # run in eight saw no reset at all
    reset = FaultRule(FaultKind.RESET, Target.COMMIT, ("GET",), budget=2, prefix=prefix)
    front.plan(SEED, reset)
    rows = list(commit_rows([CommitRange(uri, 0, 2, tuple(sorted(options.items())))]))
    assert [(row[1], row[3]) for row in rows] == [(0, "WRITE"), (1, "WRITE"), (2, "WRITE")]  # none a LOG_GAP
    assert sum(f.kind is FaultKind.RESET and prefix in f.path for f in front.faults()) == 2
    front.plan(SEED, FaultRule(FaultKind.SERVER_ERROR, Target.COMMIT, ("HEAD",), budget=1, prefix=prefix))
    with pytest.raises(OSError):  # the source's latestOffset backs the table off on this (test below)
        newest_version(uri, 2, 10, options)
    front.plan(SEED)
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{prefix}/_delta_log/{1:020d}.json")
    assert [e.operation for e in read_commits(uri, 1, 2, options)] == [LOG_GAP, "WRITE"]


def test_the_source_backs_a_table_off_while_its_log_cannot_be_probed(s3: S3Server, front: FaultFront) -> None:
    """A 500 on the probe of the next commit file: that table has no new commits this trigger (the query goes on),
    is not probed again until its backoff passed, then catches up."""
    uri = s3.table_uri("backoff")
    for value in range(2):
        write_deltalake(uri, pa.table({"k": [value]}), mode="append", storage_options=s3.options())
    options = {**s3.through(front.endpoint).options(), "max_retries": "0"}
    reader = DeltaLogStreamReader({"tables": json.dumps([uri]), "storageOptions": json.dumps(options)})
    start = {"tables": {uri: 0}}
    prefix = uri.removeprefix(f"s3://{s3.bucket}/")
    front.plan(SEED, FaultRule(FaultKind.SERVER_ERROR, Target.COMMIT, ("HEAD",), budget=1, prefix=prefix))
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # no exception: no new commits for now
    probes = front.requests()["HEAD commit"]
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # within its backoff: not probed
    assert front.requests()["HEAD commit"] == probes
    failure = reader.backoff.get(uri)
    assert failure is not None and failure.attempts == 1
    time.sleep(max(0.0, failure.retry_at - time.time()) + 0.1)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"tables": {uri: 1}}
    assert reader.backoff.get(uri) is None
    front.plan(SEED)


FORCED = {
    Operation.FINAL: FaultKind.LOST_RESPONSE,
    Operation.INCREMENTAL: FaultKind.APPLIED_ERROR,
    Operation.OPTIMIZE: FaultKind.RESET,
}
"""The fault aimed at the first commit PUT of each command that commits, before the matrix's random rules: a PUT
whose answer was lost, one answered 500 after it was applied (obstore's retry gets 412), one never applied."""


@pytest.mark.slow
def test_seeded_fault_run_keeps_every_table_whole(s3, front, referee, tmp_path) -> None:
    """The short seeded run: each command once under the whole matrix at a rate of 0.3 (at most two faults per
    cell and command), the first commit PUT of each command that commits forced as above; then a commit that fails
    with outputs the store will not delete, `clean` and `maintain`. `python -m bench.storage_faults_bench` runs the
    long one."""
    run = FaultRun(s3, front, referee, tmp_path, SEED, in_process=True)
    run.append(6)
    for operation, kind in FORCED.items():
        step = run.step(
            operation, (FaultRule(kind, Target.COMMIT, ("PUT",), budget=1), *matrix_rules(0.3, 2, run.prefix))
        )
        assert step.check.intact and step.honesty_problem() is None, (step.check, step.honesty_problem(), step.error)
        assert step.exit_code == 0 and step.landed >= 1, step.error  # the commit went through its fault
        assert (kind, Target.COMMIT, "PUT") in {(f.kind, f.target, f.method) for f in step.faults}

    run.client_retries = 0  # every fault reaches recluster: the deletes of the failed commit's outputs fail
    step = run.step(Operation.INCREMENTAL, orphaning_rules(run.prefix), overrides=ORPHANING_SETTINGS)
    assert step.check.intact and step.honesty_problem() is None, (step.check, step.honesty_problem(), step.error)
    assert step.exit_code == 1 and step.landed == 0 and step.check.orphans, step
    run.client_retries = None

    for operation in (Operation.CLEAN, Operation.MAINTAIN):
        step = run.step(operation, matrix_rules(0.3, 2, run.prefix))
        assert step.check.intact and step.honesty_problem() is None, (step.check, step.honesty_problem(), step.error)
        if operation is Operation.CLEAN and step.exit_code:  # a fault no retry fixed: the user runs it again
            step = run.step(operation, ())
        if operation is Operation.CLEAN:
            assert step.exit_code == 0 and step.check.orphans == (), step
    kinds = Counter(f.kind for s in run.steps for f in s.faults)
    assert sum(kinds.values()) >= 40 and len(kinds) == len(FaultKind), kinds


@pytest.mark.slow
def test_watch_rides_out_errors_on_log_reads(s3, front, referee, tmp_path) -> None:
    """`recluster watch` while the store answers 500 or resets the connection on reads of the log: about half of
    the source's probes of the next commit file (HEAD), a fifth of the reads of commit files and `_last_checkpoint`
    (object_store retrying each request once, so many faults reach recluster): the Delta-log source backs the table
    off and probes it again, the job catches up with every append and stops cleanly."""
    run = FaultRun(s3, front, referee, tmp_path, SEED + 1, client_retries=1)
    run.append(2)
    backed_off = "reason=storage_error attempts="
    rules = [
        # the source's probe of the next commit, once it has probed that name 4 times: the probe and object_store's
        # retry both answered 500, so the error reaches the source (the random rules below may never hit both)
        FaultRule(FaultKind.SERVER_ERROR, Target.COMMIT, ("HEAD",), budget=2, prefix=run.prefix, after_requests=4),
        FaultRule(FaultKind.SERVER_ERROR, Target.COMMIT, ("HEAD",), rate=0.4, budget=10, prefix=run.prefix),
        FaultRule(FaultKind.RESET, Target.COMMIT, ("HEAD",), rate=0.2, budget=6, prefix=run.prefix),
        FaultRule(FaultKind.RESET, Target.COMMIT, ("GET",), rate=0.2, budget=10, prefix=run.prefix),
        FaultRule(FaultKind.SERVER_ERROR, Target.LAST_CHECKPOINT, ("GET",), rate=0.2, budget=6, prefix=run.prefix),
    ]
    step = run.step(Operation.WATCH, rules, watch_appends=4, watch_until=backed_off)
    assert step.exit_code == 0 and not step.error, step.error
    assert step.check.intact, step.check
    assert step.landed >= 1, step  # the job reclustered through the faults
    probes = [f for f in step.faults if f.method == "HEAD" and f.target is Target.COMMIT]
    assert len(probes) >= 3, Counter((f.kind, f.target, f.method) for f in step.faults)  # the source's own probes
    log = Path(step.report["log"]).read_text() if step.report else ""
    assert backed_off in log  # the source backed the table off at least once
