"""Settings resolution (docs/operations.md): defaults < YAML file < RECLUSTER_ environment < --set overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recluster.settings import (
    GIB,
    MIB,
    Settings,
    SettingsError,
    TableSettings,
    load_settings,
    table_storage_options,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RECLUSTER_ variable of the surrounding environment may leak into these tests."""
    for name in list(os.environ):
        if name.upper().startswith("RECLUSTER_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str, name: str = "recluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


CONFIG = """\
storage_options:
  AWS_REGION: eu-west-1
clustering:
  depth_ratio: 0.2
  target_rows: 5000
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "4"
stream:
  starting_version: 12
tables:
  - uri: s3://bucket/events
    cluster_by: "a, b"
    storage_options:
      AWS_REGION: us-east-1
  - uri: /data/other
    cluster_by: [c]
  - uri: /data/by-property
"""


def assert_one_line(error: pytest.ExceptionInfo[SettingsError], *fragments: str) -> None:
    message = str(error.value)
    assert message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_defaults() -> None:
    settings = load_settings()
    assert settings == Settings()
    assert settings.clustering.depth_ratio == 0.1
    assert settings.clustering.max_depth_threshold == 16.0
    assert settings.clustering.target_rows == 1_000_000
    assert settings.clustering.target_file_bytes == 256 * MIB
    assert settings.clustering.max_merge_bytes == 4 * GIB
    assert settings.clustering.max_merge_files == 512
    assert settings.spark.master == "local[*]"
    assert settings.commit.max_attempts == 20 and settings.commit.deadline_seconds == 120.0
    assert settings.stream.starting_version == "latest"
    assert settings.tables == []
    assert settings.storage_options == {}


def test_yaml_file(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, CONFIG))
    assert settings.clustering.depth_ratio == 0.2
    assert settings.clustering.target_rows == 5000
    assert settings.clustering.max_merge_files == 512  # untouched fields keep their defaults
    assert settings.spark.master == "local[2]"
    assert settings.spark.conf == {"spark.sql.shuffle.partitions": "4"}
    assert settings.stream.starting_version == 12
    assert settings.storage_options == {"AWS_REGION": "eu-west-1"}
    assert [t.uri for t in settings.tables] == ["s3://bucket/events", "/data/other", "/data/by-property"]
    assert settings.tables[0].cluster_by == ["a", "b"]
    assert settings.tables[1].cluster_by == ["c"]
    assert settings.tables[2].cluster_by is None
    # per-table storage options are merged over the global ones
    assert table_storage_options(settings, settings.tables[0]) == {"AWS_REGION": "us-east-1"}
    assert table_storage_options(settings, None) == {"AWS_REGION": "eu-west-1"}


def test_file_values_do_not_leak_into_the_next_load(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, CONFIG)).clustering.depth_ratio == 0.2
    assert load_settings().clustering.depth_ratio == 0.1


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_empty_yaml_file_means_defaults(tmp_path: Path, text: str) -> None:
    assert load_settings(write(tmp_path, text)) == Settings()


def test_environment_overrides_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLUSTER_CLUSTERING__DEPTH_RATIO", "0.3")
    monkeypatch.setenv("RECLUSTER_SPARK__MASTER", "local[3]")
    settings = load_settings(write(tmp_path, CONFIG))
    assert settings.clustering.depth_ratio == 0.3
    assert settings.spark.master == "local[3]"
    # nested sections merge field by field: the file's other clustering values survive
    assert settings.clustering.target_rows == 5000
    assert settings.spark.conf == {"spark.sql.shuffle.partitions": "4"}
    assert load_settings().clustering.depth_ratio == 0.3  # env applies without a file too


def test_overrides_beat_environment_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLUSTER_CLUSTERING__DEPTH_RATIO", "0.3")
    settings = load_settings(
        write(tmp_path, CONFIG),
        ["clustering.depth_ratio=0.4", "clustering.max_merge_files=8", "commit.backoff_seconds=0"],
    )
    assert settings.clustering.depth_ratio == 0.4
    assert settings.clustering.max_merge_files == 8
    assert settings.clustering.target_rows == 5000  # from the file
    assert settings.commit.backoff_seconds == 0.0
    # the last of two overrides of one field wins
    assert (
        load_settings(None, ["clustering.depth_ratio=0.5", "clustering.depth_ratio=0.6"]).clustering.depth_ratio == 0.6
    )


