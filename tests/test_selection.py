"""Selection (recluster/core/selection/) against a brute-force oracle written from docs/concepts.md#depth-and-levels/§5.

Blocks are generated as plain integer ranges (`Spec`); the oracle reads those ints, O(n^2), never the
encoded keys. The code under test reads `Block`s built the way `table.blocks_from_actions` builds them
(`encode_key(values, columns, prefix=encode_partition(partition))`). No Spark.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recluster.core.blocks import LEVEL_CONSTANT, MAX_LEVEL, Block, Partition
from recluster.core.deletion_vectors import DeletionVector
from recluster.core.key_encoding import encode_key, encode_partition
from recluster.core.keys import KeyColumn, KeyType, key_fingerprint
from recluster.core.selection import select_merge_tasks
from recluster.core.selection.plan import MergeTask, Policy, Reason, ReclusterPlan, SelectionBounds, level_threshold

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIGHT = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEY = [KeyColumn("k", KeyType.INTEGER)]
CURRENT = key_fingerprint(["k"])
OLDER = key_fingerprint(["j"])
HUGE = 10**12

ONE_PARTITION: list[Partition] = [()]
NAMED_PARTITION: list[Partition] = [(("p", "a"),)]
TWO_PARTITIONS: list[Partition] = [(("p", "a"),), (("p", None),)]
LAYOUTS = [ONE_PARTITION, NAMED_PARTITION, TWO_PARTITIONS]


# --- Block specs: plain ints for the oracle, a Block for the code under test -------------------------------


@dataclass(frozen=True)
class Spec:
    """One data file. `lo`/`hi` are its key range (None: unclustered, no stats); `data` is the range its rows
    really span (what a merge of an unclustered file reveals)."""

    path: str
    lo: int | None
    hi: int | None
    level: int = 0
    rows: int = 1
    size: int = 1
    partition: Partition = ()
    fingerprint: str | None = None
    dv: bool = False
    data: tuple[int, int] | None = None

    @property
    def span(self) -> tuple[int, int]:
        """The range the file's rows really cover (its stats' range unless given)."""
        if self.data is not None:
            return self.data
        assert self.lo is not None and self.hi is not None, "an unclustered spec needs `data`"
        return self.lo, self.hi

    @property
    def clustered(self) -> bool:
        return self.lo is not None

    def block(self) -> Block:
        prefix = encode_partition(self.partition)
        if self.lo is None or self.hi is None:
            min_key = max_key = None
            min_values = max_values = None
        else:
            min_key = encode_key((self.lo,), KEY, prefix=prefix)
            max_key = encode_key((self.hi,), KEY, prefix=prefix)
            min_values, max_values = (self.lo,), (self.hi,)
        return Block(
            path=self.path,
            rows=self.rows,
            bytes=self.size,
            min_key=min_key,
            max_key=max_key,
            min_values=min_values,
            max_values=max_values,
            level=self.level,
            partition=self.partition,
            key_fingerprint=self.fingerprint,
            deletion_vector=DeletionVector("i", "0", 8, 1) if self.dv else None,
        )


@st.composite
def spec_lists(
    draw: st.DrawFn,
    *,
    min_blocks: int = 0,
    max_blocks: int = 18,
    layouts: Sequence[list[Partition]] = LAYOUTS,
    levels: Sequence[int] = (0, 0, 1, 2, LEVEL_CONSTANT),
    unclustered: bool = True,
    deletion_vectors: bool = True,
    older: bool = True,
    lo_max: int = 30,
    width_max: int = 12,
) -> list[Spec]:
    layout = draw(st.sampled_from(list(layouts)))
    fingerprints: list[str | None] = [None, CURRENT, OLDER] if older else [None, CURRENT]
    specs = []
    for i in range(draw(st.integers(min_blocks, max_blocks))):
        level = draw(st.sampled_from(list(levels)))
        lo = draw(st.integers(0, lo_max))
        hi = lo if level == LEVEL_CONSTANT else lo + draw(st.integers(0, width_max))
        # Level -1 files are constant files: they always have stats.
        has_stats = level == LEVEL_CONSTANT or not unclustered or draw(st.integers(0, 5)) > 0
        specs.append(
            Spec(
                path=f"part-{i:03d}-L{level}.parquet",
                lo=lo if has_stats else None,
                hi=hi if has_stats else None,
                level=level,
                rows=draw(st.integers(1, 1000)),
                size=draw(st.integers(1, 100)),
                partition=draw(st.sampled_from(layout)),
                fingerprint=draw(st.sampled_from(fingerprints)),
                dv=deletion_vectors and draw(st.integers(0, 7)) == 0,
                data=(lo, hi),
            )
        )
    return specs


@st.composite
def tight_bounds(draw: st.DrawFn) -> SelectionBounds:
    return SelectionBounds(
        depth_ratio=draw(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0])),
        max_depth_threshold=draw(st.sampled_from([1.0, 2.0, 3.5, 8.0])),
        max_task_bytes=draw(st.integers(0, 300)),
        max_task_files=draw(st.integers(0, 8)),
        max_tasks=draw(st.integers(0, 10)),
        key_fingerprint=CURRENT,
    )


@st.composite
def generous_bounds(draw: st.DrawFn) -> SelectionBounds:
    """Bounds that never cut anything: only depth_ratio and max_depth_threshold vary."""
    return SelectionBounds(
        depth_ratio=draw(st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), st.floats(0.0, 1.5))),
        max_depth_threshold=draw(st.one_of(st.sampled_from([1.0, 2.0, 3.0, 8.0]), st.floats(1.0, 10.0))),
        max_task_bytes=HUGE,
        max_task_files=HUGE,
        max_tasks=HUGE,
        key_fingerprint=CURRENT,
    )


def plan_of(specs: Sequence[Spec], bounds: SelectionBounds, *, final: bool = False) -> ReclusterPlan:
    return select_merge_tasks("t", 7, [s.block() for s in specs], bounds, final=final)


def live(specs: Iterable[Spec], bounds: SelectionBounds, *, final: bool) -> list[Spec]:
    """What selection may touch: no level -1, older keys only in FINAL (files with deletion vectors too: the
    merge applies them)."""
    return [
        s for s in specs if s.level != LEVEL_CONSTANT and (final or s.fingerprint in (None, bounds.key_fingerprint))
    ]


# --- Oracle: depth on plain int ranges, O(n^2) ---------------------------------------------------------------


def point_depths(ranges: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Sorted distinct lo/hi values and depth(p) = #blocks with lo <= p <= hi for each."""
    points = sorted({lo for lo, _ in ranges} | {hi for _, hi in ranges})
    return points, [sum(1 for lo, hi in ranges if lo <= p <= hi) for p in points]


