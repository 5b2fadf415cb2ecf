"""Clustering metrics (recluster/core/metrics.py) against a brute-force oracle written from docs/concepts.md.

The oracle works on plain Python values (ints, or (int | None, str | None) tuples with NULL first and
strings by UTF-8 bytes), never on encoded bytes, and is O(n^2): for every block it counts directly.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from recluster.core.blocks import LEVEL_CONSTANT, Block
from recluster.core.depth import depth_profile
from recluster.core.key_encoding import encode_key
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.metrics import (
    BlockSet,
    ClusteringInfo,
    ClusteringState,
    bucket_label,
    clustering_info,
    clustering_metrics,
    histogram_bucket,
    nearest_rank,
)
from recluster.core.pruning import column_scan_fractions
from recluster.core.ranks import rank_keys
from tests.helpers import EMPTY_METRICS, FAST, LIGHT, METRIC_KEYS

INT_KEY = [KeyColumn("k", KeyType.INTEGER)]
INT_STRING_KEY = [KeyColumn("a", KeyType.INTEGER), KeyColumn("s", KeyType.STRING)]

FLOAT_KEYS = {"average_overlaps", "average_depth"}


# --- Block specs: plain values the oracle reads, and the Block the code under test reads ------------------


def _component_key(value: Any) -> tuple[Any, ...]:
    """NULL first; strings by UTF-8 bytes."""
    if value is None:
        return (0,)
    return (1, value.encode("utf-8") if isinstance(value, str) else value)


def _tuple_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_component_key(v) for v in values)


@dataclass(frozen=True)
class Spec:
    """One block as plain values: `lo`/`hi` are the min/max key (an int or a tuple), None if unclustered."""

    path: str
    lo: Any
    hi: Any
    level: int = 0
    rows: int = 1
    size: int = 1

    @property
    def clustered(self) -> bool:
        return self.lo is not None

    def order_key(self, value: Any) -> Any:
        return _tuple_key(value) if isinstance(value, tuple) else value

    @property
    def lo_key(self) -> Any:
        return self.order_key(self.lo)

    @property
    def hi_key(self) -> Any:
        return self.order_key(self.hi)

    @cached_property
    def _block(self) -> Block:
        if not self.clustered:
            return Block(self.path, self.rows, self.size, None, None, level=self.level)
        if isinstance(self.lo, tuple):
            lo, hi = encode_key(self.lo, INT_STRING_KEY), encode_key(self.hi, INT_STRING_KEY)
        else:
            lo, hi = encode_key((self.lo,), INT_KEY), encode_key((self.hi,), INT_KEY)
        return Block(self.path, self.rows, self.size, lo, hi, level=self.level)

    def block(self) -> Block:
        return self._block


# --- Oracle -----------------------------------------------------------------------------------------------


def _bucket(depth: int) -> int:
    buckets = list(range(1, 17))
    while buckets[-1] < depth:
        buckets.append(32 if buckets[-1] == 16 else buckets[-1] * 2)
    return next(b for b in buckets if b >= depth)


def _percentile(sorted_depths: list[int], percent: int) -> int:
    rank = -(-percent * len(sorted_depths) // 100)  # ceil, in integers
    return sorted_depths[max(rank, 1) - 1]


def oracle_depths(ranges: Sequence[tuple[Any, Any]]) -> tuple[list[Any], list[int], list[int], list[int]]:
    """(sorted points, depth of each point, depth of each block, overlaps of each block)."""
    points = sorted({lo for lo, _ in ranges} | {hi for _, hi in ranges})
    point_depth = [sum(1 for lo, hi in ranges if lo <= p <= hi) for p in points]
    block_depth = [max(d for p, d in zip(points, point_depth, strict=True) if lo <= p <= hi) for lo, hi in ranges]
    overlaps = [
        sum(1 for j, (lo2, hi2) in enumerate(ranges) if j != i and lo2 <= hi and lo <= hi2)
        for i, (lo, hi) in enumerate(ranges)
    ]
    return points, point_depth, block_depth, overlaps


def oracle_metrics(specs: Sequence[Spec]) -> dict[str, Any]:
    clustered = [s for s in specs if s.clustered]
    result: dict[str, Any] = {
        "total_block_count": len(specs),
        "constant_block_count": sum(1 for s in clustered if s.lo_key == s.hi_key),
        "unclustered_block_count": len(specs) - len(clustered),
        "total_rows": sum(s.rows for s in specs),
        "total_bytes": sum(s.size for s in specs),
    }
    if not clustered:
        return {
            **result,
            "average_overlaps": 0.0,
            "average_depth": 1.0,
            "p95_depth": 1,
            "p99_depth": 1,
            "block_depth_histogram": {},
        }
    _, _, depths, overlaps = oracle_depths([(s.lo_key, s.hi_key) for s in clustered])
    histogram: dict[str, int] = {}
    for depth in depths:
        label = f"{_bucket(depth):05d}"
        histogram[label] = histogram.get(label, 0) + 1
    ordered = sorted(depths)
    return {
        **result,
        "average_overlaps": sum(overlaps) / len(overlaps),
        "average_depth": sum(depths) / len(depths),
        "p95_depth": _percentile(ordered, 95),
        "p99_depth": _percentile(ordered, 99),
        "block_depth_histogram": histogram,
    }


def oracle_info(specs: Sequence[Spec]) -> dict[str, Any]:
    levels = sorted({s.level for s in specs})
    return {
        **oracle_metrics(specs),
        "levels": {str(level): oracle_metrics([s for s in specs if s.level == level]) for level in levels},
    }


def assert_metrics_equal(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(got) == METRIC_KEYS
    assert set(expected) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        if key in FLOAT_KEYS:
            assert isinstance(got[key], float), key
            assert math.isclose(got[key], expected[key], rel_tol=1e-12), (key, got[key], expected[key])
        else:
            assert got[key] == expected[key], (key, got[key], expected[key])
            assert type(got[key]) is type(expected[key]), key


def assert_info_equal(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert_metrics_equal(
        {k: v for k, v in got.items() if k not in ("levels", "column_scan")},
        {k: v for k, v in expected.items() if k != "levels"},
    )
    assert list(got["levels"]) == list(expected["levels"])
    for level, metrics in expected["levels"].items():
        assert_metrics_equal(got["levels"][level], metrics)
    json.dumps(got)  # plain JSON types only, no numpy scalars


# --- Strategies -------------------------------------------------------------------------------------------

LEVELS = [LEVEL_CONSTANT, 0, 1, 2, 7]
_small = st.integers(-12, 12)
_wide = st.sampled_from([-(1 << 63), -(1 << 40), -1, 0, 1, 1 << 40, (1 << 63) - 1])


@st.composite
def int_ranges(draw: st.DrawFn) -> tuple[int | None, int | None]:
    kind = draw(st.sampled_from(["range", "range", "range", "constant", "wide", "unclustered"]))
    if kind == "unclustered":
        return None, None
    if kind == "constant":
        value = draw(_small)
        return value, value
    a, b = draw(st.tuples(_wide if kind == "wide" else _small, st.one_of(_small, _wide)))
    return min(a, b), max(a, b)


_nullable_int = st.one_of(st.none(), st.integers(-3, 3))
_nullable_str = st.one_of(st.none(), st.sampled_from(["", "a", "a\x00", "a\x00b", "ab", "b", "é"]))


def _null_first_min_max(a: Any, b: Any) -> tuple[Any, Any]:
    return (a, b) if _component_key(a) <= _component_key(b) else (b, a)


@st.composite
def tuple_ranges(draw: st.DrawFn) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """Per-column min and max tuples, as Delta stats give them (a column with NULLs has a NULL min)."""
    kind = draw(st.sampled_from(["range", "range", "range", "constant", "unclustered"]))
    if kind == "unclustered":
        return None, None
    a1, a2 = _null_first_min_max(draw(_nullable_int), draw(_nullable_int))
    s1, s2 = _null_first_min_max(draw(_nullable_str), draw(_nullable_str))
    if kind == "constant":
        return (a1, s1), (a1, s1)
    return (a1, s1), (a2, s2)


@st.composite
def spec_lists(draw: st.DrawFn, ranges: st.SearchStrategy[tuple[Any, Any]], max_size: int = 30) -> list[Spec]:
    drawn = draw(st.lists(ranges, max_size=max_size))
    if drawn and draw(st.booleans()):  # duplicate ranges (and levels) of some blocks
        drawn += draw(st.lists(st.sampled_from(drawn), max_size=6))
    return [
        Spec(
            path=f"f{i}.parquet",
            lo=lo,
            hi=hi,
            level=draw(st.sampled_from(LEVELS)),
            rows=draw(st.integers(0, 10**6)),
            size=draw(st.integers(0, 10**10)),
        )
        for i, (lo, hi) in enumerate(drawn)
    ]


# --- Oracle sanity ----------------------------------------------------------------------------------------


def test_oracle_by_hand() -> None:
    assert oracle_depths([(1, 5), (5, 9), (10, 10)]) == (
        [1, 5, 9, 10],
        [1, 2, 1, 1],
        [2, 2, 1],
        [1, 1, 0],
    )
    assert [_bucket(d) for d in (1, 16, 17, 32, 33, 64, 65)] == [1, 16, 32, 32, 64, 64, 128]
    assert _percentile([1, 2, 3, 4], 95) == 4 and _percentile(list(range(1, 101)), 95) == 95


# --- Full metrics vs oracle -------------------------------------------------------------------------------


@FAST
@given(spec_lists(int_ranges()))
def test_metrics_match_oracle_int_key(specs: list[Spec]) -> None:
    blocks = [s.block() for s in specs]
    assert_metrics_equal(clustering_metrics(blocks).to_dict(), oracle_metrics(specs))
    info = clustering_info(blocks)
    assert_info_equal(info.to_dict(), oracle_info(specs))
    assert sorted(info.levels) == sorted({s.level for s in specs})


@FAST
@given(spec_lists(tuple_ranges()))
def test_metrics_match_oracle_int_string_key(specs: list[Spec]) -> None:
    blocks = [s.block() for s in specs]
    assert_metrics_equal(clustering_metrics(blocks).to_dict(), oracle_metrics(specs))
    assert_info_equal(clustering_info(blocks).to_dict(), oracle_info(specs))


@settings(max_examples=50, deadline=None)
@given(spec_lists(int_ranges()), st.randoms(use_true_random=False))
def test_metrics_do_not_depend_on_block_order(specs: list[Spec], rnd: random.Random) -> None:
    blocks = [s.block() for s in specs]
    shuffled = list(blocks)
    rnd.shuffle(shuffled)
    assert_info_equal(clustering_info(shuffled).to_dict(), clustering_info(blocks).to_dict())


def test_metrics_match_oracle_many_blocks() -> None:
    """A few hundred blocks: the sparse table of the range-maximum query gets several levels."""
    rnd = random.Random(20240611)
    specs = []
    for i in range(400):
        lo = rnd.randrange(0, 3000)
        specs.append(Spec(f"f{i}", lo, lo + rnd.choice([0, 1, 5, 40, 300]), level=rnd.choice(LEVELS)))
    assert_info_equal(clustering_info([s.block() for s in specs]).to_dict(), oracle_info(specs))


def test_unclustered_blocks_only_count() -> None:
    specs = [Spec("u1", None, None, rows=5, size=50), Spec("u2", None, None, rows=7, size=70, level=1)]
    metrics = clustering_metrics([s.block() for s in specs]).to_dict()
    assert metrics == {
        "total_block_count": 2,
        "constant_block_count": 0,
        "unclustered_block_count": 2,
        "total_rows": 12,
        "total_bytes": 120,
        "average_overlaps": 0.0,
        "average_depth": 1.0,
        "p95_depth": 1,
        "p99_depth": 1,
        "block_depth_histogram": {},
    }
    # An unclustered block next to clustered ones changes neither depths nor overlaps.
    with_clustered = [*specs, Spec("a", 1, 5, rows=1, size=10), Spec("b", 3, 7, rows=1, size=10)]
    metrics = clustering_metrics([s.block() for s in with_clustered]).to_dict()
    assert metrics["average_depth"] == 2.0 and metrics["average_overlaps"] == 1.0
    assert metrics["total_block_count"] == 4 and metrics["unclustered_block_count"] == 2
    assert metrics["block_depth_histogram"] == {"00002": 2}


# --- Empty input and goldens ------------------------------------------------------------------------------


def test_empty_input() -> None:
    assert clustering_metrics([]).to_dict() == EMPTY_METRICS
    info = clustering_info([])
    assert info.levels == {}
    assert info.to_dict() == {**clustering_metrics([]).to_dict(), "levels": {}}
    assert ClusteringState().info().to_dict() == info.to_dict()


def _int_block(path: str, lo: int, hi: int, level: int = 0, rows: int = 10, size: int = 100) -> Block:
    return Spec(path, lo, hi, level=level, rows=rows, size=size).block()


def test_golden_small_table() -> None:
    blocks = [
        _int_block("a", 1, 5),
        _int_block("b", 3, 7),
        _int_block("c", 6, 10),
        _int_block("d", 11, 11, level=1),
    ]
    info = clustering_info(blocks)
    assert isinstance(info, ClusteringInfo)
    assert info.table.to_dict() == {
        "total_block_count": 4,
        "constant_block_count": 1,
        "unclustered_block_count": 0,
        "total_rows": 40,
        "total_bytes": 400,
        "average_overlaps": 1.0,
        "average_depth": 1.75,
        "p95_depth": 2,
        "p99_depth": 2,
        "block_depth_histogram": {"00001": 1, "00002": 3},
    }
    assert sorted(info.levels) == [0, 1]
    level0 = info.levels[0]
    assert level0.total_block_count == 3 and level0.constant_block_count == 0
    assert level0.average_depth == 2.0
    assert level0.average_overlaps == pytest.approx(4 / 3, rel=1e-12)
    assert level0.p95_depth == 2 and level0.p99_depth == 2
    assert dict(level0.block_depth_histogram) == {"00002": 3}
    level1 = info.levels[1]
    assert level1.to_dict() == {
        "total_block_count": 1,
        "constant_block_count": 1,
        "unclustered_block_count": 0,
        "total_rows": 10,
        "total_bytes": 100,
        "average_overlaps": 0.0,
        "average_depth": 1.0,
        "p95_depth": 1,
        "p99_depth": 1,
        "block_depth_histogram": {"00001": 1},
    }
    as_dict = info.to_dict()
    assert list(as_dict) == [*METRIC_KEYS, "levels"]
    assert list(as_dict["levels"]) == ["0", "1"]
    assert as_dict["levels"]["0"] == level0.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_golden_depth_20_goes_to_bucket_32() -> None:
    metrics = clustering_metrics([_int_block(f"f{i}", 100, 200) for i in range(20)])
    assert metrics.average_depth == 20.0
    assert metrics.average_overlaps == 19.0
    assert metrics.p95_depth == 20 and metrics.p99_depth == 20
    assert metrics.constant_block_count == 0
    assert dict(metrics.block_depth_histogram) == {"00032": 20}


def test_golden_depths_16_and_17() -> None:
    blocks = [_int_block(f"a{i}", 0, 1) for i in range(16)] + [_int_block(f"b{i}", 10, 11) for i in range(17)]
    metrics = clustering_metrics(blocks)
    assert dict(metrics.block_depth_histogram) == {"00016": 16, "00032": 17}
    assert metrics.average_depth == pytest.approx((16 * 16 + 17 * 17) / 33, rel=1e-12)
    assert metrics.p95_depth == 17 and metrics.p99_depth == 17


def test_golden_touching_blocks_overlap() -> None:
    metrics = clustering_metrics([_int_block("a", 1, 5), _int_block("b", 5, 9)])
    assert metrics.average_depth == 2.0 and metrics.average_overlaps == 1.0


def test_golden_average_is_not_rounded() -> None:
    metrics = clustering_metrics([_int_block("a", 0, 1), _int_block("b", 1, 2), _int_block("c", 5, 6)])
    assert metrics.to_dict()["average_depth"] == 5 / 3
    assert metrics.to_dict()["average_overlaps"] == 2 / 3


@pytest.mark.parametrize(
    ("depth", "bucket", "label"),
    [
        (1, 1, "00001"),
        (2, 2, "00002"),
        (15, 15, "00015"),
        (16, 16, "00016"),
        (17, 32, "00032"),
        (31, 32, "00032"),
        (32, 32, "00032"),
        (33, 64, "00064"),
        (64, 64, "00064"),
        (65, 128, "00128"),
        (1000, 1024, "01024"),
        (65536, 65536, "65536"),
        (65537, 131072, "131072"),
    ],
)
def test_histogram_buckets(depth: int, bucket: int, label: str) -> None:
    assert histogram_bucket(depth) == bucket == _bucket(depth)
    assert bucket_label(bucket) == label


def test_nearest_rank_matches_integer_formula() -> None:
    for n in range(1, 1500):
        values = np.arange(1, n + 1)
        for percent in (1, 50, 95, 99, 100):
            assert nearest_rank(np.bincount(values), percent) == _percentile(list(range(1, n + 1)), percent), (
                n,
                percent,
            )


# --- depth_profile and rank_keys --------------------------------------------------------------------------


@LIGHT
@given(st.lists(int_ranges().filter(lambda r: r[0] is not None), max_size=30))
def test_depth_profile_matches_oracle(ranges: list[tuple[int, int]]) -> None:
    profile = depth_profile(
        [encode_key((lo,), INT_KEY) for lo, _ in ranges], [encode_key((hi,), INT_KEY) for _, hi in ranges]
    )
    points, point_depth, block_depth, overlaps = oracle_depths(ranges)
    assert profile.lo.tolist() == [points.index(lo) for lo, _ in ranges]
    assert profile.hi.tolist() == [points.index(hi) for _, hi in ranges]
    assert profile.point_depth.tolist() == point_depth
    assert profile.block_depth.tolist() == block_depth
    assert profile.overlaps.tolist() == overlaps


@LIGHT
@given(st.lists(tuple_ranges().filter(lambda r: r[0] is not None), max_size=30))
def test_depth_profile_matches_oracle_variable_width(ranges: list[tuple[Any, Any]]) -> None:
    profile = depth_profile(
        [encode_key(lo, INT_STRING_KEY) for lo, _ in ranges], [encode_key(hi, INT_STRING_KEY) for _, hi in ranges]
    )
    keyed = [(_tuple_key(lo), _tuple_key(hi)) for lo, hi in ranges]
    points, point_depth, block_depth, overlaps = oracle_depths(keyed)
    assert profile.lo.tolist() == [points.index(lo) for lo, _ in keyed]
    assert profile.hi.tolist() == [points.index(hi) for _, hi in keyed]
    assert profile.point_depth.tolist() == point_depth
    assert profile.block_depth.tolist() == block_depth
    assert profile.overlaps.tolist() == overlaps


def test_depth_profile_empty() -> None:
    profile = depth_profile([], [])
    for array in (profile.lo, profile.hi, profile.point_depth, profile.block_depth, profile.overlaps):
        assert array.tolist() == []


def _dense_ranks(keys: list[bytes]) -> list[int]:
    distinct = sorted(set(keys))
    return [distinct.index(k) for k in keys]


def _check_ranks(keys: list[bytes]) -> None:
    ranks, count = rank_keys(keys)
    assert ranks.dtype == np.int64
    assert ranks.tolist() == _dense_ranks(keys)
    assert count == len(set(keys)) and isinstance(count, int)


_BYTE_POOL = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]


@LIGHT
@given(st.integers(1, 20), st.data())
def test_rank_keys_fixed_width(width: int, data: st.DataObject) -> None:
    key = st.lists(st.sampled_from(_BYTE_POOL), min_size=width, max_size=width).map(bytes)
    pool = data.draw(st.lists(st.one_of(key, st.binary(min_size=width, max_size=width)), min_size=1, max_size=8))
    keys = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=40))
    _check_ranks(keys)


@LIGHT
@given(
    st.lists(
        st.one_of(st.binary(max_size=12), st.lists(st.sampled_from(_BYTE_POOL), max_size=10).map(bytes)),
        min_size=1,
        max_size=40,
    )
)
def test_rank_keys_variable_width(keys: list[bytes]) -> None:
    keys = [*keys, keys[0] + b"\x00"]  # at least two widths: the Arrow path
    _check_ranks(keys)


def test_rank_keys_edge_cases() -> None:
    ranks, count = rank_keys([])
    assert ranks.tolist() == [] and count == 0
    _check_ranks([b""])
    _check_ranks([b"", b"", b""])
    _check_ranks([b"", b"\x00", b"\x00\x00", b"\x01", b"\xff"])
    _check_ranks([b"\xff" * 8, b"\x00" * 8, b"\x80" + b"\x00" * 7, b"\x7f" + b"\xff" * 7])  # unsigned words
    _check_ranks([b"\x00" * 8 + b"\x02", b"\x00" * 8 + b"\x01", b"\x01" + b"\x00" * 8])  # second word decides


# --- ClusteringState --------------------------------------------------------------------------------------


def test_state_apply_examples() -> None:
    a, b, c = _int_block("a", 1, 5), _int_block("b", 3, 7), _int_block("c", 6, 10, level=1)
    state = ClusteringState([a, b])
    assert state.levels == [0]
    assert state.apply(added=[c], removed=["a"]) == frozenset({0, 1})
    assert state.apply(added=(), removed=["unknown"]) == frozenset()
    assert state.apply(added=iter([]), removed=iter([])) == frozenset()
    moved = _int_block("b", 3, 7, level=2)  # the same path, re-added at another level
    assert state.apply(added=iter([moved]), removed=()) == frozenset({0, 2})
    assert state.levels == [1, 2]
    assert state.level_blocks(0) == []
    assert sorted(b.path for b in state.blocks) == ["b", "c"]
    assert state.info().to_dict() == clustering_info(state.blocks).to_dict()
    assert state.apply(added=(), removed=["b", "c"]) == frozenset({1, 2})
    assert state.levels == [] and state.blocks == []
    assert state.info().to_dict() == clustering_info([]).to_dict()


def test_state_same_path_added_twice_in_one_commit() -> None:
    state = ClusteringState([_int_block("a", 1, 5)])
    first, second = _int_block("x", 2, 3, level=1), _int_block("x", 4, 9, level=2)
    touched = state.apply(added=[first, second], removed=[])
    assert {2} <= touched <= {1, 2}  # level 1 is net unchanged: reporting it is allowed, not required
    assert state.levels == [0, 2]
    assert sorted((b.path, b.level) for b in state.blocks) == [("a", 0), ("x", 2)]
    assert state.info().to_dict() == clustering_info(state.blocks).to_dict()


def test_state_remove_and_readd_in_one_commit() -> None:
    state = ClusteringState([_int_block("a", 1, 5), _int_block("b", 3, 7)])
    state.info()  # fill the per-level cache
    replacement = _int_block("a", 20, 30)
    assert state.apply(added=[replacement], removed=["a"]) == frozenset({0})
    assert set(state.blocks) == {replacement, _int_block("b", 3, 7)}
    info = state.info()
    assert info.to_dict() == clustering_info(state.blocks).to_dict()
    assert info.levels[0].average_overlaps == 0.0 and info.levels[0].average_depth == 1.0


class StateMachine(RuleBasedStateMachine):
    """Random commits against ClusteringState, checked against a plain {path: Spec} model."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, Spec] = {}
        self.state = ClusteringState()
        self.counter = 0

    def _new_specs(self, data: st.DataObject, paths: Iterable[str] | None = None) -> list[Spec]:
        if paths is None:
            count = data.draw(st.integers(0, 5))
            paths = [f"new{self.counter + i}" for i in range(count)]
            self.counter += count
        specs = []
        for path in paths:
            lo, hi = data.draw(int_ranges())
            specs.append(
                Spec(path, lo, hi, level=data.draw(st.sampled_from(LEVELS)), rows=data.draw(st.integers(0, 99)))
            )
        return specs

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        specs = self._new_specs(data)
        self.state = ClusteringState(s.block() for s in specs)
        self.model = {s.path: s for s in specs}

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        existing = sorted(self.model)
        removed = data.draw(st.lists(st.sampled_from(existing), max_size=4)) if existing else []
        removed += data.draw(st.lists(st.sampled_from(["ghost", "new9999", "f0.parquet"]), max_size=2))
        readded = data.draw(st.lists(st.sampled_from(existing), max_size=3, unique=True)) if existing else []
        added = self._new_specs(data) + self._new_specs(data, readded)
        added = data.draw(st.permutations(added))

        expected_touched: set[int] = set()
        for path in set(removed):
            if path in self.model:
                expected_touched.add(self.model.pop(path).level)
        for spec in added:
            if spec.path in self.model:
                expected_touched.add(self.model[spec.path].level)
            self.model[spec.path] = spec
            expected_touched.add(spec.level)

        touched = self.state.apply(added=[s.block() for s in added], removed=removed)
        assert touched == frozenset(expected_touched)

    @invariant()
    def matches_full_recompute_and_oracle(self) -> None:
        blocks = self.state.blocks
        assert len(blocks) == len({b.path for b in blocks})
        assert set(blocks) == {s.block() for s in self.model.values()}
        assert self.state.levels == sorted({s.level for s in self.model.values()})
        for level in self.state.levels:
            assert {b.path for b in self.state.level_blocks(level)} == {
                s.path for s in self.model.values() if s.level == level
            }
        info = self.state.info().to_dict()
        assert info == clustering_info(blocks).to_dict()
        assert_info_equal(info, oracle_info(list(self.model.values())))


