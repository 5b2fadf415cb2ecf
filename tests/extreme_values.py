"""Rows holding every type's extremes, for tests/test_exact_stats.py: DECIMAL(38,18)
±99999999999999999999.999999999999999999, -0.0 beside 0.0, NaN, ±inf, the integer limits, strings sharing Delta's
32-character stats prefix (one continuing with U+10FFFF), timestamps with sub-millisecond parts and in years 1 and
9999, the first and last dates, NULLs; each batch holds every special once, at random rows."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa

D = decimal.Decimal
P = "p" * 32
"""Delta's string stats keep 32 characters: these strings differ only after them."""
BATCHES, ROWS = 4, 150

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("d38", pa.decimal128(38, 18)),
        ("d18", pa.decimal128(18, 6)),
        ("d9", pa.decimal128(9, 2)),
        ("d0", pa.decimal128(38, 0)),
        ("f", pa.float64()),
        ("r", pa.float32()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("tn", pa.timestamp("us")),
        ("dt", pa.date32()),
        ("bin", pa.binary()),
        ("st", pa.struct([("x", pa.float64()), ("y", pa.string())])),
    ]
)
COLUMNS = (
    "i BIGINT, d38 DECIMAL(38,18), d18 DECIMAL(18,6), d9 DECIMAL(9,2), d0 DECIMAL(38,0), f DOUBLE, r FLOAT, "
    "i8 TINYINT, i16 SMALLINT, i32 INT, i64 BIGINT, b BOOLEAN, s STRING, ts TIMESTAMP, tn TIMESTAMP_NTZ, dt DATE, "
    "bin BINARY, st STRUCT<x: DOUBLE, y: STRING>"
)

NAN, INF = float("nan"), float("inf")
D38_MAX = D("99999999999999999999.999999999999999999")
D38_MIN = D("-99999999999999999999.999999999999999999")
D38_ODD = D("12345678901234567890.123456789012351675")
"""The issue's value: as a double (1.2345678901234567e+19) it is below itself."""
NOON = dt.datetime(2026, 1, 1, 12, 0, 0)
FLOATS = [-0.0, 0.0, NAN, INF, -INF, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, None]
TIMES = [
    NOON.replace(microsecond=123456),
    NOON.replace(microsecond=123999),
    NOON.replace(microsecond=999999),
    dt.datetime(1900, 1, 1, 0, 0, 0, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(1, 1, 1, 0, 0, 0, 1),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    None,
]
SPECIALS: dict[str, list[Any]] = {
    "d38": [D38_MAX, D38_MIN, D38_ODD, D("1E-18"), D(0), D("-1E-18"), None],
    "d18": [D("999999999999.999999"), D("-999999999999.999999"), None],
    "d9": [D("9999999.99"), D("-9999999.99"), D("0.01"), None],
    "d0": [D(10**38 - 1), D(-(10**38) + 1), None],
    "f": FLOATS,
    "r": [-0.0, 0.0, NAN, INF, -INF, 3.4028234663852886e38, -3.4028234663852886e38, 1e-45, None],
    "i8": [127, -128, None],
    "i16": [32767, -32768, None],
    "i32": [2**31 - 1, -(2**31), None],
    "i64": [2**63 - 1, -(2**63), None],
    "b": [True, False, None],
    "s": [P + "zzz", P + "aaa", P + "\U0010ffff" + "x", P + "\u00e9", P, "", "q" * 40, None],
    "ts": [t and t.replace(tzinfo=dt.UTC) for t in TIMES],
    "tn": TIMES,
    "dt": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31), dt.date(1970, 1, 1), None],
    "bin": [b"\xff", b"", None],
    "st": [{"x": x, "y": P + "y"} for x in FLOATS] + [None],
}


def ordinary(rng: np.random.Generator, name: str, count: int) -> list[Any]:
    """Values around the specials: random, most files holding several."""
    match name:
        case "d38":
            return [D(int(x)).scaleb(-9) for x in rng.integers(-(10**18), 10**18, count)]
        case "d18":
            return [D(int(x)).scaleb(-6) for x in rng.integers(-(10**17), 10**17, count)]
        case "d9":
            return [D(int(x)).scaleb(-2) for x in rng.integers(-(10**8), 10**8, count)]
        case "d0":
            return [D(int(x)) for x in rng.integers(-(10**18), 10**18, count)]
        case "f" | "r":
            return rng.normal(0, 1000, count).tolist()
        case "i8" | "i16" | "i32" | "i64":
            return rng.integers(-100, 100, count).tolist()
        case "b":
            return (rng.random(count) < 0.5).tolist()
        case "s":
            return [f"{P}{x:05d}" if x % 3 else f"s{x:05d}" for x in rng.integers(0, 100_000, count)]
        case "ts" | "tn":
            times = [NOON + dt.timedelta(microseconds=int(x)) for x in rng.integers(-5_000, 5_000, count)]
            return [t.replace(tzinfo=dt.UTC) for t in times] if name == "ts" else times
        case "dt":
            return [dt.date(2000, 1, 1) + dt.timedelta(days=int(x)) for x in rng.integers(-30_000, 30_000, count)]
        case "bin":
            return [bytes(rng.integers(0, 256, 4).tolist()) for _ in range(count)]
        case "st":
            return [{"x": x, "y": f"y{x:.3f}"} for x in rng.normal(0, 1000, count).tolist()]
    raise AssertionError(name)


def batch(rng: np.random.Generator, number: int) -> pa.Table:
    """ROWS rows; every column's specials at random rows (each special once a batch, so in several files)."""
    columns: dict[str, Any] = {"i": pa.array(range(number * ROWS, (number + 1) * ROWS), pa.int64())}
    for field in list(SCHEMA)[1:]:
        values = ordinary(rng, field.name, ROWS)
        for special, row in zip(SPECIALS[field.name], rng.permutation(ROWS), strict=False):
            values[int(row)] = special
        columns[field.name] = pa.array(values, field.type)
    return pa.table(columns, schema=SCHEMA)
