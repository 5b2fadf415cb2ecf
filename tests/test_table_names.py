"""Tables named as users name them (docs/discovery.md#tables-by-name): the rule that tells a name from a path, the
names' syntax and their malformed forms, one line each and before any Spark starts. The names' resolution through a
real catalog is tests/test_table_names_catalog.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from recluster.cli import main
from recluster.core.table_names import TableName, TableNameError, parse_table_name
from recluster.engine.table_names import located_settings, table_name
from recluster.settings import load_settings


@pytest.mark.parametrize(
    "reference,expected",
    [
        ("db.events", TableName("db", "events")),
        ("cat.db.events", TableName("db", "events", catalog="cat")),
        ("db.`my.events`", TableName("db", "my.events")),
        ("`a``b`.c", TableName("a`b", "c")),
        ("db.`s3/part`", TableName("db", "s3/part")),
        ("events", None),  # no dot: a relative folder, as before names were accepted
        ("/data/db.events", None),
        ("s3://bucket/db.events", None),
        ("file:///data/db.events", None),
        ("./db.events", None),
    ],
)
def test_a_reference_is_a_name_or_a_path(reference: str, expected: TableName | None) -> None:
    assert table_name(reference) == expected


def test_an_existing_folder_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert table_name("db.events") == TableName("db", "events")
    (tmp_path / "db.events").mkdir()
    assert table_name("db.events") is None


@pytest.mark.parametrize(
    "reference,problem",
    [
        ("a.b.c.d", "4 parts"),
        ("db.", "an empty part"),
        (".events", "an empty part"),
        ("a..b", "an empty part"),
        ("db. .t", "an empty part"),
        ("db.`events", "an unclosed backquote"),
        ("db.`a`b", "unexpected 'b' at column 7"),
    ],
)
def test_a_malformed_name_is_one_line(reference: str, problem: str) -> None:
    with pytest.raises(TableNameError) as error:
        parse_table_name(reference)
    assert str(error.value) == (
        f"malformed table name {reference!r} ({problem}): give db.table, catalog.db.table (a part with dots in "
        f"backquotes), or a path or URI"
    )


@pytest.mark.parametrize(
    "command", [["info"], ["run", "--final"], ["estimate"], ["optimize"], ["maintain"], ["clean", "--dry-run"]]
)
def test_the_commands_refuse_a_malformed_name_before_spark_starts(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command[0], "a.b.c.d", *command[1:]]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "recluster: error: malformed table name 'a.b.c.d' (4 parts): give db.table, catalog.db.table (a part with "
        "dots in backquotes), or a path or URI"
    ]


def test_sql_refuses_a_malformed_name_even_with_if_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "ALTER TABLE IF EXISTS a.b.c.d RECLUSTER"]) == 1
    assert "malformed table name 'a.b.c.d' (4 parts)" in capsys.readouterr().err


def test_a_tables_entry_by_name_points_at_the_location_its_name_resolved_to(tmp_path: Path) -> None:
    config = tmp_path / "recluster.yaml"
    config.write_text(
        "tables:\n"
        "  - {uri: Shop.Events, cluster_by: k}\n"
        "  - {uri: other.events, cluster_by: j}\n"
        f"  - {{uri: {tmp_path / 'by_path'}, cluster_by: p}}\n"
    )
    settings = load_settings(config)
    located = located_settings(settings, {TableName("shop", "events", catalog="spark_catalog"): "/data/events"})
    assert [(t.uri, t.cluster_by) for t in located.tables] == [
        ("/data/events", ["k"]),
        ("other.events", ["j"]),
        (str(tmp_path / "by_path"), ["p"]),
    ]
