"""The `absorb` selection policy: property tests on synthetic run layouts against a brute-force oracle of the
rule (tests/absorb_model.py applies plans to files holding real keys), settings resolution, and a seeded
sequence of appends and sliced absorbs on a real Delta table with real Spark."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recluster.core.block_table import BlockTable
from recluster.core.blocks import Block, data_file_name, file_age, parse_data_file_name
from recluster.core.selection.absorb import decide_absorb, effective_beta
from recluster.core.selection.plan import Policy, Reason, SelectionBounds
from recluster.core.selection.runs import recover_runs
from recluster.delta.log_writer import set_table_properties
from recluster.engine.publish import MetricsRecord
from recluster.engine.rounds import recluster_table, snapshot_loader
from recluster.settings import (
    CLUSTER_BY_PROPERTY,
    POLICY_PROPERTY,
    ClusteringSettings,
    CommitSettings,
    SelectionSettings,
    Settings,
    SettingsError,
    load_settings,
    resolve_selection,
)
from tests.absorb_model import FINGERPRINT, ModelTable, absorb_bounds, make_block
from tests.helpers import main_json, one_file_table, row_multiset, run_main

# ---- the oracle ------------------------------------------------------------------------------------------------


def overlaps(a: Block, b: Block) -> bool:
    assert a.min_key is not None and a.max_key is not None and b.min_key is not None and b.max_key is not None
    return a.min_key <= b.max_key and b.min_key <= a.max_key


def oracle(blocks: list[Block], beta: float) -> tuple[int, set[str]] | None:
    """docs/concepts.md literally: runs by age; the first run i, walking from the oldest, with rows(newer runs) >=
    beta * rows(files of run i overlapping newer data) absorbs all newer runs (unless nothing overlaps)."""
    ages = sorted({file_age(b)[0] for b in blocks})
    runs = [[b for b in blocks if file_age(b)[0] == age] for age in ages]
    for index, run in enumerate(runs[:-1]):
        newer = [b for later in runs[index + 1 :] for b in later]
        touched = [b for b in run if any(overlaps(b, n) for n in newer)]
        if sum(n.rows for n in newer) >= beta * sum(b.rows for b in touched):
            members = touched + newer
            if not any(overlaps(a, b) for a, b in itertools.combinations(members, 2)):
                return None
            return ages[index], {b.path for b in members}
    return None


# ---- synthetic layouts -------------------------------------------------------------------------------------------

appends = st.lists(
    st.tuples(
        st.integers(0, 1_000), st.integers(0, 1_000), st.integers(1, 40), st.booleans()
    ),  # (low, high, rows, merge after this append)
    min_size=1,
    max_size=14,
)


def append_keys(rng: np.random.Generator, low: int, high: int, rows: int) -> np.ndarray:
    low, high = min(low, high), max(low, high)
    return rng.integers(low, high + 1, size=rows)


def self_overlapping_runs(table: ModelTable) -> list[int]:
    """Ages of absorb-written runs with two files that overlap (touching counts)."""
    return [
        run.age_ms
        for run in recover_runs(table.clustered)
        if run.horizon_ms is not None and any(overlaps(a, b) for a, b in itertools.combinations(run.files, 2))
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appends, st.sampled_from([0.2, 0.35, 0.5, 1.0, 2.0]), st.integers(2, 30), st.integers(0, 2**32 - 1))
def test_absorb_decision_matches_the_oracle(steps, beta, target_rows, seed):
    """Unbounded absorbs finish in one round, so every state is a plain run layout the oracle can judge."""
    rng = np.random.default_rng(seed)
    table = ModelTable(target_rows)
    for low, high, rows, merge in steps:
        table.append(append_keys(rng, low, high, rows))
        blocks = table.clustered
        runs = recover_runs(blocks)
        decided, time_like = decide_absorb(runs, beta)
        expected = oracle(blocks, beta)
        if time_like is not None:  # the watermark or the late run decides instead of the ratio rule
            if decided is not None:  # the oldest run absorbs all, or the late run (the oldest append) the appends
                into = 1 if decided.reason is Reason.LATE_RUN_ABSORB else 0
                assert decided.reason in (Reason.WATERMARK_ABSORB, Reason.LATE_RUN_ABSORB, Reason.LATE_RUN_REWRITE)
                assert decided.target_age_ms == runs[into].age_ms
                assert {b.path for r in runs[1:] for b in r.files} <= {b.path for b in decided.files}
        elif expected is None:
            assert decided is None
        else:
            assert decided is not None and decided.reason is Reason.ABSORB_RATIO
            assert (decided.target_age_ms, {b.path for b in decided.files}) == expected
        if merge:
            plan = table.round(absorb_bounds(beta))
            assert plan.policy is Policy.ABSORB
            assert not self_overlapping_runs(table), "an absorb left its run overlapping itself"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends,
    st.sampled_from([0.2, 0.5, 1.0]),
    st.integers(3, 12),
    st.integers(2, 6),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_sliced_absorbs_lose_nothing_and_cover_each_file_once(steps, beta, target_rows, slice_files, tasks, seed):
    """Slices of at most `slice_files` target files, `tasks` per round, drained after every append: every
    file of an absorb is merged by exactly one slice, nothing outside it is touched, the keys never change,
    slices of one round have disjoint ranges, and a drained absorb leaves one non-overlapping run."""
    rng = np.random.default_rng(seed)
    table = ModelTable(target_rows)
    bounds = absorb_bounds(beta, max_bytes=8 * target_rows * slice_files, tasks=tasks)
    for low, high, rows, _ in steps:
        table.append(append_keys(rng, low, high, rows))
        keys = table.all_keys()
        absorb: tuple[str, int | None] | None = None
        pending: set[str] = set()
        written: set[str] = set()
        for _round in range(200):
            plan = table.plan(bounds)
            if plan.empty:
                break
            live = set(table.blocks)
            inputs = [b.path for task in plan.tasks for b in task.files]
            assert len(inputs) == len(set(inputs)), "a file in two tasks of one round"
            assert set(inputs) <= live, "a task names a file the table does not hold"
            spans = sorted((min(b.min_key for b in t.files), max(b.max_key for b in t.files)) for t in plan.tasks)
            assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), "slices of one round overlap"
            identity = {(t.output_run, t.horizon_ms) for t in plan.tasks}
            assert len(identity) == 1, "one absorb per round and partition"
            if absorb is None or next(iter(identity)) != absorb:
                assert_done(table, absorb, pending)
                (reason,) = {t.reason for t in plan.tasks}
                assert reason in (
                    Reason.ABSORB_RATIO,
                    Reason.WATERMARK_ABSORB,
                    Reason.LATE_RUN_ABSORB,
                    Reason.LATE_RUN_REWRITE,
                )
                decided, _ = decide_absorb(recover_runs(table.clustered), beta)
                assert decided is not None
                absorb = next(iter(identity))
                pending = {b.path for b in decided.files}
                written = set()
            for path in inputs:
                assert path in pending or path in written, "a slice took a file outside its absorb"
                pending.discard(path)
            for task in plan.tasks:
                written.update(table.merge(task))
            assert np.array_equal(table.all_keys(), keys), "rows lost or duplicated"
        else:
            pytest.fail("sliced absorb did not finish within 200 rounds")
        assert_done(table, absorb, pending)
        assert not self_overlapping_runs(table)


def assert_done(table: ModelTable, absorb: tuple[str, int | None] | None, pending: set[str]) -> None:
    """Every file an absorb took in was merged; a file of the absorbing run itself may stay where the slices'
    outputs were cut around it (it then overlaps nothing newer any more). When every output of the absorb held
    one key value in a full file (level -1, out of the clustered files) no clustered file names its horizon and
    nothing resumes it: the rest waits for a later absorb."""
    if absorb is None:
        return
    age = int(absorb[0], 16)
    if (age, absorb[1]) not in {file_age(b) for b in table.clustered}:
        return
    left = [table.blocks[p] for p in pending if p in table.blocks]
    assert all(file_age(b)[0] == age for b in left), f"absorb {absorb} left newer files unmerged: {pending}"


def test_random_keys_stay_shallow_at_low_write_amplification():
    """The rule's known figures on random keys (docs/concepts.md simulation: ~2.6 at WA 2.8 for beta 1)."""
    rng = np.random.default_rng(3)
    table = ModelTable(100_000)
    depths = []
    for _ in range(40):
        table.append(rng.integers(-(1 << 62), 1 << 62, size=5_000))
        table.round(absorb_bounds(1.0))
        depths.append(table.average_depth)
    assert float(np.mean(depths)) < 3.0
    assert table.rewritten / table.appended < 3.2


