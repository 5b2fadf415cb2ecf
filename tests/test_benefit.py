"""Benefit accounting (issue 45 item 2, docs/benefit.md): the pure figures against a brute-force oracle, the modelled
share, the daily series and the pause on tables no query reads (no Spark)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from recluster.core.advice.scans import Scan
from recluster.core.benefit import (
    DAY_MS,
    PauseReason,
    TableSize,
    daily_benefit,
    logged_benefit,
    modelled_benefit,
    modelled_query,
    modelled_read_share,
    pause_reason,
)
from tests.helpers import FAST

SIZES = st.lists(
    st.builds(TableSize, st.integers(0, 5 * DAY_MS), st.integers(0, 1000), st.integers(0, 10**9)),
    max_size=8,
)
SCANS = st.lists(
    st.builds(
        Scan,
        location=st.just("file:/t"),
        name=st.none(),
        predicates=st.just(()),
        time_ms=st.integers(0, 5 * DAY_MS),
        files_read=st.none() | st.integers(0, 1200),
        bytes_read=st.none() | st.integers(0, 2 * 10**9),
    ),
    max_size=20,
)


def _oracle_size(sizes: list[TableSize], time_ms: int) -> TableSize | None:
    """The latest size at or before the time, else the earliest (a linear scan)."""
    before = [s for s in sizes if s.time_ms <= time_ms]
    if before:
        return max(before)
    return min(sizes) if sizes else None


@FAST
@given(SCANS, SIZES, st.integers(0, 10**10))
def test_logged_benefit_equals_a_brute_force_oracle(scans: list[Scan], sizes: list[TableSize], rewritten: int) -> None:
    benefit = logged_benefit(scans, sizes, rewritten)
    files_skipped = bytes_skipped = measured = 0
    for scan in scans:
        size = _oracle_size(sizes, scan.time_ms)
        if size is None or scan.files_read is None or scan.bytes_read is None:
            continue
        measured += 1
        files_skipped += max(size.files - scan.files_read, 0)
        bytes_skipped += max(size.bytes - scan.bytes_read, 0)
    assert (benefit.queries, benefit.measured) == (len(scans), measured)
    assert (benefit.files_skipped, benefit.bytes_skipped) == (files_skipped, bytes_skipped)
    assert benefit.skipped_per_gb_rewritten == (bytes_skipped / rewritten if rewritten else None)


@FAST
@given(SCANS, SIZES, st.lists(st.tuples(st.integers(0, 5 * DAY_MS), st.integers(0, 10**9)), max_size=6))
def test_the_daily_series_adds_up_to_the_whole(
    scans: list[Scan], sizes: list[TableSize], rewrites: list[tuple[int, int]]
) -> None:
    days = daily_benefit(scans, sizes, rewrites)
    whole = logged_benefit(scans, sizes, sum(size for _, size in rewrites))
    assert sum(d.queries for d in days.values()) == whole.queries
    assert sum(d.files_skipped for d in days.values()) == whole.files_skipped
    assert sum(d.bytes_skipped for d in days.values()) == whole.bytes_skipped
    assert sum(d.bytes_rewritten for d in days.values()) == whole.bytes_rewritten
    assert set(days) == {s.time_ms // DAY_MS for s in scans} | {t // DAY_MS for t, _ in rewrites}


def test_the_modelled_share_skips_the_rest_of_the_table() -> None:
    benefit = modelled_benefit(10, TableSize(0, 200, 2 * 10**9), 0.25, 10**9)
    assert (benefit.files_total, benefit.files_skipped) == (2000, 1500)
    assert benefit.bytes_skipped == 15 * 10**9
    assert benefit.skipped_per_gb_rewritten == 15.0
    assert "queries=10" in str(benefit)


@FAST
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=12),
    st.integers(1, 4),
    st.integers(0, 10**12),
)
def test_the_jobs_modelled_figure_is_one_point_query_against_a_brute_force_count(
    ranges: list[tuple[int, int]], columns: int, rewritten: int
) -> None:
    """The job's modelled figure (docs/benefit.md#the-modelled-figure): one point query on one of the key's columns,
    each alike, against the files' min/max. The oracle counts, for each file's range midpoint (the points
    core/pruning.py takes for numbers), the files whose range holds it; the key's columns here have the same ranges,
    so their average is that count's share."""
    from recluster.core.blocks import Block
    from recluster.core.keys import ClusterKey, KeyColumn, KeyType
    from recluster.core.pruning import column_scan_fractions

    key = ClusterKey(tuple(KeyColumn(f"c{i}", KeyType.INTEGER) for i in range(columns)))
    spans = [(min(a, b), max(a, b)) for a, b in ranges]
    blocks = [
        Block(f"f{i}", 100, 1000 + i, b"\x01", b"\x01", (low,) * columns, (high,) * columns)
        for i, (low, high) in enumerate(spans)
    ]
    points = [(low + high) / 2 for low, high in spans]
    oracle = sum(low <= p <= high for p in points for low, high in spans) / len(points) / len(spans)
    share = modelled_read_share(column_scan_fractions(blocks, key))
    assert share is not None and abs(share - oracle) < 1e-9
    size = TableSize(0, len(blocks), sum(b.bytes for b in blocks))
    figure = modelled_query(size, share, rewritten)
    assert (figure.queries, figure.measured, figure.files_total) == (0, 0, len(blocks))
    assert figure.files_read == round(len(blocks) * oracle) and figure.files_skipped == len(blocks) - figure.files_read
    assert figure.bytes_rewritten == rewritten and 0 <= figure.bytes_skipped <= size.bytes
    assert modelled_read_share({}) is None  # a table without a key has nothing to model


@FAST
@given(
    st.none() | st.integers(0, 30 * DAY_MS),
    st.integers(0, 30 * DAY_MS),
    st.integers(0, 60 * DAY_MS),
    st.none() | st.floats(0.1, 20),
)
def test_a_table_pauses_after_days_without_queries_and_resumes_when_one_returns(
    last_query_ms: int | None, watched_since_ms: int, now_ms: int, days: float | None
) -> None:
    reason = pause_reason(last_query_ms, watched_since_ms, now_ms, days)
    if days is None:
        assert reason is None
        return
    quiet_since = max(watched_since_ms, last_query_ms or 0)
    assert (reason is PauseReason.NO_QUERIES) == (now_ms - quiet_since > days * DAY_MS)
    assert pause_reason(now_ms, watched_since_ms, now_ms, days) is None