TestClusteringState = StateMachine.TestCase
TestClusteringState.settings = settings(max_examples=30, stateful_step_count=12, deadline=None)


# --- column scan fractions ----------------------------------------------------------------------------------------

_scan_values = {
    KeyType.INTEGER: st.one_of(st.none(), st.integers(-50, 50)),
    KeyType.FLOAT: st.one_of(st.none(), st.just(math.nan), st.floats(-50, 50)),
    KeyType.DATE: st.one_of(st.none(), st.dates(dt.date(2020, 1, 1), dt.date(2020, 3, 1))),
    KeyType.STRING: st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "c"])),
}


@FAST
@given(
    st.sampled_from(sorted(_scan_values)).flatmap(
        lambda kind: st.tuples(
            st.just(kind), st.lists(st.tuples(_scan_values[kind], _scan_values[kind]), min_size=1, max_size=12)
        )
    ),
    st.integers(0, 3),
)
def test_column_scan_fractions_equal_a_brute_force_count(
    case: tuple[KeyType, list[tuple[Any, Any]]], bare: int
) -> None:
    """Per column, the mean over the points (range midpoints for ordered numbers, minimums otherwise) of the share
    of files whose stats contain the point, files without usable stats read always; `bare` files have no stats."""
    kind, ranges = case
    column = KeyColumn("c", kind)
    blocks = [Block(f"f{i}", 1, 1, b"\x01", b"\x01", (lo,), (hi,)) for i, (lo, hi) in enumerate(ranges)] + [
        Block(f"bare{i}", 1, 1, None, None) for i in range(bare)
    ]

    def usable(value: Any) -> bool:
        return value is not None and value == value

    def number(value: Any) -> Any:
        return (value - dt.date(1970, 1, 1)).days if isinstance(value, dt.date) else value

    good = [(number(lo), number(hi)) for lo, hi in ranges if usable(lo) and usable(hi) and number(lo) <= number(hi)]
    assume(len(good) == sum(usable(lo) and usable(hi) for lo, hi in ranges))  # stats are ordered
    scan = column_scan_fractions(blocks, ClusterKey((column,)))
    total = len(blocks)
    if not good:
        assert scan == {"c": 1.0}
        return
    points = [(lo + hi) / 2 for lo, hi in good] if kind is not KeyType.STRING else [lo for lo, _ in good]
    reads = [sum(lo <= p <= hi for lo, hi in good) + total - len(good) for p in points]
    assert scan["c"] == pytest.approx(sum(reads) / len(reads) / total)


@FAST
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.one_of(st.none(), st.integers(-20, 20)), st.integers(-20, 20)), max_size=6),
            st.lists(st.integers(0, 40), max_size=4),
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
def test_block_set_equals_a_full_recompute_through_every_key_form(
    commits: list[tuple[list[tuple[int | None, int]], list[int]]], partitioned: bool
) -> None:
    """A level's incremental metrics equal a full recompute after every commit, while its keys are all one 8-byte
    value (held as numbers), once a NULL minimum or a partition prefix turns them into bytes, and across that turn."""
    block_set = BlockSet()
    made = 0
    for added, removed in commits:
        blocks = []
        for low, high in added:
            prefix = b"\x01p\x00\x00" if partitioned and made % 3 == 2 else b""
            low_key = encode_key((low,), INT_KEY, prefix) if low is None or low <= high else None
            blocks.append(Block(f"b{made}", 1, 1, low_key, encode_key((high,), INT_KEY, prefix) if low_key else None))
            made += 1
        block_set.update(blocks, [f"b{i}" for i in removed])
        assert block_set.metrics() == clustering_metrics(list(block_set))
