"""Key encoding and file names (recluster/core/blocks.py), checked against an independent oracle.

The oracle below never looks at bytes: it turns a Python value into a sort key that orders like Spark's
ascending sort with NULLs first (floats: -0.0 == 0.0, every NaN equal and above +inf; strings by UTF-8
bytes; binary bytewise). `encode_key` must order and equate tuples exactly as the oracle does.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import re
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recluster.core.blocks import (
    LEVEL_CONSTANT,
    MAX_LEVEL,
    WrittenFileName,
    data_file_name,
    new_run_id,
    parse_data_file_name,
)
from recluster.core.key_encoding import encode_key, encode_keys, encode_partition, encode_value
from recluster.core.keys import KeyColumn, KeyType, key_fingerprint
from tests.helpers import FAST, LIGHT

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


# --- Oracle -----------------------------------------------------------------------------------------------


def _float_key(value: float) -> tuple[Any, ...]:
    if math.isnan(value):
        return (2,)  # every NaN equal, above +inf
    return (1, value)  # Python already has -0.0 == 0.0 and -inf < x < inf


def _oracle_value(value: Any, kind: KeyType) -> tuple[Any, ...]:
    """A sort key for one component: NULL first, then the value in Spark's ascending order."""
    if value is None:
        return (0,)
    match kind:
        case KeyType.FLOAT:
            return _float_key(value)
        case KeyType.STRING:
            return (1, value.encode("utf-8"))
        case KeyType.BINARY:
            return (1, bytes(value))
        case KeyType.BOOLEAN:
            return (1, int(bool(value)))
        case _:  # integers, decimals, dates, datetimes (naive or aware): Python's own order is Spark's
            return (1, value)


def _oracle(values: Sequence[Any], kinds: Sequence[KeyType]) -> tuple[Any, ...]:
    return tuple(_oracle_value(v, k) for v, k in zip(values, kinds, strict=True))


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _assert_order_preserved(tuples: Sequence[Sequence[Any]], columns: Sequence[KeyColumn]) -> None:
    kinds = [c.type for c in columns]
    encoded = [encode_key(t, columns) for t in tuples]
    for i, j in itertools.combinations_with_replacement(range(len(tuples)), 2):
        expected = _cmp(_oracle(tuples[i], kinds), _oracle(tuples[j], kinds))
        got = _cmp(encoded[i], encoded[j])
        assert got == expected, (tuples[i], tuples[j], encoded[i], encoded[j])


def test_oracle_self_check() -> None:
    """The oracle itself, on cases worked out by hand."""
    f = KeyType.FLOAT
    assert _oracle_value(None, f) < _oracle_value(-math.inf, f) < _oracle_value(-0.0, f)
    assert _oracle_value(-0.0, f) == _oracle_value(0.0, f) < _oracle_value(math.inf, f)
    assert _oracle_value(math.inf, f) < _oracle_value(math.nan, f) == _oracle_value(-math.nan, f)
    s = KeyType.STRING
    assert _oracle_value("\uffff", s) < _oracle_value("\U0001f600", s)  # UTF-8, not UTF-16 order
    assert _oracle_value("a", s) < _oracle_value("a\x00", s) < _oracle_value("a\x01", s)


# --- Strategies -------------------------------------------------------------------------------------------


def _float_from_bits(bits: int) -> float:
    value: float = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    return value


_nan_payloads = st.integers(0, (1 << 52) - 1).map(
    lambda mantissa: _float_from_bits((0x7FF << 52) | mantissa | (1 << 51))
)
_negative_nans = _nan_payloads.map(lambda x: _float_from_bits(struct.unpack(">Q", struct.pack(">d", x))[0] | (1 << 63)))

_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 1.0, -1.0]),
    _nan_payloads,
    _negative_nans,
)

