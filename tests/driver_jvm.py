"""How the tests start Spark driver JVMs fast (docs/getting-started.md#test-time): a class-data-sharing archive
and the client compiler only. Tests only: the job itself runs for hours, where neither matters.

The suite starts a Spark driver JVM about a hundred times (every `recluster watch` subprocess, the shared session of
each worker), and on two shared cores most of each start is loading Spark's classes and compiling them twice. An
archive of the classes, dumped once from a real job (`recluster demo` for a few seconds), skips the loading;
`-XX:TieredStopAtLevel=1` stops at the quick compiler, whose code is plenty for the tests' small tables. A local
session and one small job: 41-48 s wall with neither, 23-26 s with the archive, 13-15 s with both, on this machine
under load (two runs each). The options go through `SPARK_SUBMIT_OPTS`, which Spark's launcher adds to the driver's
java command line only: the Kafka broker, the metastore and a standalone cluster's executors are untouched, and the
referee, on another Spark, has them removed (tests/referee). A missing, stale or foreign archive is ignored by the
JVM without a word: its CDS logging is off, since the driver's stdout may be a protocol channel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[1]
ARCHIVES = Path(os.environ.get("RECLUSTER_VENV", ROOT / ".venv")) / "spark-archive"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM otherwise prints a warning on stdout when it cannot use the archive."""
TRAINING_SECONDS = 12


def archive_key(*class_paths: Path) -> str:
    """What a class archive depends on: the Java that dumps and maps it, and the jars its classes come from."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    jars = [f"{folder}/{name}" for folder in class_paths for name in sorted(os.listdir(folder))]
    return hashlib.sha256("\n".join([java, *jars]).encode()).hexdigest()[:16]


def keep_archive(dumped: Path, path: Path) -> None:
    """Move a JVM's dumped archive into place, whole or absent: a concurrent run never maps half a file."""
    if not dumped.exists():
        raise RuntimeError(f"the JVM dumped no class archive at {dumped}")
    shutil.move(dumped, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)


def archive_path() -> Path:
    """The archive of this Java and this pyspark: both change the classes, and the JVM checks the class path."""
    return ARCHIVES / f"driver-{archive_key(Path(pyspark.__file__).parent / 'jars')}.jsa"


def build_archive(path: Path) -> None:
    """Dump the classes a short `recluster demo` loaded into `path` (about 25 s, once per Java and pyspark)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="recluster-archive-") as work:
        dumped = Path(work) / "driver.jsa"
        environment = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={dumped} {QUIET}"}
        command = [sys.executable, "-m", "recluster.cli", "demo", "--path", str(Path(work) / "demo")]
        command += ["--seconds", str(TRAINING_SECONDS), "--interval", "1", "--set", "spark.master=local[1]"]
        print(f"dumping the Spark driver's classes into {path} (once per Java and pyspark)", file=sys.stderr)
        done = subprocess.run(command, env=environment, cwd=work, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"recluster demo, run to dump the driver's classes, failed:\n{done.stderr[-3000:]}")
        keep_archive(dumped, path)


def start_drivers_fast() -> str:
    """Build the archive when missing and set `SPARK_SUBMIT_OPTS` to use it and the quick compiler, for this process
    and its children; returns the option string (empty without Java)."""
    if shutil.which("java") is None:
        return ""  # no JVM at all: the service fixtures say so, each in its own words
    path = archive_path()
    if not path.exists():
        build_archive(path)
    options = f"-XX:SharedArchiveFile={path} -XX:TieredStopAtLevel=1 {QUIET}"
    os.environ["SPARK_SUBMIT_OPTS"] = options
    return options


__all__ = ["QUIET", "archive_key", "archive_path", "build_archive", "keep_archive", "start_drivers_fast"]