def block_depths(ranges: Sequence[tuple[int, int]]) -> list[int]:
    points, depths = point_depths(ranges)
    return [max(d for p, d in zip(points, depths, strict=True) if lo <= p <= hi) for lo, hi in ranges]


def runs(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive points of equal depth that no gap interrupts (some block contains both a
    point and the next one): (first point, last point, depth), left to right. Disjoint ranges never share a run."""
    points, depths = point_depths(ranges)
    out: list[tuple[int, int, int]] = []
    for p, d in zip(points, depths, strict=True):
        bridged = bool(out) and any(lo <= out[-1][1] and hi >= p for lo, hi in ranges)
        if out and out[-1][2] == d and bridged:
            out[-1] = (out[-1][0], p, d)
        else:
            out.append((p, p, d))
    return out


def rng(spec: Spec) -> tuple[int, int]:
    assert spec.lo is not None and spec.hi is not None
    return spec.lo, spec.hi


def oracle_greedy(pool: Sequence[Spec], threshold: float) -> list[tuple[set[str], int]]:
    """Generous-bounds selection for one pool, from docs/concepts.md: nothing unless avg depth > threshold; else
    runs deepest first (leftmost first among equals), each run's not-yet-used covering blocks form a task."""
    if len(pool) < 2:
        return []
    ranges = [rng(s) for s in pool]
    _, depths = point_depths(ranges)
    bd = block_depths(ranges)
    if max(depths) < 2 or sum(bd) / len(bd) <= threshold:
        return []
    used: set[str] = set()
    tasks = []
    for first, last, depth in sorted(runs(ranges), key=lambda r: (-r[2], r[0])):
        if depth < 2:
            break
        covering = {s.path for s in pool if s.lo <= last and s.hi >= first}  # type: ignore[operator]
        free = covering - used
        if free != covering:
            # Part of the run went to an earlier task: the free files meeting at the run's point where most
            # of them meet (leftmost among equals), so that they overlap each other.
            free_specs = [s for s in pool if s.path in free]
            points = sorted({p for s in free_specs for p in (s.lo, s.hi) if first <= p <= last} | {first})  # type: ignore[operator]
            best = max(points, key=lambda p: (sum(s.lo <= p <= s.hi for s in free_specs), -p))  # type: ignore[operator]
            free = {s.path for s in free_specs if s.lo <= best <= s.hi}  # type: ignore[operator]
        if len(free) >= 2:
            tasks.append((free, depth))
            used |= free
    return tasks


def by_path(specs: Iterable[Spec]) -> dict[str, Spec]:
    return {s.path: s for s in specs}


def paths(task: MergeTask) -> set[str]:
    return {b.path for b in task.files}


# --- 1. Which files may be in a task ------------------------------------------------------------------------


@PROPERTY
@given(specs=spec_lists(), bounds=tight_bounds(), final=st.booleans())
def test_tasks_use_disjoint_eligible_files(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    plan = plan_of(specs, bounds, final=final)
    index = by_path(specs)
    seen: set[str] = set()
    for task in plan.tasks:
        for block in task.files:
            assert block.path in index, "a task file is not one of the input blocks"
            assert block == index[block.path].block()
            assert block.path not in seen, f"{block.path} in two tasks"
            seen.add(block.path)
            assert block.level != LEVEL_CONSTANT
            if not final:
                assert block.key_fingerprint in (None, CURRENT)
    eligible = {s.path for s in live(specs, bounds, final=final)}
    assert seen <= eligible


@PROPERTY
@given(specs=spec_lists(), bounds=tight_bounds(), final=st.booleans())
def test_skipped_reports_older_keys(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    plan = plan_of(specs, bounds, final=final)
    skipped = {s.reason: s.files for s in plan.skipped}
    assert len(skipped) == len(plan.skipped), "a reason reported twice"
    older = [s for s in specs if s.level != LEVEL_CONSTANT and s.fingerprint == OLDER]
    if older and not final:
        assert skipped.get(Reason.OLDER_KEY) == len(older)
    else:
        assert Reason.OLDER_KEY not in skipped
    assert plan.table == "t" and plan.read_version == 7 and plan.final is final


@LIGHT
@given(specs=spec_lists(older=True), final=st.booleans())
def test_final_includes_older_key_files(specs: list[Spec], final: bool) -> None:
    """With generous bounds and threshold 1, FINAL takes older-key files into the same pool; incremental never."""
    bounds = SelectionBounds(0.0, 1.0, HUGE, HUGE, HUGE, CURRENT)
    plan = plan_of(specs, bounds, final=final)
    taken = {p for task in plan.tasks for p in paths(task)}
    older_unclustered = {s.path for s in live(specs, bounds, final=True) if s.fingerprint == OLDER and not s.clustered}
    if final:
        assert older_unclustered <= taken
        assert all(t.reason in (Reason.FINAL, Reason.UNCLUSTERED) for t in plan.tasks)
    else:
        assert not taken & {s.path for s in specs if s.fingerprint == OLDER}
        assert all(t.reason in (Reason.DEPTH_ABOVE_THRESHOLD, Reason.UNCLUSTERED) for t in plan.tasks)


# --- 2. Bounds, partitions, levels ----------------------------------------------------------------------------


@PROPERTY
@given(specs=spec_lists(), bounds=tight_bounds(), final=st.booleans())
def test_tasks_respect_bounds_and_partitions(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    plan = plan_of(specs, bounds, final=final)
    assert len(plan.tasks) <= bounds.max_tasks
    for task in plan.tasks:
        single_unclustered = task.reason == Reason.UNCLUSTERED and len(task.files) == 1
        if not single_unclustered:
            assert task.bytes <= bounds.max_task_bytes, str(task)
            assert len(task.files) <= bounds.max_task_files, str(task)
        assert task.bytes == sum(b.bytes for b in task.files)
        assert task.rows == sum(b.rows for b in task.files)
        if task.reason == Reason.UNCLUSTERED:
            assert all(not b.clustered for b in task.files)
            assert task.depth == 0
        else:
            assert task.reason == (Reason.FINAL if final else Reason.DEPTH_ABOVE_THRESHOLD)
            assert all(b.clustered for b in task.files)
            assert len(task.files) >= 2
            assert task.depth >= 2
            if not final:  # incremental rounds never mix levels
                assert {b.level for b in task.files} == {task.level}
        assert {b.partition for b in task.files} == {task.partition}
        assert task.level == max(b.level for b in task.files)
        assert task.output_level == min(max(b.level for b in task.files) + 1, MAX_LEVEL)


def test_output_level_is_clamped() -> None:
    specs = [Spec(f"f{i}", 0, 10, level=level) for i, level in enumerate([MAX_LEVEL, MAX_LEVEL, 40, 40])]
    plan = plan_of(specs, SelectionBounds(0.0, 1.0, HUGE, HUGE, HUGE, CURRENT))
    assert sorted(t.output_level for t in plan.tasks) == [MAX_LEVEL, MAX_LEVEL]
    final = plan_of(specs, SelectionBounds(0.0, 1.0, HUGE, HUGE, HUGE, CURRENT), final=True)
    assert [(t.level, t.output_level) for t in final.tasks] == [(40, MAX_LEVEL)]


# --- 3. Threshold rule ---------------------------------------------------------------------------------------


@PROPERTY
@given(
    specs=spec_lists(
        min_blocks=2, layouts=[ONE_PARTITION, NAMED_PARTITION], levels=(0, 0, 1, 2, 3), unclustered=False, older=False
    ),
    bounds=generous_bounds(),
)
def test_level_gets_work_iff_avg_depth_above_threshold(specs: list[Spec], bounds: SelectionBounds) -> None:
    plan = plan_of(specs, bounds)
    pool_of = live(specs, bounds, final=False)
    for level in sorted({s.level for s in specs} | {t.level for t in plan.tasks}):
        pool = [s for s in pool_of if s.level == level]
        ranges = [rng(s) for s in pool]
        expected = False
        if len(pool) >= 2:
            bd = block_depths(ranges)
            _, depths = point_depths(ranges)
            expected = sum(bd) / len(bd) > level_threshold(len(pool), bounds) and max(depths) >= 2
        got = any(t.level == level for t in plan.tasks)
        assert got == expected, (level, [str(t) for t in plan.tasks])


@PROPERTY
@given(
    specs=spec_lists(min_blocks=2, layouts=[ONE_PARTITION, NAMED_PARTITION], unclustered=False, older=False),
    bounds=tight_bounds(),
)
def test_deep_level_gets_a_task_or_an_over_size_report(specs: list[Spec], bounds: SelectionBounds) -> None:
    """Tight bounds never hide work silently: a level above threshold gets a task or an over_size_bound skip."""
    bounds = dataclasses.replace(bounds, max_tasks=HUGE)
    plan = plan_of(specs, bounds)
    reported = any(s.reason == Reason.OVER_SIZE_BOUND for s in plan.skipped)
    pool_of = live(specs, bounds, final=False)
    for level in sorted({s.level for s in pool_of}):
        pool = [s for s in pool_of if s.level == level]
        if oracle_greedy(pool, level_threshold(len(pool), bounds)):
            assert reported or any(t.level == level for t in plan.tasks), level


@PROPERTY
@given(specs=spec_lists(), bounds=tight_bounds(), final=st.booleans())
def test_max_tasks_only_cuts_the_plan(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    """max_tasks keeps a prefix of the uncapped plan (lower levels and deeper ranges first), never reorders."""
    capped = plan_of(specs, bounds, final=final)
    uncapped = plan_of(specs, dataclasses.replace(bounds, max_tasks=HUGE), final=final)
    assert capped.tasks == uncapped.tasks[: bounds.max_tasks]


# --- 4. Deepest first -----------------------------------------------------------------------------------------


@PROPERTY
@given(
    specs=spec_lists(min_blocks=2, layouts=[ONE_PARTITION, NAMED_PARTITION], unclustered=False, older=False),
    bounds=generous_bounds(),
)
def test_first_task_of_a_level_is_its_leftmost_deepest_run(specs: list[Spec], bounds: SelectionBounds) -> None:
    plan = plan_of(specs, bounds)
    index = by_path(specs)
    pool_of = live(specs, bounds, final=False)
    for level in sorted({t.level for t in plan.tasks}):
        pool = [s for s in pool_of if s.level == level]
        ranges = [rng(s) for s in pool]
        _, depths = point_depths(ranges)
        deepest = max(depths)
        first, last, _ = next(r for r in runs(ranges) if r[2] == deepest)
        tasks = [t for t in plan.tasks if t.level == level]
        assert tasks[0].depth == deepest
        covering = {s.path for s in pool if s.lo <= last and s.hi >= first}  # type: ignore[operator]
        assert paths(tasks[0]) == covering
        # Every later task of the level is no deeper and is built around a run of its own depth.
        assert [t.depth for t in tasks] == sorted((t.depth for t in tasks), reverse=True)
        level_runs = runs(ranges)
        for task in tasks:
            assert any(
                depth == task.depth and all(index[p].lo <= b and index[p].hi >= a for p in paths(task))  # type: ignore[operator]
                for a, b, depth in level_runs
            ), str(task)


@PROPERTY
@given(specs=spec_lists(min_blocks=2, unclustered=False), bounds=generous_bounds(), final=st.booleans())
def test_generous_bounds_match_the_oracle_greedy(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    """With nothing cut by bounds, the plan is exactly the oracle's: per partition, per level (one pool of all
    levels with threshold 1 in FINAL), the deepest runs' covering blocks, deepest first."""
    plan = plan_of(specs, bounds, final=final)
    pool_of = live(specs, bounds, final=final)
    expected = []
    for partition in sorted({s.partition for s in pool_of}, key=str):
        members = [s for s in pool_of if s.partition == partition]
        if final:
            expected += [(partition, p, d) for p, d in oracle_greedy(members, 1.0)]
            continue
        for level in sorted({s.level for s in members}):
            pool = [s for s in members if s.level == level]
            expected += [(partition, p, d) for p, d in oracle_greedy(pool, level_threshold(len(pool), bounds))]
    got = [(t.partition, paths(t), t.depth) for t in plan.tasks]
    assert got == expected


def _own_depth(task: MergeTask) -> int:
    """Max point depth among the task's own files: < 2 means the files are pairwise disjoint."""
    return max(point_depths([(b.min_values[0], b.max_values[0]) for b in task.files])[1])  # type: ignore[index]


@PROPERTY
@example(
    specs=[
        Spec("part-000-L0.parquet", 0, 0),
        Spec("part-001-L0.parquet", 1, 1),
        Spec("part-002-L0.parquet", 0, 1),
    ],
    bounds=SelectionBounds(0.0, 1.0, max_task_bytes=2, max_task_files=2, max_tasks=1, key_fingerprint=CURRENT),
)
@given(
    specs=spec_lists(layouts=[ONE_PARTITION], unclustered=False, older=False, deletion_vectors=False),
    bounds=tight_bounds(),
)
def test_bounded_task_files_overlap(specs: list[Spec], bounds: SelectionBounds) -> None:
    """A depth task must remove depth: at least two of its files share a key (expected for the example: a
    task of [0,1] with [0,0] or [1,1]; got: files [0,0] and [1,1], disjoint, reported depth=2)."""
    for task in plan_of(specs, bounds).tasks:
        if task.reason != Reason.UNCLUSTERED:
            assert _own_depth(task) >= 2, str(task)


# --- 5. Unclustered files are never dropped ---------------------------------------------------------------------


@PROPERTY
@given(specs=spec_lists(), bounds=tight_bounds(), final=st.booleans())
def test_unclustered_files_always_get_a_task(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    bounds = dataclasses.replace(bounds, max_tasks=HUGE)
    plan = plan_of(specs, bounds, final=final)
    unclustered = {s.path for s in live(specs, bounds, final=final) if not s.clustered}
    tasks = [t for t in plan.tasks if t.reason == Reason.UNCLUSTERED]
    taken = [p for t in tasks for p in paths(t)]
    # every one within the byte bound; one alone over it is reported, never merged over budget
    over = {s.path for s in specs if s.path in unclustered and s.size > bounds.max_task_bytes}
    assert sorted(taken) == sorted(unclustered - over)
    assert all(t.bytes <= bounds.max_task_bytes for t in plan.tasks)
    assert not over or any(s.reason == Reason.OVER_SIZE_BOUND for s in plan.skipped)
    for task in plan.tasks:
        if task.reason != Reason.UNCLUSTERED:
            assert not paths(task) & unclustered


# --- 6. FINAL converges ---------------------------------------------------------------------------------------


def apply_plan(specs: list[Spec], plan: ReclusterPlan, round_no: int) -> list[Spec]:
    """A perfect sorted merge: each task's rows, spanning [min lo, max hi], come out as up to len(files)
    consecutive non-overlapping subranges at the task's output level under the current key."""
    index = by_path(specs)
    removed: set[str] = set()
    added: list[Spec] = []
    for t, task in enumerate(plan.tasks):
        inputs = [index[p] for p in paths(task)]
        removed |= paths(task)
        low = min(s.span[0] for s in inputs)
        high = max(s.span[1] for s in inputs)
        pieces = min(len(inputs), high - low + 1)
        rows, size = sum(s.rows for s in inputs), sum(s.size for s in inputs)
        cuts = [low + (high - low + 1) * i // pieces for i in range(pieces + 1)]
        for i in range(pieces):
            lo, hi = cuts[i], cuts[i + 1] - 1
            added.append(
                Spec(
                    path=f"r{round_no:02d}-t{t:02d}-{i:02d}.parquet",
                    lo=lo,
                    hi=hi,
                    level=task.output_level,
                    rows=max(rows // pieces, 1),
                    size=max(size // pieces, 1),
                    partition=task.partition,
                    fingerprint=CURRENT,
                )
            )
    return [s for s in specs if s.path not in removed] + added


@PROPERTY
@given(specs=spec_lists(max_blocks=16, lo_max=40))
def test_final_rounds_end_fully_clustered(specs: list[Spec]) -> None:
    bounds = SelectionBounds(0.5, 4.0, HUGE, HUGE, HUGE, CURRENT)
    for round_no in range(20):
        plan = plan_of(specs, bounds, final=True)
        if plan.empty:
            break
        specs = apply_plan(specs, plan, round_no)
    else:
        pytest.fail(f"FINAL did not converge in 20 rounds: {plan}")
    remaining = live(specs, bounds, final=True)
    assert all(s.clustered for s in remaining)
    for partition in {s.partition for s in remaining}:
        ranges = [rng(s) for s in remaining if s.partition == partition]
        assert max(point_depths(ranges)[1]) <= 1, (partition, sorted(ranges))


# --- 7. Threshold clamp ---------------------------------------------------------------------------------------


@PROPERTY
@given(
    blocks=st.integers(0, 10_000),
    ratio=st.floats(0.0, 10.0),
    max_threshold=st.floats(1.0, 1_000.0),
)
def test_level_threshold_is_clamped(blocks: int, ratio: float, max_threshold: float) -> None:
    bounds = SelectionBounds(ratio, max_threshold, 1, 1, 1, CURRENT)
    threshold = level_threshold(blocks, bounds)
    assert 1.0 <= threshold <= max_threshold
    raw = blocks * ratio
    if raw < 1.0:
        assert threshold == 1.0
    elif raw > max_threshold:
        assert threshold == max_threshold
    else:
        assert threshold == raw
    assert level_threshold(blocks + 1, bounds) >= threshold


@pytest.mark.parametrize(
    ("blocks", "ratio", "max_threshold", "expected"),
    [(0, 0.5, 8.0, 1.0), (1, 0.5, 8.0, 1.0), (2, 0.5, 8.0, 1.0), (6, 0.5, 8.0, 3.0), (100, 0.5, 8.0, 8.0)],
)
def test_level_threshold_examples(blocks: int, ratio: float, max_threshold: float, expected: float) -> None:
    assert level_threshold(blocks, SelectionBounds(ratio, max_threshold, 1, 1, 1, CURRENT)) == expected


# --- 8. Plans are values -------------------------------------------------------------------------------------


@LIGHT
@given(specs=spec_lists(min_blocks=3), bounds=tight_bounds(), final=st.booleans())
def test_plan_is_frozen_and_printable(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    plan = plan_of(specs, bounds, final=final)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tasks = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.read_version = 8  # type: ignore[misc]
    text = str(plan)
    assert "read_version=7" in text
    assert len(text.splitlines()) == 1 + len(plan.tasks) + len(plan.skipped)
    for task in plan.tasks:
        with pytest.raises(dataclasses.FrozenInstanceError):
            task.files = ()  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            task.depth = 99  # type: ignore[misc]
        assert str(task) in text
        assert f"reason={task.reason.value}" in str(task)
    for skip in plan.skipped:
        assert f"reason={skip.reason.value}" in text


def test_plan_str_names_every_reason() -> None:
    specs = [
        Spec("a", 0, 10),
        Spec("b", 0, 10),
        Spec("c", None, None),
        Spec("d", 0, 10, dv=True),
        Spec("e", 0, 10, fingerprint=OLDER),
    ]
    plan = plan_of(specs, SelectionBounds(0.0, 1.0, HUGE, HUGE, HUGE, CURRENT))
    text = str(plan)
    assert text.splitlines()[0] == "plan table=t read_version=7 policy=levels tasks=2"
    for reason in (Reason.UNCLUSTERED, Reason.DEPTH_ABOVE_THRESHOLD, Reason.OLDER_KEY):
        assert f"reason={reason.value}" in text


# --- Small tables (docs/concepts.md#small-tables) -----------------------------------------------------------


@st.composite
def small_bounds(draw: st.DrawFn) -> SelectionBounds:
    """Generous bounds with the small-table rule at a drawn file count and target file (either policy)."""
    return dataclasses.replace(
        draw(generous_bounds()),
        policy=draw(st.sampled_from(list(Policy))),
        target_rows=draw(st.integers(1, 6_000)),
        target_bytes=draw(st.integers(1, 600)),
        small_table_files=draw(st.integers(0, 8)),
    )


def small_partitions(specs: list[Spec], bounds: SelectionBounds) -> dict[Partition, list[Spec]]:
    """Oracle: the partitions whose live files' rows and bytes fit in one target file (the rule on)."""
    members: dict[Partition, list[Spec]] = defaultdict(list)
    for spec in live(specs, bounds, final=False):
        members[spec.partition].append(spec)
    assert bounds.target_rows is not None and bounds.target_bytes is not None
    return {
        partition: found
        for partition, found in members.items()
        if bounds.small_table_files > 0
        and sum(s.rows for s in found) <= bounds.target_rows
        and sum(s.size for s in found) <= bounds.target_bytes
    }


@given(specs=spec_lists(), bounds=small_bounds(), final=st.booleans())
@PROPERTY
def test_small_partitions_wait_then_compact_whole(specs: list[Spec], bounds: SelectionBounds, final: bool) -> None:
    plan = plan_of(specs, bounds, final=final)
    without_rule = plan_of(specs, dataclasses.replace(bounds, small_table_files=0), final=final)
    small = {} if final else small_partitions(specs, bounds)
    for partition in {s.partition for s in specs}:
        tasks = [t for t in plan.tasks if t.partition == partition]
        if partition not in small:  # big, or FINAL: planned exactly as without the rule
            expected = [t for t in without_rule.tasks if t.partition == partition]
            assert [(paths(t), t.reason) for t in tasks] == [(paths(t), t.reason) for t in expected]
        elif len(small[partition]) >= max(bounds.small_table_files, 2):
            assert [(paths(t), t.reason) for t in tasks] == [
                ({s.path for s in small[partition]}, Reason.SMALL_TABLE_COMPACTION)
            ]
        else:
            assert tasks == []
    waiting = sum(len(found) for found in small.values() if len(found) < max(bounds.small_table_files, 2))
    assert [s.files for s in plan.skipped if s.reason is Reason.SMALL_TABLE] == ([waiting] if waiting else [])
