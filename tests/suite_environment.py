"""Settings the whole suite runs with, in its own process (tests/conftest.py) and in every CLI or job it starts
(`tests.helpers.cli_environment`): kept free of imports so that conftest sets them before any module builds a
`Settings`."""

from __future__ import annotations

SUITE_SETTINGS = {"RECLUSTER_SMALL_TABLES__COMPACT_FILES": "0"}
"""The suite's tables are small (thousands of rows, under one target file): with the small-table rule on they would
wait for 50 files and never be reclustered, so the suite plans them like big ones; tests/test_small_tables.py and
tests/test_selection.py turn the rule on (docs/concepts.md#small-tables)."""
