"""The SQL front end: statements, parse errors that point at the token, WHERE evaluated on file stats."""

from __future__ import annotations

import datetime as dt

import pytest

from recluster.core.blocks import Block
from recluster.core.key_encoding import encode_key
from recluster.core.keys import ClusterKey, KeyColumn, KeyType
from recluster.core.sql import ClusterByStatement, ReclusterStatement, parse_statement
from recluster.core.sql_parser import SqlError
from recluster.core.sql_predicates import parse_predicate

KEY = ClusterKey((KeyColumn("k", KeyType.INTEGER), KeyColumn("s", KeyType.STRING)))
TS_KEY = ClusterKey((KeyColumn("ts", KeyType.TIMESTAMP),))


def block(low, high, partition=(), key=KEY, path="f"):
    return Block(
        path,
        10,
        100,
        encode_key(low, key.columns),
        encode_key(high, key.columns),
        tuple(low),
        tuple(high),
        partition=partition,
    )


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "ALTER TABLE delta.`/data/t` RECLUSTER",
            ReclusterStatement("/data/t", final=False, where=None, limit=None, if_exists=False),
        ),
        (
            "alter table if exists '/data/t' recluster final limit 10;",
            ReclusterStatement("/data/t", final=True, where=None, limit=10, if_exists=True),
        ),
        (
            "ALTER TABLE \"s3://b/t\" RECLUSTER WHERE k > 5 AND (s = 'x' OR k IN (1, 2)) LIMIT 3",
            ReclusterStatement(
                "s3://b/t",
                final=False,
                where="k > 5 AND (s = 'x' OR k IN (1, 2))",
                limit=3,
                if_exists=False,
                where_offset=39,
            ),
        ),
        (
            "OPTIMIZE TABLE '/t' RECLUSTER",
            ReclusterStatement("/t", final=True, where=None, limit=None, if_exists=False),
        ),
        ("ALTER TABLE '/t' CLUSTER BY (a, `b c`)", ClusterByStatement("/t", ("a", "b c"), False)),
        # names, resolved by the command line through the session's catalog (docs/discovery.md#tables-by-name)
        (
            "ALTER TABLE shop.events RECLUSTER FINAL",
            ReclusterStatement("shop.events", final=True, where=None, limit=None, if_exists=False),
        ),
        (
            "ALTER TABLE hive.shop.`my.events` CLUSTER BY (k)",
            ClusterByStatement("hive.shop.`my.events`", ("k",), False),
        ),
        (
            "OPTIMIZE TABLE delta.events RECLUSTER",
            ReclusterStatement("delta.events", final=True, where=None, limit=None, if_exists=False),
        ),
        (
            "ALTER TABLE a.b.c.d RECLUSTER",
            ReclusterStatement("a.b.c.d", final=False, where=None, limit=None, if_exists=False),
        ),
    ],
)
def test_statements(text, expected):
    assert parse_statement(text) == expected


VALID_STATEMENTS = (
    "ALTER TABLE IF EXISTS delta.`/data/t` RECLUSTER FINAL WHERE k > 5 AND s IN ('a', 'b') LIMIT 3;",
    "OPTIMIZE TABLE hive.shop.`my.events` RECLUSTER",
    'ALTER TABLE "s3://b/t" CLUSTER BY (a, `b c`)',
)


@pytest.mark.parametrize("statement", VALID_STATEMENTS)
def test_every_cut_of_a_statement_is_a_syntax_error_or_parses(statement):
    """A statement cut anywhere (`ALTER TABLE` typed alone) is a SqlError naming a column, never another error."""
    for end in range(len(statement) + 1):
        try:
            parse_statement(statement[:end])
        except SqlError as error:
            assert "column" in str(error), statement[:end]