# ---- runs from the log -------------------------------------------------------------------------------------------


def test_runs_recovered_from_names_and_add_times():
    keys = np.arange(10)
    appended = [make_block(f"part-{i}.parquet", keys + 100 * i, modified_ms=1_000 * i) for i in (3, 1, 2)]
    same_commit = make_block("part-1b.parquet", keys, modified_ms=1_000)
    ours = make_block(data_file_name(2, FINGERPRINT, f"{500:012x}", 2_000), keys, modified_ms=9_999)
    levels = make_block(data_file_name(1, FINGERPRINT, "abcdef012345"), keys, modified_ms=1_500)
    runs = recover_runs([*appended, same_commit, ours, levels])
    assert [r.age_ms for r in runs] == [500, 1_000, 1_500, 2_000, 3_000]
    assert runs[0].files == (ours,) and runs[0].horizon_ms == 2_000  # our age is in the name, not the add time
    assert {b.path for b in runs[1].files} == {"part-1.parquet", "part-1b.parquet"}
    assert runs[2].files == (levels,) and runs[2].horizon_ms is None  # a levels merge output: one run


def test_absorb_file_names_round_trip():
    name = data_file_name(3, FINGERPRINT, f"{1_795_000_000_000:012x}", 1_795_000_123_456)
    parsed = parse_data_file_name("p=1/" + name)
    assert parsed is not None and parsed.level == 3 and parsed.horizon_ms == 1_795_000_123_456
    assert int(parsed.run_id, 16) == 1_795_000_000_000
    assert parse_data_file_name(data_file_name(1, FINGERPRINT, "abcdef012345")).horizon_ms is None


