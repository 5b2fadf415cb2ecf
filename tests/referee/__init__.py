"""Delta Spark as the referee (docs/guarantees.md): a client for tests/referee/server.py, which runs Delta Spark in its
own venv and JVM (`./dev referee` installs pyspark 4.2 there and Delta's jars from Maven Central with the pom
beside this file). The product never needs it."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("RECLUSTER_VENV", ROOT / ".venv"))
REFEREE_PYTHON = Path(os.environ.get("RECLUSTER_REFEREE_PYTHON", VENV / "referee" / "bin" / "python"))
REFEREE_JARS = Path(os.environ.get("RECLUSTER_REFEREE_JARS", VENV / "referee" / "jars"))
ARCHIVES = VENV / "referee" / "archive"


class RefereeError(RuntimeError):
    """Delta Spark refused a request: the message is its exception."""


def referee_missing() -> str | None:
    """Why the reference environment cannot start, or None."""
    if not REFEREE_PYTHON.exists():
        return f"no Delta Spark reference environment at {REFEREE_PYTHON} (run ./dev referee)"
    if not any(REFEREE_JARS.glob("delta-spark_*.jar")):
        return f"no Delta Spark jars in {REFEREE_JARS} (run ./dev referee)"
    return None


def referee_environment(
    work: Path,
    *,
    defaults: bool = False,
    driver_memory: str = "1g",
    master: str | None = None,
    conf: dict[str, str] | None = None,
    java_options: str | None = None,
) -> dict[str, str]:
    """The environment of a process of the referee's python that starts a session with `server.session`: with the
    tests' shortcuts (not `defaults`), its JVM maps the referee's class archive (`referee_java_options`)."""
    # SPARK_SUBMIT_OPTS: the tests' driver options (tests/driver_jvm.py) hold an archive of the other Spark's classes
    leave_out = ("PYSPARK_", "SPARK_HOME", "SPARK_SUBMIT_OPTS", "PYTHONPATH")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(leave_out)}
    options = java_options if java_options is not None else "" if defaults else referee_java_options()
    if options:
        environment["SPARK_SUBMIT_OPTS"] = options
    environment.update(PYSPARK_PYTHON=str(REFEREE_PYTHON), REFEREE_WORK=str(work), SPARK_LOCAL_IP="127.0.0.1")
    environment.update(REFEREE_DEFAULTS="1" if defaults else "0", REFEREE_DRIVER_MEMORY=driver_memory)
    environment.update(REFEREE_CONF=json.dumps(conf or {}))
    if master is not None:
        environment["REFEREE_MASTER"] = master
    return environment


class Referee:
    """One Delta Spark session for a whole pytest run; requests are serialized."""

    def __init__(
        self,
        work: Path,
        *,
        defaults: bool = False,
        driver_memory: str = "1g",
        master: str | None = None,
        conf: dict[str, str] | None = None,
        java_options: str | None = None,
    ) -> None:
        """`defaults`: Spark's and Delta's default settings (benchmarks) instead of the tests' shortcuts; `master`
        and `conf`: where it runs (a standalone cluster of the referee's own Spark) and extra Spark settings;
        `java_options`: the JVM's, instead of the class archive's."""
        self.work = work
        self._lock = threading.Lock()
        self._count = 0
        self._log = open(work / "referee.log", "wb")  # noqa: SIM115 (closed in stop)
        self._process = subprocess.Popen(
            [str(REFEREE_PYTHON), str(Path(__file__).with_name("server.py")), str(REFEREE_JARS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=work,
            env=referee_environment(
                work,
                defaults=defaults,
                driver_memory=driver_memory,
                master=master,
                conf=conf,
                java_options=java_options,
            ),
        )
        self.pid = self._process.pid
        ready = self._answer()
        self.version = ready["ready"]

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            tail = (self.work / "referee.log").read_text(errors="replace")[-3000:]
            raise RefereeError(f"the Delta Spark referee exited:\n{tail}")
        answer: dict[str, Any] = json.loads(line)
        if not answer["ok"]:
            raise RefereeError(answer["error"])
        return answer

    def request(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            return self._answer()

    def sql(self, statement: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.request(op="sql", sql=statement)["rows"]
        return rows

    def _out(self, stem: str) -> Path:
        self._count += 1
        return self.work / f"{stem}-{self._count}.parquet"

    def read(self, table: str | Path, **options: str) -> pa.Table:
        """The table's rows as Delta Spark reads them (deletion vectors, column mapping, type widening applied)."""
        out = self._out("read")
        self.request(op="read", table=str(table), out=str(out), options=options)
        return pq.read_table(out)

    def query(self, statement: str) -> pa.Table:
        """A query's rows."""
        out = self._out("query")
        self.request(op="read", sql=statement, out=str(out))
        return pq.read_table(out)

    def scan(self, statement: str) -> tuple[list[dict[str, Any]], int]:
        """A query's rows and the number of files its scans read after data skipping."""
        answer = self.request(op="scan", sql=statement)
        return answer["rows"], int(answer["files"])

    def stream(self, table: str | Path, checkpoint: Path, sink: Path, **options: str) -> pa.Table:
        """A Delta streaming read of everything new since the checkpoint, appended to `sink`; all the sink holds."""
        self.request(op="stream", table=str(table), checkpoint=str(checkpoint), out=str(sink), options=options)
        files = sorted(sink.glob("*.parquet"))
        return pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})

    def history(self, table: str | Path) -> list[dict[str, Any]]:
        return self.sql(f"DESCRIBE HISTORY delta.`{table}`")

    def stop(self) -> None:
        try:
            assert self._process.stdin is not None
            self._process.stdin.write(b'{"op": "stop"}\n')
            self._process.stdin.close()
            self._process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        self._log.close()