@pytest.mark.parametrize(
    "text,column,found",
    [
        ("ALTER TABLE '/t' RECLUSTR", 18, "'RECLUSTR'"),
        ("ALTER TABLE /t RECLUSTER", 13, "'/'"),
        ("ALTER TABLE '/t' RECLUSTER LIMIT x", 34, "'x'"),
        ("ALTER TABLE '/t' RECLUSTER LIMIT 0", 34, "'0'"),
        ("ALTER TABLE '/t' CLUSTER BY (a,", 32, "end of statement"),
        ("ALTER TABLE '/t' RECLUSTER FINAL extra", 34, "'extra'"),
        ("DROP TABLE '/t'", 1, "'DROP'"),
        ("ALTER TABLE shop.(k) RECLUSTER", 18, "'('"),
    ],
)
def test_parse_errors_point_at_the_token(text, column, found):
    with pytest.raises(SqlError) as error:
        parse_statement(text)
    assert f"column {column}:" in str(error.value)
    assert f"found {found}" in str(error.value) or found in str(error.value)


def test_where_on_key_stats():
    files = {
        "low": block((1, "a"), (10, "m")),
        "high": block((20, "b"), (30, "z")),
        "nulls": block((None, "a"), (5, "c")),
        "allnull": Block(
            "n",
            1,
            1,
            encode_key((None, None), KEY.columns),
            encode_key((None, None), KEY.columns),
            (None, None),
            (None, None),
        ),
        "unclustered": Block("u", 1, 1, None, None),
    }

    def matching(where):
        predicate = parse_predicate(where, KEY, [])
        return {name for name, b in files.items() if predicate.may_match(b)}

    assert matching("k = 5") == {"low", "nulls", "unclustered"}
    assert matching("k > 10") == {"high", "unclustered"}
    assert matching("k >= 10") == {"low", "high", "unclustered"}
    assert matching("k < 1") == {"nulls", "unclustered"}
    assert matching("k BETWEEN 11 AND 19") == {"unclustered"}
    assert matching("k IN (2, 25)") == {"low", "high", "nulls", "unclustered"}
    assert matching("k IS NULL") == {"nulls", "allnull", "unclustered"}
    assert matching("k IS NOT NULL") == {"low", "high", "nulls", "unclustered"}
    assert matching("k = 25 OR k = 3") == {"low", "high", "nulls", "unclustered"}
    assert matching("k > 2 AND k < 4") == {"low", "nulls", "unclustered"}
    assert matching("NOT k = 5") == set(files)  # a negation cannot be refuted by stats: keep everything
    assert matching("k = NULL") == set()


def test_where_on_partitions_and_errors():
    files = [
        block((1, "a"), (2, "b"), partition=(("p", "x"),), path="x"),
        block((1, "a"), (2, "b"), partition=(("p", "y"),), path="y"),
    ]
    predicate = parse_predicate("p = 'y'", KEY, ["p"])
    assert [b.path for b in files if predicate.may_match(b)] == ["y"]
    with pytest.raises(SqlError, match="key or partition columns"):
        parse_predicate("value > 3", KEY, ["p"])
    with pytest.raises(SqlError, match="not a valid integer"):
        parse_predicate("k > 'abc'", KEY, [])
    with pytest.raises(SqlError, match="column 14"):
        parse_predicate("k > 3 AND k", KEY, [], offset=2)


def test_truncated_stats_are_widened():
    # Delta keeps a max timestamp truncated to milliseconds: a row 0.5 ms above the max stat may exist.
    stats_max = dt.datetime(2024, 1, 1, 0, 0, 0, 1000)
    b = block((dt.datetime(2024, 1, 1),), (stats_max,), key=TS_KEY)
    assert parse_predicate("ts > TIMESTAMP '2024-01-01 00:00:00.001500'", TS_KEY, []).may_match(b)
    assert not parse_predicate("ts > TIMESTAMP '2024-01-01 00:00:00.002500'", TS_KEY, []).may_match(b)
    # a 32-character string max stat is a prefix: longer values with that prefix may exist
    prefix = "p" * 32
    s = block((1, "a"), (1, prefix))
    assert parse_predicate(f"s > '{prefix}zzz'", KEY, []).may_match(s)
    assert not parse_predicate("s > 'q'", KEY, []).may_match(s)