def test_depth_target_lowers_beta_when_too_deep():
    rng = np.random.default_rng(5)
    deep = [make_block(f"f{i}", rng.integers(0, 100, 20), modified_ms=i) for i in range(8)]
    base = absorb_bounds(1.0)
    controlled = SelectionBounds(**{**{f: getattr(base, f) for f in base.__slots__}, "target_depth": 2.0})
    deep_table = BlockTable.from_blocks(deep)
    everything = np.arange(len(deep))
    assert effective_beta(deep_table, everything, base) == 1.0
    assert effective_beta(deep_table, everything, controlled) < 1.0  # depth 8 > 2: absorb sooner
    shallow = [make_block(f"g{i}", np.arange(10) + 10 * i, modified_ms=i) for i in range(8)]
    assert effective_beta(BlockTable.from_blocks(shallow), everything, controlled) > 1.0  # depth 1 < 2: rewrite less


# ---- settings and the metrics record -------------------------------------------------------------------------------


def test_selection_resolution_order():
    selection = SelectionSettings()
    assert resolve_selection(selection, {}).policy == selection.policy
    assert resolve_selection(selection, {POLICY_PROPERTY: "absorb"}).policy == "absorb"
    chosen = resolve_selection(selection, {POLICY_PROPERTY: "absorb"}, policy="levels", beta=0.7)
    assert (chosen.policy, chosen.resolved_beta) == ("levels", 0.7)
    assert SelectionSettings(preset="quality", beta=3).resolved_beta == 0.2
    assert resolve_selection(SelectionSettings(preset="economy"), {}, beta=0.5).resolved_beta == 0.5
    with pytest.raises(SettingsError, match=r"recluster\.policy must be one of levels, absorb"):
        resolve_selection(selection, {POLICY_PROPERTY: "fastest"})


def test_selection_settings_from_overrides():
    loaded = load_settings(
        overrides=["selection.policy=absorb", "selection.preset=economy", "selection.target_depth=2"]
    )
    assert (loaded.selection.policy, loaded.selection.resolved_beta, loaded.selection.target_depth) == (
        "absorb",
        1.0,
        2.0,
    )
    with pytest.raises(SettingsError, match=r"invalid setting selection\.policy"):
        load_settings(overrides=["selection.policy=fastest"])
    with pytest.raises(SettingsError, match=r"invalid setting selection\.beta"):
        load_settings(overrides=["selection.beta=0"])


def test_metrics_record_says_which_policy_acted():
    schema = MetricsRecord.model_json_schema()["properties"]
    assert {"policy", "beta", "reasons"} <= set(schema)
    assert "absorb_ratio" in schema["reasons"]["description"]


# ---- a real table --------------------------------------------------------------------------------------------------

SLICED = Settings(
    clustering=ClusteringSettings(target_rows=1_200, max_merge_bytes=20_000, max_tasks_per_round=2),
    selection=SelectionSettings(policy="absorb", beta=0.5),
)


def batch(rng: np.random.Generator, index: int, rows: int) -> pa.Table:
    keys = rng.integers(-(10**9), 10**9, size=rows)
    return pa.table({"k": pa.array(keys, pa.int64()), "batch": pa.array([index] * rows, pa.int32())})


