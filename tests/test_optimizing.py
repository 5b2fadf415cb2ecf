"""Self-optimizing logic (recluster/core/optimizing.py, scheduling.py), pure: properties, triggers, plans, history,
scheduling."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recluster.core.blocks import LEVEL_APPENDED, Block
from recluster.core.deletion_vectors import DeletionVector
from recluster.core.key_encoding import encode_key
from recluster.core.keys import KeyColumn, KeyType
from recluster.core.optimizing import (
    OptimizingConfig,
    PendingWork,
    optimizing_config,
    pending_optimizing,
    plan_optimizing,
    quiet_until,
    table_health,
)
from recluster.core.scheduling import (
    Candidate,
    ProcessRecord,
    ProcessStatus,
    ProcessType,
    TableHistory,
    schedule,
    table_history,
)
from recluster.core.selection.plan import Reason, SelectionBounds
from recluster.delta.history import records_from_arrow, records_to_arrow
from recluster.settings import SettingsError
from recluster.settings_optimizing import OptimizerGroup, SelfOptimizingSettings

KEY = (KeyColumn("k", KeyType.INTEGER),)
MB = 1 << 20
DEFAULTS = SelfOptimizingSettings()
CONFIG = optimizing_config({}, DEFAULTS)
BOUNDS = SelectionBounds(0.1, 16.0, 4 << 30, 512, 16, "00000000")


def vector(deleted: int) -> DeletionVector:
    return DeletionVector("i", "0", 8, deleted)


def block(name: str, size: int, lo: int = 0, hi: int = 10, level: int = LEVEL_APPENDED, **extra: object) -> Block:
    return Block(
        name,
        rows=max(size // 100, 1),
        bytes=size,
        min_key=encode_key((lo,), KEY),
        max_key=encode_key((hi,), KEY),
        level=level,
        **extra,  # type: ignore[arg-type]
    )


def test_config_defaults_follow_amoro():
    assert (CONFIG.enabled, CONFIG.group, CONFIG.target_size, CONFIG.fragment_ratio) == (True, "default", 128 * MB, 8)
    assert CONFIG.fragment_bytes == 16 * MB
    assert (CONFIG.minor_trigger_file_count, CONFIG.minor_trigger_interval_ms, CONFIG.full_trigger_interval_ms) == (
        12,
        3_600_000,
        -1,
    )


def test_table_properties_override_defaults():
    groups = {"default": OptimizerGroup(), "batch": OptimizerGroup(policy="balanced")}
    defaults = SelfOptimizingSettings(groups=groups)
    config = optimizing_config(
        {
            "self-optimizing.enabled": "FALSE",
            "self-optimizing.group": "batch",
            "self-optimizing.quota": "0.25",
            "self-optimizing.target-size": "1048576",
            "self-optimizing.minor.trigger.file-count": "4",
            "recluster.enabled": "false",
            "delta.appendOnly": "true",
        },
        defaults,
    )
    assert (config.enabled, config.recluster_enabled, config.group, config.quota) == (False, False, "batch", 0.25)
    assert (config.target_size, config.minor_trigger_file_count) == (1 << 20, 4)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("self-optimizing.enabled", "yes", "expected true or false"),
        ("self-optimizing.quota", "-1", "greater than 0"),
        ("self-optimizing.quota", "lots", "expected float"),
        ("self-optimizing.target-size", "1.5e6", "expected int"),
        ("self-optimizing.fragment-ratio", "1", "greater than 1"),
        ("self-optimizing.minor.trigger.file-count", "1", "at least 2"),
        ("self-optimizing.group", "nope", "names no optimizer group"),
    ],
)
def test_malformed_properties_are_one_line_errors_naming_the_property(name, value, message):
    with pytest.raises(SettingsError) as error:
        optimizing_config({name: value}, DEFAULTS)
    assert message in str(error.value) and (name in str(error.value))
    assert "\n" not in str(error.value)


def test_unknown_default_group_is_refused():
    with pytest.raises(ValueError, match="not one of the groups"):
        SelfOptimizingSettings(group="missing")


def test_health_counts_fragments_of_appended_files_only():
    blocks = [block(f"f{i}", MB) for i in range(3)]
    blocks += [block("seg", 50 * MB), block("big", 200 * MB), block("out", MB, level=2)]
    health = table_health(blocks, CONFIG)
    assert (health.files, health.fragments, health.undersized) == (6, 3, 1)
    assert health.small_file_pressure == pytest.approx(2 / 6)
    assert table_health([block("one", MB)], CONFIG).small_file_pressure == 0.0


def test_triggers_minor_by_count_and_interval_major_and_full():
    now = 10_000_000.0
    eleven = [block(f"f{i}", MB) for i in range(11)]
    fresh = TableHistory(last={ProcessType.MINOR: now - 60})
    assert pending_optimizing(table_health(eleven, CONFIG), CONFIG, fresh, now=now).type is None
    twelve = table_health([*eleven, block("f11", MB)], CONFIG)
    assert pending_optimizing(twelve, CONFIG, fresh, now=now).reason == "fragment_count"
    stale = TableHistory(last={ProcessType.MINOR: now - 3601})
    assert pending_optimizing(table_health(eleven[:2], CONFIG), CONFIG, stale, now=now).reason == "minor_interval"
    undersized = table_health([block(f"u{i}", 50 * MB) for i in range(4)], CONFIG)
    assert pending_optimizing(undersized, CONFIG, fresh, now=now).type is ProcessType.MAJOR
    full = optimizing_config({"self-optimizing.full.trigger.interval": "1000"}, DEFAULTS)
    assert pending_optimizing(undersized, full, fresh, now=now).type is ProcessType.FULL
    disabled = optimizing_config({"self-optimizing.enabled": "false"}, DEFAULTS)
    assert pending_optimizing(twelve, disabled, stale, now=now).type is None


def test_minor_interval_of_a_table_never_minor_optimized_counts_from_its_oldest_fragment():
    """Two fragments of a new table: no minor until an interval after the older one was written (it was due at
    once, the interval counted from 1970); with a minor in the history, from that minor as before."""
    now = 10_000_000.0
    written = [block(f"f{i}", MB, modified_ms=int((now - 600 + i) * 1000)) for i in range(2)]
    health = table_health(written, CONFIG)
    never = TableHistory(last={})
    interval = CONFIG.minor_trigger_interval_ms / 1000
    assert pending_optimizing(health, CONFIG, never, now=now).type is None
    assert quiet_until(health, CONFIG, never) == now - 600 + interval
    assert pending_optimizing(health, CONFIG, never, now=now - 600 + interval).reason == "minor_interval"
    stale = TableHistory(last={ProcessType.MINOR: now - interval - 1})
    assert pending_optimizing(health, CONFIG, stale, now=now).reason == "minor_interval"


sizes = st.lists(st.integers(1, 300 * MB), min_size=0, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=sizes,
    levels=st.lists(st.sampled_from([0, 0, 0, 1, 2, -1]), min_size=40, max_size=40),
    dvs=st.lists(st.booleans(), min_size=40, max_size=40),
    kind=st.sampled_from([ProcessType.MINOR, ProcessType.MAJOR, ProcessType.FULL]),
    max_bytes=st.integers(64 * MB, 1 << 30),
    max_files=st.integers(2, 12),
)
def test_plans_are_bounded_disjoint_and_shrink_the_file_count(sizes, levels, dvs, kind, max_bytes, max_files):
    blocks = [
        block(
            f"b{i}",
            size,
            lo=i,
            hi=i + 5,
            level=levels[i],
            deletion_vector=vector(1000) if dvs[i] and i % 3 == 0 else None,
        )
        for i, size in enumerate(sizes)
    ]
    bounds = SelectionBounds(0.1, 16.0, max_bytes, max_files, 100, "00000000")
    plan = plan_optimizing("t", 3, blocks, CONFIG, kind, bounds)
    chosen = [b.path for task in plan.tasks for b in task.files]
    assert len(chosen) == len(set(chosen))  # no file in two tasks
    for task in plan.tasks:
        purges = any(f.deleted_rows for f in task.files)
        assert (len(task.files) >= 2 or purges) and (len(task.files) <= max_files)
        assert task.bytes <= max_bytes or len(task.files) == 1
        assert math.ceil(task.bytes / CONFIG.target_size) < len(task.files) or purges  # fewer files or deletes purged
        assert task.output_level == max(0, *(b.level for b in task.files))
        for f in task.files:
            assert f.level != -1 or f.deleted_rows
            if kind is ProcessType.MINOR:
                assert f.level == LEVEL_APPENDED and f.bytes < CONFIG.fragment_bytes
            if kind is ProcessType.MAJOR:
                heavy = f.deleted_rows > f.rows * CONFIG.major_trigger_duplicate_ratio
                undersized = f.level == LEVEL_APPENDED and CONFIG.fragment_bytes <= f.bytes < CONFIG.undersized_bytes
                assert heavy or undersized
        assert task.reason == {"minor": Reason.MINOR, "major": Reason.MAJOR, "full": Reason.FULL}[str(kind)]
    # brute-force oracle for minor: with room for every fragment, one task takes them all
    fragments = [b for b in blocks if b.level == 0 and b.bytes < CONFIG.fragment_bytes]
    if kind is ProcessType.MINOR and len(fragments) >= 2 and len(fragments) <= max_files:
        assert sorted(chosen) == sorted(b.path for b in fragments)
    assert not plan.skipped


def test_history_rows_round_trip_through_arrow():
    records = [
        ProcessRecord("p1", "t", ProcessType.MINOR, "default", 100.5),
        ProcessRecord("p1", "t", ProcessType.MINOR, "default", 100.5).finished(
            130.25, ProcessStatus.SUCCESS, files_in=3, bytes_out=10, rows=7
        ),
        ProcessRecord("p2", "u", ProcessType.MAINTENANCE, "g", 1.0, 2.0, ProcessStatus.FAILED, error="boom"),
    ]
    assert records_from_arrow(records_to_arrow(records)) == records


def test_table_history_busy_time_last_times_and_running():
    now = 10_000.0
    rows = [
        ProcessRecord("a", "t", ProcessType.MINOR, "g", now - 4000, now - 3650, ProcessStatus.SUCCESS),  # outside
        ProcessRecord("b", "t", ProcessType.MINOR, "g", now - 3700, now - 3500, ProcessStatus.SUCCESS),  # 100 s in
        ProcessRecord("c", "t", ProcessType.RECLUSTER, "g", now - 100, now - 40, ProcessStatus.SUCCESS),
        ProcessRecord("d", "t", ProcessType.MAJOR, "g", now - 30, now - 20, ProcessStatus.FAILED),
        ProcessRecord("e", "t", ProcessType.MAINTENANCE, "g", now - 30, now - 10, ProcessStatus.SUCCESS),
        ProcessRecord("f", "t", ProcessType.FULL, "g", now - 5),  # running, 5 s so far
        ProcessRecord("z", "other", ProcessType.MINOR, "g", now - 50, now, ProcessStatus.SUCCESS),
        ProcessRecord("x", "t", ProcessType.MINOR, "g", now - 9000),  # crashed long ago: not running
    ]
    history = table_history(rows, "t", now=now, window_seconds=3600, stale_seconds=3600)
    assert history.busy_seconds == pytest.approx(100 + 60 + 10 + 5)
    assert history.last == {
        ProcessType.MINOR: now - 3500,
        ProcessType.RECLUSTER: now - 40,
        ProcessType.MAINTENANCE: now - 10,
    }
    assert history.running is ProcessType.FULL
    assert history.last_optimized == now - 40
    # an end row supersedes its start row whatever the order they come in
    start = ProcessRecord("p", "t", ProcessType.MINOR, "g", now - 10)
    done = start.finished(now - 5, ProcessStatus.SUCCESS)
    assert table_history([done, start], "t", now=now, window_seconds=60, stale_seconds=60).running is None


def simulate(
    candidates: dict[str, tuple[str, float]],
    groups: dict[str, OptimizerGroup],
    *,
    seconds: float,
    task_seconds: float,
    window: float,
) -> dict[str, float]:
    """Every table always has work; each group runs its scheduled tables one task at a time (one worker
    per group). Returns each table's busy seconds in the last window."""
    now = 0.0
    records: list[ProcessRecord] = []
    free_at = dict.fromkeys(groups, 0.0)
    step = task_seconds / 4
    while now < seconds:
        for group_name in groups:
            if free_at[group_name] > now:
                continue
            pool = []
            for table, (group, quota) in candidates.items():
                if group != group_name:
                    continue
                history = table_history(records, table, now=now, window_seconds=window, stale_seconds=1e9)
                pool.append(
                    Candidate(table, group, quota, ProcessType.MINOR, history.busy_seconds, history.last_optimized)
                )
            run, _ = schedule(pool, groups, window_seconds=window)
            if run:
                table = run[0].table
                records.append(
                    ProcessRecord(
                        f"{len(records)}",
                        table,
                        ProcessType.MINOR,
                        group_name,
                        now,
                        now + task_seconds,
                        ProcessStatus.SUCCESS,
                    )
                )
                free_at[group_name] = now + task_seconds
        now += step
    return {
        t: table_history(records, t, now=now, window_seconds=window, stale_seconds=1e9).busy_seconds for t in candidates
    }


