"""The tasks' Python workers import pyspark from its installed package, not from the zip Spark puts first on their
path (recluster/spark/python_daemon.py, docs/operations.md#python-workers)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from recluster.spark.python_daemon import installed_copies


def test_only_the_installed_packages_own_zip_leaves_the_path(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    linked = tmp_path / "venv-link"  # a venv reached by a link, as a clone's .venv linked to another's
    linked.symlink_to(site, target_is_directory=True)
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    elsewhere = tmp_path / "spark-4.2.0-bin" / "python" / "lib"
    elsewhere.mkdir(parents=True)
    own, py4j, other = str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(elsewhere / "pyspark.zip")
    path = [own, py4j, other, own, str(site)]
    assert installed_copies(path) == [own, own]  # both copies Spark listed; py4j's and another Spark's stay
    assert installed_copies([own, str(linked)]) == [own]  # the package through the link is the zip's own
    assert installed_copies([own, py4j]) == []  # no installed package on the path: the zip is all there is
    (site / "pyspark" / "__init__.py").unlink()
    assert installed_copies(path) == []  # a folder named pyspark that is no package


def test_a_task_worker_runs_the_installed_pyspark(spark: Any) -> None:
    import pyspark
    from pyspark.sql.functions import udf

    where = udf(lambda _: __import__("pyspark").__file__)
    (row,) = spark.range(1).select(where("id").alias("file")).collect()
    assert os.path.realpath(row.file) == os.path.realpath(pyspark.__file__), row.file