TRAINING = (
    "CREATE TABLE {t} (a BIGINT, b STRING, ts TIMESTAMP) USING delta CLUSTER BY (a) TBLPROPERTIES ("
    "'delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true', "
    "'delta.enableRowTracking' = 'true', 'delta.columnMapping.mode' = 'name')",
    "INSERT INTO {t} SELECT id, string(id), timestamp_seconds(id) FROM range(0, 2000)",
    "DELETE FROM {t} WHERE a % 7 = 3",
    "UPDATE {t} SET b = 'u' WHERE a % 5 = 1",
    "MERGE INTO {t} AS x USING (SELECT id AS a FROM range(0, 100)) AS s ON x.a = s.a "
    "WHEN MATCHED THEN UPDATE SET b = 'm' WHEN NOT MATCHED THEN INSERT (a, b, ts) VALUES (s.a, 'n', NULL)",
    "OPTIMIZE {t}",
    "DESCRIBE HISTORY {t}",
    "VACUUM {t} RETAIN 168 HOURS",
)
"""Statements whose classes the referee's archive holds: the kinds the tests run, on a table with their features."""


@functools.cache
def referee_archive_path() -> Path:
    """The archive of this Java, the referee's pyspark and Delta's jars (the JVM checks its class path); worked out
    once a process (the key runs `java -version`, itself a JVM start)."""
    from tests.driver_jvm import archive_key

    spark_jars = next(REFEREE_PYTHON.parent.parent.glob("lib/python3*/site-packages/pyspark/jars"))
    return ARCHIVES / f"referee-{archive_key(spark_jars, REFEREE_JARS)}.jsa"


def build_referee_archive(path: Path) -> None:
    """Dump the classes a referee loads running TRAINING (and a read, a scan and a stream) into `path`."""
    from tests.driver_jvm import QUIET, keep_archive
    from tests.helpers import descendants, running, wait_for

    with tempfile.TemporaryDirectory(prefix="recluster-referee-archive-") as folder:
        work = Path(folder)
        dumped = work / "referee.jsa"
        referee = Referee(work, java_options=f"-XX:ArchiveClassesAtExit={dumped} {QUIET}")
        try:
            table = work / "t"
            for statement in TRAINING:
                referee.sql(statement.format(t=f"delta.`{table}`"))
            referee.read(table)
            referee.scan(f"SELECT count(*) FROM delta.`{table}` WHERE a < 10")
            referee.stream(table, work / "checkpoint", work / "sink")
        finally:
            jvms = descendants(referee.pid)
            referee.stop()
        # the JVM writes the archive as it exits, after the python that started it
        wait_for(lambda: not any(map(running, jvms)), "the referee's JVM to write its class archive", timeout=120)
        for stale in path.parent.glob("referee-*.jsa"):
            stale.unlink()
        keep_archive(dumped, path)


def referee_java_options() -> str:
    """The referee JVM's options: its class archive, built on first use (about a minute, once per Java and set of
    jars; one pytest-xdist worker builds while the others wait). A referee JVM starts about 16 times a run; its
    start took 0.68x the CPU with the archive, a saving the whole suite's figures have not shown yet
    (docs/getting-started.md#test-time; tests/driver_jvm.py does the same for our drivers)."""
    from tests.driver_jvm import QUIET

    ARCHIVES.mkdir(parents=True, exist_ok=True)
    path = referee_archive_path()
    with open(ARCHIVES / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if not path.exists():
            build_referee_archive(path)
    return f"-XX:SharedArchiveFile={path} {QUIET}"


__all__ = [
    "REFEREE_JARS",
    "REFEREE_PYTHON",
    "Referee",
    "RefereeError",
    "referee_environment",
    "referee_java_options",
    "referee_missing",
]