def test_override_values_are_typed() -> None:
    settings = load_settings(
        None,
        [
            "spark.master=local[2]",
            "stream.starting_version=earliest",
            "clustering.max_depth_threshold=4",
            "storage_options.AWS_REGION=eu-central-1",
            "tables=[{uri: /x, cluster_by: 'a,b'}]",
        ],
    )
    assert settings.spark.master == "local[2]"
    assert settings.stream.starting_version == "earliest"
    assert settings.clustering.max_depth_threshold == 4.0
    assert settings.storage_options == {"AWS_REGION": "eu-central-1"}
    assert settings.tables == [TableSettings(uri="/x", cluster_by=["a", "b"])]
    assert load_settings(None, ["stream.starting_version=7"]).stream.starting_version == 7


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["clustering.depth_ratio=abc"], ["clustering.depth_ratio", "'abc'"]),
        (["clustering.depth_ratio=0"], ["clustering.depth_ratio", "greater than 0"]),
        (["clustering.depth_ratio=-1"], ["clustering.depth_ratio"]),
        (["clustering.max_merge_files=1"], ["clustering.max_merge_files"]),
        (["clustering.target_rows=1.5"], ["clustering.target_rows"]),
        (["stream.starting_version=sometimes"], ["stream.starting_version"]),
        (["commit.max_attempts=0"], ["commit.max_attempts"]),
    ],
)
def test_bad_override_value_names_the_field(overrides: list[str], fragments: list[str]) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, overrides)
    assert_one_line(caught, "invalid setting", *fragments)


def test_bad_environment_value_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLUSTER_CLUSTERING__DEPTH_RATIO", "abc")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert_one_line(caught, "clustering.depth_ratio")


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        pytest.param("clustering:\n  target_rows: lots\n", ["clustering.target_rows", "'lots'"], id="bad-value"),
        pytest.param(
            "clustering:\n  target_rows: lots\n  depth_ratio: -2\n",
            ["clustering.target_rows", "clustering.depth_ratio"],  # both problems, on one line
            id="two-problems",
        ),
        pytest.param("clustering: {depth_ratio: 0.2\n", ["malformed YAML", "line "], id="unclosed-yaml"),
        pytest.param("- a\n- b\n", ["must hold a mapping"], id="not-a-mapping"),
    ],
)
def test_bad_config_file_is_one_line_naming_the_problem(tmp_path: Path, text: str, fragments: list[str]) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, text))
    assert_one_line(caught, *fragments)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "clustering:\n  depth_ratio: 0.2\n   target_rows: [5\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert_one_line(caught, "malformed YAML", str(path), "line 3")


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path / "missing.yaml")
    assert_one_line(caught, "cannot read config file", "missing.yaml")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("clustering:\n  depth_raito: 0.2\n", "clustering.depth_raito"),
        ("clusterin:\n  depth_ratio: 0.2\n", "clusterin"),
        ("tables:\n  - uri: /x\n    clusterby: a\n", "tables.0.clusterby"),
    ],
)
def test_unknown_field_in_file(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, text))
    assert_one_line(caught, f"invalid setting {field}", "Extra inputs are not permitted")


@pytest.mark.parametrize("override", ["clustering.bogus=1", "bogus=1"])
def test_unknown_field_in_override(override: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, [override])
    assert_one_line(caught, override.split("=")[0])


@pytest.mark.parametrize("override", ["nonsense", "=1", " =1"])
def test_malformed_override(override: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, [override])
    assert_one_line(caught, "section.field=value")


def test_table_without_uri() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, ["tables=[{cluster_by: a}]"])
    assert_one_line(caught, "tables.0.uri")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("a, b", ["a", "b"]), ("a,b", ["a", "b"]), (" a ,, b , ", ["a", "b"]), ("a", ["a"]), (["x", "y"], ["x", "y"])],
)
def test_cluster_by_string_is_split(value: str | list[str], expected: list[str]) -> None:
    assert TableSettings(uri="/t", cluster_by=value).cluster_by == expected


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.clustering.depth_ratio = 0.5  # type: ignore[misc]


def test_override_of_a_spark_conf_key_with_dots() -> None:
    settings = load_settings(None, ["spark.conf.spark.sql.shuffle.partitions=8"])
    assert settings.spark.conf == {"spark.sql.shuffle.partitions": "8"}


@pytest.mark.parametrize("override", ["storage_options.timeout=30", "spark.app_name=2024"])
def test_override_of_a_string_field_with_a_number(override: str) -> None:
    name, _, value = override.partition("=")
    section, field = name.split(".")
    assert load_settings(None, [override]).model_dump()[section][field] == value


def test_environment_value_for_a_string_field_stays_a_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLUSTER_SPARK__APP_NAME", "2024")
    assert load_settings().spark.app_name == "2024"