def test_quota_scheduling_gives_each_table_its_quota():
    """Two groups, three tables, each always wanting work: over the last hour every table is busy for its
    quota's share (quota x window), within 5 % of the window's quota share."""
    groups = {"etl": OptimizerGroup(policy="quota"), "bi": OptimizerGroup(policy="quota")}
    candidates = {"t1": ("etl", 0.1), "t2": ("etl", 0.3), "t3": ("bi", 0.2)}
    busy = simulate(candidates, groups, seconds=3 * 3600, task_seconds=30, window=3600)
    for table, (_, quota) in candidates.items():
        occupation = busy[table] / (3600 * quota)
        assert occupation == pytest.approx(1.0, abs=0.05), (table, occupation)


def test_a_group_under_contention_shares_by_occupation_not_arrival():
    """Quotas larger than the group's one worker can give: the policy equalizes occupation (busy / quota),
    so busy time splits in the ratio of the quotas."""
    groups = {"etl": OptimizerGroup(policy="quota")}
    busy = simulate({"a": ("etl", 0.9), "b": ("etl", 0.3)}, groups, seconds=3 * 3600, task_seconds=30, window=3600)
    assert busy["a"] / busy["b"] == pytest.approx(3.0, rel=0.1)


def test_balanced_picks_the_table_optimized_longest_ago_and_quota_bounds_hold():
    groups = {"g": OptimizerGroup(policy="balanced", max_concurrent_tasks=2)}
    c = [
        Candidate("recent", "g", 0.5, ProcessType.MINOR, 10.0, 900.0),
        Candidate("old", "g", 0.5, ProcessType.MINOR, 10.0, 100.0),
        Candidate("never", "g", 0.5, ProcessType.MINOR, 0.0, None),
        Candidate("over", "g", 0.1, ProcessType.MINOR, 360.0, 1.0),
    ]
    run, waiting = schedule(c, groups, window_seconds=3600)
    assert [x.table for x in run] == ["never", "old"]
    assert [x.table for x in waiting] == ["over"]


