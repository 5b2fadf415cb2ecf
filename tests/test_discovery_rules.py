"""The pure rules of discovery (recluster/core/discovery.py): inherited settings against a brute-force oracle,
property filters, name patterns, and which found tables the job takes up or lets go."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recluster.core.discovery import (
    Level,
    PropertyLayer,
    discovery_changes,
    effective_properties,
    matches,
    name_pattern,
)

KEYS = st.sampled_from(["recluster.policy", "recluster.clusterBy", "recluster.enabled", "delta.appendOnly", "other"])
VALUES = st.sampled_from(["a", "b", "levels", "absorb", "true"])
PROPERTIES = st.dictionaries(KEYS, VALUES, max_size=5)
LAYERS = st.lists(
    st.builds(
        PropertyLayer.of,
        st.sampled_from([Level.ROOT, Level.CATALOG, Level.DATABASE]),
        st.sampled_from(["x", "y"]),
        PROPERTIES,
    ),
    max_size=3,
    unique_by=lambda layer: layer.level,
)


def oracle(layers: list[PropertyLayer], own: dict[str, str], key: str) -> tuple[str, str] | None:
    """For one key: the table's own value, else the value of the most specific level that sets it (database over
    catalog over root), as (value, origin); None when nobody sets it. Only recluster.* keys are inherited."""
    if key in own:
        return own[key], "table"
    if not key.startswith("recluster."):
        return None
    for level in (Level.DATABASE, Level.CATALOG, Level.ROOT):
        for layer in layers:
            if layer.level is level and key in dict(layer.properties):
                return dict(layer.properties)[key], f"{level} {layer.name}"
    return None


@given(LAYERS, PROPERTIES, st.permutations(range(3)))
def test_effective_properties_agree_with_the_oracle_whatever_the_layer_order(
    layers: list[PropertyLayer], own: dict[str, str], order: list[int]
) -> None:
    shuffled = [layers[i] for i in order if i < len(layers)]
    merged = effective_properties(shuffled, own)
    every_key = set(own) | {key for layer in layers for key, _ in layer.properties}
    for key in every_key:
        expected = oracle(layers, own, key)
        got = merged.get(key)
        assert (got.value, got.origin) == expected if got is not None else expected is None


def test_a_database_policy_reaches_a_table_without_its_own_and_the_table_property_overrides_it() -> None:
    layers = [
        PropertyLayer.of(Level.CATALOG, "spark_catalog", {"recluster.policy": "absorb"}),
        PropertyLayer.of(Level.DATABASE, "spark_catalog.db", {"recluster.policy": "levels"}),
    ]
    inherited = effective_properties(layers, {})["recluster.policy"]
    assert (inherited.value, inherited.origin) == ("levels", "database spark_catalog.db")
    own = effective_properties(layers, {"recluster.policy": "absorb"})["recluster.policy"]
    assert (own.value, own.origin) == ("absorb", "table")
    assert str(own) == "recluster.policy=absorb (table)"


def test_filters_compare_values_case_insensitively_and_star_asks_for_presence() -> None:
    assert matches({"recluster.enabled": "TRUE"}, {"recluster.enabled": "true"})
    assert not matches({"recluster.enabled": "false"}, {"recluster.enabled": "true"})
    assert not matches({}, {"recluster.clusterBy": "*"})
    assert matches({"recluster.clusterBy": "a,b"}, {"recluster.clusterBy": "*"})
    assert matches({"anything": "x"}, {})


def test_a_bad_name_pattern_is_one_line_naming_it() -> None:
    assert name_pattern("events_.*").fullmatch("EVENTS_1")
    with pytest.raises(ValueError, match=r"'ev\[' is not a valid regular expression"):
        name_pattern("ev[")


def test_found_tables_are_taken_up_and_gone_ones_let_go_unless_their_source_failed_or_they_are_listed() -> None:
    watched = {"s3://b/w/a": "root1", "s3://b/w/b": "root1", "/c/x": "cat", "/listed": "root1"}
    found = {"s3://b/w/a": "root1", "s3://b/w/new": "root1", "/listed": "root1"}
    changes = discovery_changes(watched, found, failed_sources={"cat"}, listed={"/listed"})
    assert changes.added == ("s3://b/w/new",)
    assert changes.dropped == ("s3://b/w/b",)  # /c/x: its catalog failed this pass
    assert str(changes) == "discovery added=1 dropped=1"
