"""The standalone Hive Metastore 3.1.3 for the discovery tests: one Thrift server on a loopback port, its catalog on
embedded Derby under a work folder (`./dev metastore` copies its jars from Maven Central with the pom beside this
file into .venv/metastore/jars). Spark's built-in Hive client (`spark.sql.catalogImplementation=hive`,
`spark.hadoop.hive.metastore.uris`) talks to it: the referee registers Delta tables in it, recluster finds them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from xml.sax.saxutils import escape

from tests.helpers import wait_for
from tests.spark_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("RECLUSTER_VENV", ROOT / ".venv"))
METASTORE_JARS = Path(os.environ.get("RECLUSTER_METASTORE_JARS", VENV / "metastore" / "jars"))
PR_SET_PDEATHSIG = 1
JVM = ["-Xms64m", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
SERVER_SETTINGS = {
    # What HiveMetaStore 3.1.3 needs on embedded Derby without schematool (found by trial, issue 44)
    "datanucleus.schema.autoCreateAll": "true",
    "metastore.schema.verification": "false",
    "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
    "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
}


def metastore_missing() -> str | None:
    """Why the Hive Metastore cannot start here, or None."""
    if shutil.which("java") is None:
        return "no java on PATH: the Hive Metastore needs a JRE"
    if not any(METASTORE_JARS.glob("hive-standalone-metastore-*.jar")):
        return f"no Hive Metastore jars in {METASTORE_JARS} (run ./dev metastore)"
    return None


class Metastore:
    """One HiveMetaStore whose Derby database and warehouse live under `work`."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.warehouse = work / "warehouse"
        self.log = work / "metastore.log"
        conf = work / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        settings = {
            **SERVER_SETTINGS,
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={work / 'derby'};create=true",
            "metastore.warehouse.dir": str(self.warehouse),
            "metastore.thrift.port": str(self.port),
        }
        (conf / "metastore-site.xml").write_text(
            "<configuration>\n"
            + "".join(
                f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                for k, v in settings.items()
            )
            + "</configuration>\n"
        )
        self.classpath = f"{conf}{os.pathsep}{METASTORE_JARS / '*'}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def spark_conf(self) -> dict[str, str]:
        """What a Spark session needs to use this metastore as its catalog."""
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": self.uri,
            "spark.sql.warehouse.dir": str(self.warehouse),
        }

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                ["java", *JVM, "-cp", self.classpath, "org.apache.hadoop.hive.metastore.HiveMetaStore"],
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.work,
                preexec_fn=_die_with_parent,
            )
        wait_for(self._accepts, f"the Hive Metastore on port {self.port} (log: {self.log})", self.process, timeout=180)

    def _accepts(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)
            self.process = None


def _die_with_parent() -> None:
    """In the metastore's process before Java starts: stopped (SIGTERM) when the test run that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