@pytest.mark.spark
def test_seeded_appends_and_sliced_absorbs_keep_every_row(tmp_path: Path, spark):
    """Appends and absorb rounds (each round a fresh snapshot from the log, as after a restart), slices bounded
    by max_merge_bytes; the rows read back equal the rows appended, and every absorb run ends sorted."""
    path = tmp_path / "events"
    rng = np.random.default_rng(11)
    appended = []
    reasons: list[str] = []
    for index in range(6):
        data = batch(rng, index, 800)
        appended.append(data)
        write_deltalake(str(path), data, mode="append")
        if index == 0:
            set_table_properties(path, {CLUSTER_BY_PROPERTY: "k"})
        for _round in range(12):
            loader = snapshot_loader(str(path), SLICED, None)  # a new loader each round: state from the log only
            result = recluster_table(str(path), loader, settings=SLICED, spark_factory=lambda: spark)
            assert result.totals.failures == 0 and result.policy == "absorb"
            reasons += [line.split("reason=")[1].split()[0] for p in result.plans for line in str(p).splitlines()[1:]]
            if result.totals.tasks == 0:
                break
    expected = pa.concat_tables(appended)
    actual = DeltaTable(str(path)).to_pyarrow_table().select(expected.column_names)
    assert row_multiset(actual) == row_multiset(expected)
    assert {"absorb_ratio", "absorb_resume"} <= set(reasons), reasons  # slices resumed from the log
    snapshot = snapshot_loader(str(path), SLICED, None)()
    for run in recover_runs(snapshot.blocks):
        if run.horizon_ms is not None:
            assert not any(overlaps(a, b) for a, b in itertools.combinations(run.files, 2))


@pytest.mark.spark
def test_cli_run_policy_and_beta(tmp_path: Path, capsys):
    path = tmp_path / "t"
    rng = np.random.default_rng(2)
    for index in range(3):
        write_deltalake(str(path), batch(rng, index, 200), mode="append")
    set_table_properties(path, {CLUSTER_BY_PROPERTY: "k", POLICY_PROPERTY: "absorb"})
    out = main_json(capsys, "run", path, "--dry-run")
    assert out["policy"] == "absorb" and "policy=absorb" in out["plans"][0]
    assert main_json(capsys, "run", path, "--dry-run", "--policy", "levels")["policy"] == "levels"
    version = DeltaTable(str(path)).version()
    code, _, err = run_main(capsys, "run", path, "--beta", "0")
    assert code == 2
    assert "--beta must be a positive number" in err
    set_table_properties(path, {POLICY_PROPERTY: "fastest"})
    code, _, err = run_main(capsys, "run", path, "--dry-run")
    assert code == 2
    assert "recluster.policy must be one of" in err
    assert DeltaTable(str(path)).version() == version + 1  # only the property change: the table is untouched


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_job_serves_each_table_with_its_policy(tmp_path: Path, spark):
    """The job plans each table with its policy: the default (absorb), or the table property recluster.policy
    (levels); the rows survive, and the status says which policy served the table."""
    from jobs.autorecluster import start_job, stop_gracefully
    from recluster.settings import TableSettings
    from recluster.settings_job import StreamSettings

    absorbed, levelled = tmp_path / "absorbed", tmp_path / "levelled"
    rng = np.random.default_rng(21)
    appended: dict[Path, list[pa.Table]] = {absorbed: [], levelled: []}
    for path in (absorbed, levelled):
        appended[path].append(batch(rng, 0, 1_000))
        write_deltalake(str(path), appended[path][-1], mode="append")
    set_table_properties(absorbed, {CLUSTER_BY_PROPERTY: "k"})
    set_table_properties(levelled, {CLUSTER_BY_PROPERTY: "k", POLICY_PROPERTY: "levels"})
    settings = Settings(
        clustering=ClusteringSettings(target_rows=3_000),
        stream=StreamSettings(
            checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval_seconds=0.2, starting_version="earliest"
        ),
        tables=[TableSettings(uri=str(absorbed)), TableSettings(uri=str(levelled))],
    )
    query, handler = start_job(spark, settings, settings.tables)
    try:
        for index in range(1, 7):
            for path in (absorbed, levelled):
                appended[path].append(batch(rng, index, 1_000))
                write_deltalake(str(path), appended[path][-1], mode="append")
            query.processAllAvailable()
        statuses = dict(handler.status)
    finally:
        stop_gracefully(query, handler)
    assert statuses[str(absorbed)].policy == "absorb" and statuses[str(levelled)].policy == "levels"
    assert statuses[str(absorbed)].tasks > 0 and statuses[str(absorbed)].failures == 0
    assert "policy=absorb" in str(statuses[str(absorbed)])
    for path in (absorbed, levelled):
        expected = pa.concat_tables(appended[path])
        assert row_multiset(DeltaTable(str(path)).to_pyarrow_table().select(expected.column_names)) == row_multiset(
            expected
        )
    written = {parse_data_file_name(p) for p in DeltaTable(str(absorbed)).file_uris()} - {None}
    assert written and all(w is not None and w.horizon_ms is not None for w in written)  # absorb runs, by name