_tricky_text = st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\x01", "\xff", "é", "\uffff", "😀"]), max_size=4)
_strings = st.one_of(st.text(), _tricky_text)
_binaries = st.one_of(
    st.binary(), st.lists(st.sampled_from([b"\x00", b"\x01", b"\xff", b"a"]), max_size=4).map(b"".join)
)
_integers = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(-3, 3),
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]),
)
_naive_datetimes = st.one_of(
    st.datetimes(),
    st.datetimes(min_value=dt.datetime(1969, 12, 31, 23, 59, 58), max_value=dt.datetime(1970, 1, 1, 0, 0, 2)),
)
_timezones = st.one_of(
    st.just(dt.UTC),
    st.timedeltas(min_value=dt.timedelta(hours=-23, minutes=-59), max_value=dt.timedelta(hours=23, minutes=59)).map(
        lambda offset: dt.timezone(dt.timedelta(minutes=offset // dt.timedelta(minutes=1)))
    ),
)
_aware_datetimes = st.one_of(
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=_timezones),
    st.datetimes(
        min_value=dt.datetime(1969, 12, 31, 23, 59, 58),
        max_value=dt.datetime(1970, 1, 1, 0, 0, 2),
        timezones=st.just(dt.UTC),
    ),
)
_dates = st.one_of(st.dates(), st.dates(min_value=dt.date(1969, 12, 25), max_value=dt.date(1970, 1, 5)))


def _decimals(precision: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    bound = decimal.Decimal(10) ** (precision - scale) - decimal.Decimal(1).scaleb(-scale)
    return st.one_of(
        st.decimals(min_value=-bound, max_value=bound, places=scale, allow_nan=False, allow_infinity=False),
        st.integers(-300, 300).map(lambda u: decimal.Decimal(u).scaleb(-scale)),
    )


def _nullable(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def _values_of(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(_nullable(strategy), min_size=2, max_size=8)


# --- Single columns ---------------------------------------------------------------------------------------

SINGLE_COLUMN_CASES: list[tuple[KeyColumn, st.SearchStrategy[Any]]] = [
    (KeyColumn("i", KeyType.INTEGER), _integers),
    (KeyColumn("f", KeyType.FLOAT), _floats),
    (KeyColumn("d", KeyType.DECIMAL, scale=2), _decimals(18, 2)),
    (KeyColumn("d0", KeyType.DECIMAL, scale=0), _decimals(18, 0)),
    (KeyColumn("d6", KeyType.DECIMAL, scale=6), _decimals(28, 6)),
    (KeyColumn("s", KeyType.STRING), _strings),
    (KeyColumn("b", KeyType.BINARY), _binaries),
    (KeyColumn("z", KeyType.BOOLEAN), st.booleans()),
    (KeyColumn("day", KeyType.DATE), _dates),
    (KeyColumn("ts_ntz", KeyType.TIMESTAMP), _naive_datetimes),
    (KeyColumn("ts", KeyType.TIMESTAMP), _aware_datetimes),
    (KeyColumn("ts_micros", KeyType.TIMESTAMP), _integers),
]


@pytest.mark.parametrize(("column", "strategy"), SINGLE_COLUMN_CASES, ids=[c.name for c, _ in SINGLE_COLUMN_CASES])
def test_encode_value_preserves_spark_order(column: KeyColumn, strategy: st.SearchStrategy[Any]) -> None:
    @FAST
    @given(_values_of(strategy))
    def check(values: list[Any]) -> None:
        _assert_order_preserved([(v,) for v in values], [column])
        for v in values:  # encode_key of a 1-tuple is exactly encode_value
            assert encode_key((v,), [column]) == encode_value(v, column)

    check()


ARROW_TYPES: dict[str, list[pa.DataType]] = {
    "i": [pa.int64()],
    "f": [pa.float64()],
    "z": [pa.bool_()],
    "day": [pa.date32()],
    "ts_ntz": [pa.timestamp("us")],
    "ts": [pa.timestamp("us", tz="UTC")],
}
"""Per single-column case, the Arrow types of the log stats that `encode_keys` encodes with numpy."""


@pytest.mark.parametrize(("column", "strategy"), SINGLE_COLUMN_CASES, ids=[c.name for c, _ in SINGLE_COLUMN_CASES])
def test_vectorized_encoding_equals_encode_key(column: KeyColumn, strategy: st.SearchStrategy[Any]) -> None:
    """`encode_keys` over an Arrow column is `encode_key` of each value (with its prefix), or declines (None)
    for the types it has no numpy path for, never a different key."""

    @FAST
    @given(_values_of(strategy), st.lists(st.sampled_from([b"", b"\x01p\x00\x00"]), min_size=8, max_size=8))
    def check(values: list[Any], prefixes: list[bytes]) -> None:
        prefixes = prefixes[: len(values)]
        expected = [p + encode_key((v,), [column]) for v, p in zip(values, prefixes, strict=True)]
        for arrow_type in ARROW_TYPES.get(column.name, []):
            assert encode_keys([pa.array(values, arrow_type)], [column], prefixes) == expected
        if column.name not in ARROW_TYPES and column.name != "ts_micros":
            assert encode_keys([pa.array(values)], [column], prefixes) is None

    check()


def test_vectorized_encoding_of_narrow_types_and_several_columns() -> None:
    """Narrow integers, float32 and second/millisecond timestamps encode as their Python values do; several
    columns with NULLs in some rows join per row."""
    ints, floats = [-128, None, 0, 127], [1.5, float("-inf"), None, -0.0]
    stamps = [dt.datetime(1969, 12, 31, 23, 59, 59), None, dt.datetime(2030, 1, 1, 12), dt.datetime(1970, 1, 1)]
    columns = [KeyColumn("i", KeyType.INTEGER), KeyColumn("f", KeyType.FLOAT), KeyColumn("t", KeyType.TIMESTAMP)]
    expected = [encode_key(row, columns) for row in zip(ints, floats, stamps, strict=True)]
    for unit in ("s", "ms", "us"):
        arrays = [pa.array(ints, pa.int8()), pa.array(floats, pa.float32()), pa.array(stamps, pa.timestamp(unit))]
        assert encode_keys(arrays, columns) == expected
    no_nulls = [pa.array([3, 1]), pa.array([0.5, 2.0])]
    assert encode_keys(no_nulls, columns[:2], [b"a", b"b"]) == [
        b"a" + encode_key((3, 0.5), columns[:2]),
        b"b" + encode_key((1, 2.0), columns[:2]),
    ]


@pytest.mark.parametrize(("column", "_strategy"), SINGLE_COLUMN_CASES, ids=[c.name for c, _ in SINGLE_COLUMN_CASES])
def test_null_sorts_before_every_value(column: KeyColumn, _strategy: st.SearchStrategy[Any]) -> None:
    @settings(max_examples=50, deadline=None)
    @given(_strategy)
    def check(value: Any) -> None:
        assert encode_value(None, column) < encode_value(value, column)

    check()


def test_float_special_values() -> None:
    column = KeyColumn("f", KeyType.FLOAT)
    enc = [encode_value(v, column) for v in [None, -math.inf, -1.0, -5e-324, 0.0, 5e-324, 1.0, math.inf, math.nan]]
    assert enc == sorted(enc)
    assert len(set(enc)) == len(enc)
    assert encode_value(-0.0, column) == encode_value(0.0, column)
    assert encode_value(-math.nan, column) == encode_value(math.nan, column)
    assert encode_value(_float_from_bits(0x7FF0000000000001), column) == encode_value(math.nan, column)  # sNaN


def test_timestamps_before_and_after_epoch() -> None:
    ntz = KeyColumn("t", KeyType.TIMESTAMP)
    naive = [
        dt.datetime(1, 1, 1),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999),
        dt.datetime(1970, 1, 1),
        dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999_999),
    ]
    enc = [encode_value(v, ntz) for v in naive]
    assert enc == sorted(enc) and len(set(enc)) == len(enc)
    # An aware timestamp is its UTC instant, whatever its offset; an int is microseconds since the epoch.
    plus_two = dt.timezone(dt.timedelta(hours=2))
    same_instant = [
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
        dt.datetime(1970, 1, 1, 1, 59, 59, 999_999, tzinfo=plus_two),
        -1,
    ]
    assert len({encode_value(v, ntz) for v in same_instant}) == 1
    assert encode_value(dt.datetime(1970, 1, 1, tzinfo=dt.UTC), ntz) == encode_value(0, ntz)
    assert encode_value(dt.datetime(1970, 1, 1), ntz) == encode_value(0, ntz)


def test_decimal_scale() -> None:
    column = KeyColumn("d", KeyType.DECIMAL, scale=2)
    assert encode_value(decimal.Decimal("1.5"), column) == encode_value(decimal.Decimal("1.50"), column)
    assert encode_value(decimal.Decimal("-0.01"), column) < encode_value(decimal.Decimal("0.00"), column)
    assert encode_value(decimal.Decimal("0.00"), column) < encode_value(decimal.Decimal("0.01"), column)
    assert encode_value(decimal.Decimal("0.01"), column) < encode_value(decimal.Decimal("0.10"), column)


def test_decimal_precision_38() -> None:
    column = KeyColumn("d", KeyType.DECIMAL, scale=2)
    a = decimal.Decimal("123456789012345678901234567890123.45")  # DECIMAL(38, 2) holds 36 integer digits
    b = decimal.Decimal("123456789012345678901234567890123.46")
    assert encode_value(a, column) < encode_value(b, column)  # got: equal bytes
    c = decimal.Decimal("99999999999999999999999999999.99")  # 31 digits
    d = decimal.Decimal("99999999999999999999999999999.98")
    assert encode_value(d, column) < encode_value(c, column)


# --- Several columns --------------------------------------------------------------------------------------

INT_STRING = [KeyColumn("a", KeyType.INTEGER), KeyColumn("s", KeyType.STRING)]
_small_ints = st.one_of(st.integers(-2, 2), _integers)


@FAST
@given(st.lists(st.tuples(_nullable(_small_ints), _nullable(_strings)), min_size=2, max_size=8))
def test_encode_key_int_string_lexicographic(tuples: list[tuple[Any, Any]]) -> None:
    _assert_order_preserved(tuples, INT_STRING)


@FAST
@given(
    st.lists(
        st.tuples(_nullable(_tricky_text), _nullable(_binaries), _nullable(_floats), _nullable(st.booleans())),
        min_size=2,
        max_size=8,
    )
)
def test_encode_key_variable_width_then_more_columns(tuples: list[tuple[Any, ...]]) -> None:
    columns = [
        KeyColumn("s", KeyType.STRING),
        KeyColumn("b", KeyType.BINARY),
        KeyColumn("f", KeyType.FLOAT),
        KeyColumn("z", KeyType.BOOLEAN),
    ]
    _assert_order_preserved(tuples, columns)


def test_encode_key_prefixes_and_nul_bytes() -> None:
    tuples: list[tuple[Any, Any]] = [
        (None, None),
        (None, ""),
        (None, "a"),
        (1, None),
        (1, ""),
        (1, "\x00"),
        (1, "\x00\x00"),
        (1, "\x00\x01"),
        (1, "a"),
        (1, "a\x00"),
        (1, "a\x00b"),
        (1, "a\x01"),
        (1, "ab"),
        (1, "b"),
        (2, None),
    ]
    encoded = [encode_key(t, INT_STRING) for t in tuples]
    assert encoded == sorted(encoded)
    assert len(set(encoded)) == len(encoded)
    _assert_order_preserved(tuples, INT_STRING)
    # A string that is a prefix of another, then a second string column: the first column decides.
    two_strings = [KeyColumn("s", KeyType.STRING), KeyColumn("t", KeyType.STRING)]
    assert encode_key(("a", "zzz"), two_strings) < encode_key(("a\x00", ""), two_strings)
    assert encode_key(("a", "\xff"), two_strings) < encode_key(("ab", None), two_strings)


@LIGHT
@given(st.tuples(_nullable(_small_ints), _nullable(_strings)))
def test_equal_tuples_encode_equal(values: tuple[Any, Any]) -> None:
    number, text = values
    rebuilt = (
        None if number is None else int(str(number)),
        None if text is None else "".join(list(text)),
    )
    assert rebuilt == values
    assert encode_key(values, INT_STRING) == encode_key(rebuilt, INT_STRING)


def test_equal_values_with_different_representations_encode_equal() -> None:
    cases: list[tuple[KeyColumn, Any, Any]] = [
        (KeyColumn("f", KeyType.FLOAT), -0.0, 0.0),
        (KeyColumn("f", KeyType.FLOAT), math.nan, -math.nan),
        (KeyColumn("f", KeyType.FLOAT), 1, 1.0),
        (KeyColumn("d", KeyType.DECIMAL, scale=2), decimal.Decimal("1.5"), decimal.Decimal("1.50")),
        (KeyColumn("d", KeyType.DECIMAL, scale=2), decimal.Decimal("-0.00"), decimal.Decimal("0")),
        (KeyColumn("b", KeyType.BINARY), b"ab", bytearray(b"ab")),
        (KeyColumn("z", KeyType.BOOLEAN), True, 1),
        (
            KeyColumn("t", KeyType.TIMESTAMP),
            dt.datetime(2024, 1, 1, 0, 0, tzinfo=dt.UTC),
            dt.datetime(2024, 1, 1, 5, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        ),
    ]
    for column, a, b in cases:
        assert encode_value(a, column) == encode_value(b, column), (column, a, b)


def test_encode_key_requires_one_value_per_column() -> None:
    with pytest.raises(ValueError):
        encode_key((1,), INT_STRING)


# --- Partitions -------------------------------------------------------------------------------------------

_partition_values = _nullable(st.one_of(st.text(max_size=6), _tricky_text))


@LIGHT
@given(
    names=st.lists(st.sampled_from(["p", "q", "r"]), min_size=1, max_size=3, unique=True),
    data=st.data(),
)
def test_encode_partition_keeps_partitions_apart(names: list[str], data: st.DataObject) -> None:
    p1 = tuple((n, data.draw(_partition_values)) for n in names)
    p2 = tuple((n, data.draw(_partition_values)) for n in names)
    keys = data.draw(st.lists(st.tuples(_nullable(_small_ints), _nullable(_tricky_text)), min_size=4, max_size=4))
    prefix1, prefix2 = encode_partition(p1), encode_partition(p2)
    in1 = [encode_key(k, INT_STRING, prefix1) for k in keys]
    in2 = [encode_key(k, INT_STRING, prefix2) for k in keys]
    if p1 == p2:
        assert in1 == in2
        return
    # Neither prefix is a prefix of the other, so every key of one partition is on the same side of every
    # key of the other partition: ranges of different partitions never overlap.
    assert not prefix1.startswith(prefix2) and not prefix2.startswith(prefix1)
    assert max(in1) < min(in2) or max(in2) < min(in1)
    # Inside one partition the key order is unchanged by the prefix.
    for a, b in itertools.combinations(range(len(keys)), 2):
        assert _cmp(in1[a], in1[b]) == _cmp(encode_key(keys[a], INT_STRING), encode_key(keys[b], INT_STRING))


def test_encode_partition_examples() -> None:
    assert encode_partition(()) == b""
    tricky = [(("p", None),), (("p", ""),), (("p", "1"),), (("p", "1\x00"),), (("p", "10"),), (("p", "2"),)]
    prefixes = [encode_partition(p) for p in tricky]
    assert len(set(prefixes)) == len(prefixes)
    for a, b in itertools.permutations(prefixes, 2):
        assert not a.startswith(b)
    two = [KeyColumn("i", KeyType.INTEGER)]
    low = encode_key((INT64_MAX,), two, encode_partition((("p", "1"),)))
    high = encode_key((INT64_MIN,), two, encode_partition((("p", "1\x00"),)))
    assert low < high


# --- File names -------------------------------------------------------------------------------------------

ORDINARY_NAMES = [
    "part-00000-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901-c000.snappy.parquet",
    "part-00001-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9-c000.zstd.parquet",
    "p=1/part-00000-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901.c000.snappy.parquet",
    "0-3c1d6a4e-2b7f-4d8e-9a01-23456789abcd-0.parquet",
    "part-L01-kzzzzzzzz-r0123456789ab-0123456789abcdef0123456789abcdef.parquet",  # not hex
    "part-L1-k0123abcd-r0123456789ab-0123456789abcdef0123456789abcdef.parquet",  # one-digit level
    "part-L01-k0123abcd-r0123456789ab-0123456789abcdef0123456789abcdef.parquet.crc",
    "xpart-L01-k0123abcd-r0123456789ab-0123456789abcdef0123456789abcdef.parquet",
    "part-L01-k0123abcd-r0123456789ab-0123456789abcdef0123456789abcdef.parquet/part-00000.parquet",
    "",
]


@pytest.mark.parametrize("level", [LEVEL_CONSTANT, 0, 1, 12, MAX_LEVEL])
@pytest.mark.parametrize("directory", ["", "p=1/", "p=1/q=a%20b/", "s3://bucket/table/p=1/"])
def test_data_file_name_round_trip(level: int, directory: str) -> None:
    fingerprint = key_fingerprint(["a", "b"])
    run_id = new_run_id()
    name = data_file_name(level, fingerprint, run_id)
    assert "/" not in name and name.startswith("part-L") and name.endswith(".parquet")
    assert parse_data_file_name(directory + name) == WrittenFileName(level, fingerprint, run_id)


def test_data_file_name_examples() -> None:
    name = data_file_name(1, "3f9a1c07", "0123456789ab")
    assert re.fullmatch(r"part-L01-k3f9a1c07-r0123456789ab-[0-9a-f]{32}\.parquet", name)
    assert data_file_name(LEVEL_CONSTANT, "3f9a1c07", "0123456789ab").startswith("part-L-1-k3f9a1c07-")
    assert data_file_name(12, "3f9a1c07", "0123456789ab").startswith("part-L12-")
    assert data_file_name(1, "3f9a1c07", "0123456789ab") != name  # a fresh uuid each time


def test_data_file_name_clamps_level() -> None:
    name = data_file_name(MAX_LEVEL + 7, key_fingerprint(["a"]), new_run_id())
    parsed = parse_data_file_name(name)
    assert parsed is not None and parsed.level == MAX_LEVEL


@pytest.mark.parametrize("path", ORDINARY_NAMES)
def test_parse_ignores_other_files(path: str) -> None:
    assert parse_data_file_name(path) is None


def test_new_run_id() -> None:
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in ids)


def test_key_fingerprint() -> None:
    fingerprint = key_fingerprint(["a", "b"])
    assert fingerprint == "1d8a62ea"  # pinned: names of files already written depend on it
    assert re.fullmatch(r"[0-9a-f]{8}", fingerprint)
    assert key_fingerprint(["a", "b"]) == fingerprint
    assert key_fingerprint(["b", "a"]) != fingerprint
    assert key_fingerprint(["a"]) != fingerprint
    assert key_fingerprint(["a", "b"], mode="zorder") != fingerprint


@LIGHT
@given(st.lists(st.text(alphabet="abcxyz_", min_size=1, max_size=4), min_size=2, max_size=4, unique=True))
def test_key_fingerprint_depends_on_column_order(columns: list[str]) -> None:
    assert key_fingerprint(columns) == key_fingerprint(list(columns))
    assert key_fingerprint(columns) != key_fingerprint(columns[::-1])
