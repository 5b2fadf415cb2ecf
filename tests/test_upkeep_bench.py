"""The upkeep measure without Spark (tests/file_stats.py, which bench.upkeep_bench uses): predicates follow the appended
rows, files read come from min/max stats; and the goals (docgen.upkeep_report).

The bench itself needs Delta Spark and minutes (`python -m bench.upkeep_bench --quick`); its docs block is checked by
tests/test_readme_figures.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from docgen.upkeep_report import goals, summary_rows
from tests.file_stats import Predicates, files_read


def batch(keys: list[int], names: list[str]) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "b": pa.array(names)})


def test_predicates_lie_in_what_was_appended_so_far_and_files_read_count_stats_hits(tmp_path: Path) -> None:
    batches = [batch([0, 100], ["x", "y"]), batch([1000, 2000], ["z", "w"])]
    predicates = Predicates(batches, ("k", "b"), seed=1)
    low, high = predicates.at(0)["k"]
    assert low.min() >= 0 and high.max() <= 100 and np.allclose(high - low, 0.1)
    assert set(predicates.at(0)["b"][0]) <= {"x", "y"}
    assert set(predicates.at(1)["b"][0]) <= {"x", "y", "z", "w"}
    for part in batches:
        write_deltalake(str(tmp_path), part, mode="append")
    read, files = files_read(tmp_path, {"k": (np.array([50.0, 1500.0, 500.0]), np.array([60.0, 1600.0, 600.0]))})
    assert files == 2 and read["k"] == (1 + 1 + 0) / 3


def run(files_read: float, write_amplification: float) -> dict[str, Any]:
    return {
        "time_averaged_files_read": files_read,
        "write_amplification": write_amplification,
        "time_averaged_depth": 1.0,
        "compute_seconds_per_append": 1.0,
    }


def test_goals_need_both_conditions() -> None:
    result = {
        "cases": {
            "met": {
                "strategies": {
                    "recluster": run(1.0, 2.0),
                    "liquid_every_5": run(2.0, 2.0),
                    "liquid_every_1": run(1.0, 4.0),
                }
            },
            "missed": {"strategies": {"recluster": run(1.0, 2.1), "liquid_every_5": run(2.0, 2.0)}},
        }
    }
    outcome = {(g["case"], g["baseline"]): g["met"] for g in goals(result)}
    assert outcome == {
        ("met", "liquid_every_5"): True,
        ("met", "liquid_every_1"): True,
        ("missed", "liquid_every_5"): False,
    }
    assert len(summary_rows(result)) == 4 * 3