def test_rewrite_planned_on_a_stale_snapshot_is_refused(tmp_path: Path):
    """delta-rs does not see a concurrent remove with dataChange=false as a conflict: two rewrites of one file,
    both anchored to the version before either, would both commit and duplicate its rows. The second must fail."""
    from recluster.delta.commit import CommitConflict

    path, data, rewrite = one_file_table(tmp_path)
    rewrite("a")
    with pytest.raises(CommitConflict, match="removed input"):
        rewrite("b")
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(data)


@pytest.mark.parametrize("log", ["replayed-when-planned", "replayed-at-commit"])
def test_rewrite_planned_before_the_table_was_recreated_is_refused(tmp_path: Path, log: str):
    """The table deleted and created again at its path while a rewrite of the old one was under way: the new log
    ends below the version the rewrite read, so the next version looked free. Committed, it would put the old
    table's file into the new one after a gap in its versions. It must be refused at once (no retries until the
    deadline) and the new table left alone, whether the job's round had replayed the old log already or not."""
    from recluster.core.blocks import WrittenFile
    from recluster.delta.commit import CommitConflict, RewriteCommit, commit_rewrite

    path, _, _ = one_file_table(tmp_path)
    snapshot = snapshot_loader(str(path), Settings(), None)()  # planned at version 1
    if log == "replayed-when-planned":
        snapshot.log.state()
    (block,) = snapshot.blocks
    stats = {"numRecords": 3, "minValues": {"k": 1}, "maxValues": {"k": 3}, "nullCount": {"k": 0}}
    output = WrittenFile("a.parquet", 3, block.bytes, (), stats, 1)
    kept = (path / "a.parquet").read_bytes()  # the rewrite's output, written before the table was deleted
    shutil.rmtree(path)
    recreated = pa.table({"k": pa.array([7, 8], pa.int64())})
    write_deltalake(str(path), recreated)  # version 0 of a new table
    (path / "a.parquet").write_bytes(kept)
    commit = RewriteCommit(str(path), snapshot.version, (block,), (output,), "a", log=snapshot.log)
    with pytest.raises(CommitConflict, match="commit 1 is no longer in the log"):
        commit_rewrite(commit, {}, CommitSettings(deadline_seconds=10))
    assert sorted(p.name for p in (path / "_delta_log").glob("*.json")) == [f"{0:020d}.json"]
    assert row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(recreated)


def outside_compaction(path: Path, name: str) -> None:
    """Another tool's rewrite of the table's one file into `name` (delta-rs, dataChange=false, no app id)."""
    from deltalake.transaction import AddAction, RemoveAction

    table = DeltaTable(str(path))
    (old,) = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    stats = json.dumps({"numRecords": 3, "minValues": {"k": 1}, "maxValues": {"k": 3}, "nullCount": {"k": 0}})
    table.create_write_transaction(
        [
            RemoveAction(old["path"], False, 1, old["size_bytes"], {}),
            AddAction(f"{name}.parquet", old["size_bytes"], {}, 1, False, stats),
        ],
        mode="append",
        schema=table.schema(),
    )


@pytest.mark.parametrize("racer", ["recluster", "outside-compaction"])
def test_two_rewrites_racing_past_the_check_cannot_both_commit(tmp_path: Path, monkeypatch, racer: str):
    """The log check alone leaves a window: another rewrite commits between our check and our commit. Our commit
    creates exactly the version after the last one checked, only if absent: the other rewrite took it, so ours
    checks that commit, finds its input removed and gives up. Holds for another tool's compaction too."""
    import recluster.delta.commit as commit_module
    from recluster.delta.commit import CommitConflict

    path, data, rewrite = one_file_table(tmp_path)
    real_check = commit_module.rewrite_conflict
    raced: list[str] = []

    def check_then_lose_the_race(*args, **kwargs):  # type: ignore[no-untyped-def]
        problem = real_check(*args, **kwargs)
        if not raced:
            raced.append("b")
            rewrite("b") if racer == "recluster" else outside_compaction(path, "b")  # commits right after our check
        return problem

    monkeypatch.setattr(commit_module, "rewrite_conflict", check_then_lose_the_race)
    with pytest.raises(CommitConflict, match="removed input"):
        rewrite("a")
    assert raced and row_multiset(DeltaTable(str(path)).to_pyarrow_table()) == row_multiset(data)
    assert [p for p in DeltaTable(str(path)).file_uris() if p.endswith("b.parquet")]
