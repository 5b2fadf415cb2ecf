"""PySpark's Python worker daemon, importing pyspark from its installed package instead of from the zip Spark puts
first on the workers' `PYTHONPATH` (docs/operations.md#python-workers).

Spark starts the tasks' Python workers as `python -m <spark.python.daemon.module> pyspark.worker` with
`$SPARK_HOME/python/lib/pyspark.zip` first on the path. Python caches no bytecode for modules imported from a zip:
every daemon and every worker it forks compiled pyspark's modules from source again, 3.4 times the CPU of importing
them from the installed package. When the zip is the installed package's own copy
(`<entry on sys.path>/pyspark/python/lib/pyspark.zip`, the layout of a pip install, so the same version by
construction), it is dropped from the path; a zip of a Spark distribution elsewhere stays. Then PySpark's own daemon
runs, unchanged.
"""

from __future__ import annotations

import os
import sys


def installed_copies(path: list[str]) -> list[str]:
    """The entries of `path` that are the pyspark zip inside a pyspark package installed in another entry."""
    # real paths: Spark names the zip under SPARK_HOME, resolved, while sys.path may reach the package by a link
    packages = (os.path.join(os.path.realpath(entry), "pyspark") for entry in path if not entry.endswith(".zip"))
    installed = {package for package in packages if os.path.isfile(os.path.join(package, "__init__.py"))}
    return [
        entry
        for entry in path
        if os.path.basename(entry) == "pyspark.zip"  # <package>/python/lib/pyspark.zip
        and os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(entry)))) in installed
    ]


def drop_installed_copies() -> None:
    """Take the installed package's own zip off `sys.path`, before pyspark is imported."""
    for entry in installed_copies(sys.path):
        sys.path.remove(entry)


def main() -> None:
    drop_installed_copies()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