def test_groups_are_interleaved():
    groups = {"a": OptimizerGroup(max_concurrent_tasks=2), "b": OptimizerGroup(max_concurrent_tasks=2)}
    c = [Candidate(f"{g}{i}", g, 1.0, ProcessType.MINOR, float(i), None) for g in "ab" for i in range(3)]
    run, _ = schedule(c, groups, window_seconds=3600)
    assert [x.table for x in run] == ["a0", "b0", "a1", "b1"]


def test_fair_scheduler_pools_file_names_every_group(tmp_path):
    from recluster.spark.session import fair_scheduler_pools

    path = fair_scheduler_pools({"etl": OptimizerGroup(cores=3), "a&b": OptimizerGroup()})
    text = Path(path).read_text(encoding="utf-8")
    assert '<pool name="etl">' in text and "<minShare>3</minShare>" in text and 'name="a&amp;b"' in text


def test_config_is_immutable():
    with pytest.raises(AttributeError):
        CONFIG.quota = 2  # type: ignore[misc]
    assert isinstance(CONFIG, OptimizingConfig)


def test_history_pruning_keeps_what_summaries_need():
    from recluster.delta.history import prune

    now = 100_000.0
    old = ProcessRecord("old", "t", ProcessType.MINOR, "g", 10.0)
    old_done = old.finished(20.0, ProcessStatus.SUCCESS)
    older = ProcessRecord("older", "t", ProcessType.MINOR, "g", 1.0, 5.0, ProcessStatus.SUCCESS)
    recent = ProcessRecord("recent", "t", ProcessType.RECLUSTER, "g", now - 10, now - 5, ProcessStatus.SUCCESS)
    failed = ProcessRecord("failed", "t", ProcessType.MAJOR, "g", 30.0, 40.0, ProcessStatus.FAILED)
    running = ProcessRecord("running", "t", ProcessType.FULL, "g", now - 100)
    crashed = ProcessRecord("crashed", "t", ProcessType.FULL, "g", 50.0)
    rows = [old, old_done, older, recent, failed, running, crashed]
    kept = prune(rows, keep_after=now - 3600, stale_seconds=3600)
    assert kept == [old_done, recent, running]
    for table in ("t",):
        full = table_history(rows, table, now=now, window_seconds=3600, stale_seconds=3600)
        assert table_history(kept, table, now=now, window_seconds=3600, stale_seconds=3600) == full


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(ProcessType)), st.booleans()), max_size=30
    )
)
def test_a_tables_history_rows_are_the_stores_rows_of_that_table(tmp_path: Path, steps) -> None:
    """`records_of` (the per-table index a job reads once per table per pass) against the filtered rows, as rows
    are appended and pruned."""
    from recluster.delta.history import HistoryStore

    store = HistoryStore(str(tmp_path / "history"), window_seconds=50.0, deferred=True)
    for index, (table, kind, ended) in enumerate(steps):
        record = ProcessRecord(f"p{index}", table, kind, "g", float(index * 10))
        store.append(record.finished(index * 10.0 + 5, ProcessStatus.SUCCESS) if ended else record)
        for name in ("a", "b", "c", "none"):
            assert store.records_of(name) == [r for r in store.records() if r.table == name]


def test_deleted_row_pressure_counts_rows_hidden_by_deletion_vectors():
    blocks = [
        block("clean", 20 * MB),
        block("light", 20 * MB, deletion_vector=vector(10)),  # rows = 209715: 0.005 %
        block("heavy", 20 * MB, deletion_vector=vector(100_000)),  # 48 %
    ]
    health = table_health(blocks, CONFIG)
    assert health.deletion_vector_files == 2
    assert health.to_dict()["heavy_deletion_files"] == 1
    assert health.deleted_row_pressure == pytest.approx(100_010 / (3 * 209_715))
    assert pending_optimizing(health, CONFIG, TableHistory(), now=0.0) == PendingWork(ProcessType.MAJOR, "deleted_rows")
    segments = [block("big", 200 * MB), block("heavy", 200 * MB, deletion_vector=vector(500_000))]
    major = plan_optimizing("t", 1, segments, CONFIG, ProcessType.MAJOR, BOUNDS)
    assert [[f.path for f in task.files] for task in major.tasks] == [["heavy"]]  # purged alone: it is big enough
    full = plan_optimizing("t", 1, blocks, CONFIG, ProcessType.FULL, BOUNDS)
    assert {f.path for task in full.tasks for f in task.files} == {"clean", "light", "heavy"}
