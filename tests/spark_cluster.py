"""A Spark standalone cluster on 127.0.0.1 from the pyspark wheel's `bin/spark-class` (issue 21): a master and N
workers, started without the caller's cloud credentials (AWS_*, GOOGLE_*, AZURE_*: what the driver has is not the
workers'), Python workers on this interpreter. Shared by tests/test_cluster.py and bench/cluster_bench.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"
"""The main class of an executor JVM (a child of its worker)."""


@dataclass(frozen=True)
class Cluster:
    master: str
    master_ui: str
    worker_uis: tuple[str, ...]
    processes: tuple[subprocess.Popen[bytes], ...]
    """The master first, then the workers in order."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ui_json(url: str) -> Any:
    """A master's or worker's web UI status as JSON."""
    with urllib.request.urlopen(url + "/json/", timeout=10) as response:
        return json.loads(response.read())


def alive_workers(master_ui: str) -> int:
    """Workers ALIVE on the master; 0 while its UI is not up. A master starting answers every path with its HTML
    page until the `/json` handler is attached (seen in CI): not JSON yet counts as not up."""
    try:
        return sum(w.get("state") == "ALIVE" for w in ui_json(master_ui).get("workers", []))
    except (OSError, ValueError):
        return 0


@contextmanager
def standalone_cluster(
    logs: Path,
    workers: int = 2,
    memory: str = "1500m",
    timeout: float = 90,
    spark_home: Path | None = None,
    python: str = sys.executable,
) -> Iterator[Cluster]:
    """Master and `workers` workers (1 core, `memory` each), logs and work dirs under `logs`; stopped on exit.
    `spark_home` and `python`: another Spark's (the Delta Spark referee's pyspark 4.2), else this interpreter's."""
    if spark_home is None:
        import pyspark

        spark_home = Path(pyspark.__file__).parent
    spark_class = str(spark_home / "bin" / "spark-class")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env.update({"SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"})
    port, ui = free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []
    logs.mkdir(parents=True, exist_ok=True)

    def start(name: str, *args: str) -> None:
        with (logs / f"{name}.log").open("wb") as out:
            processes.append(subprocess.Popen([spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env=env))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))  # fmt: skip
        worker_uis = []
        for index in range(workers):
            worker_ui = free_port()
            worker_uis.append(f"http://127.0.0.1:{worker_ui}")
            start(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                  "--memory", memory, "--webui-port", str(worker_ui), "--work-dir", str(logs / f"work-{index}"),
                  master)  # fmt: skip
        master_ui = f"http://127.0.0.1:{ui}"
        deadline = time.monotonic() + timeout
        while alive_workers(master_ui) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} workers did not register with {master} within {timeout:.0f} s: {logs}")
            time.sleep(0.2)
        yield Cluster(master, master_ui, tuple(worker_uis), tuple(processes))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


CLUSTER_DRIVER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "1g",
}
"""A driver the executors reach on 127.0.0.1, executors of 1 GB heap."""


def cluster_config(cluster: Cluster, directory: Path, target_rows: int, target_file_bytes: int | None = None) -> Path:
    """A settings file for the cluster: its master, CLUSTER_DRIVER_CONF, merges in Spark."""
    config = directory / "config.yaml"
    file_bytes = f", target_file_bytes: {target_file_bytes}" if target_file_bytes else ""
    config.write_text(
        "spark:\n"
        f"  master: {cluster.master}\n"
        f"  conf: {json.dumps(CLUSTER_DRIVER_CONF)}\n"
        "merge: {placement: spark, in_process_max_bytes: 0}\n"
        f"clustering: {{target_rows: {target_rows}{file_bytes}}}\n"
    )
    return config


def executor_tree_rss(workers: Collection[int] | None = None) -> dict[int, int]:
    """Resident bytes of each executor JVM running on this machine (only those started by the worker JVMs of pids
    `workers`, when given: another cluster may run beside) plus its descendants (the Python workers), by the JVM's
    pid, read from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    executors = []
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            rss[pid] = int(fields[21]) * page
            ours = workers is None or int(fields[1]) in workers
            if ours and EXECUTOR_MAIN.encode() in (entry / "cmdline").read_bytes():
                executors.append(pid)
        except (OSError, ValueError, IndexError):
            continue

    def tree(pid: int) -> int:
        return rss.get(pid, 0) + sum(tree(child) for child in children.get(pid, []))

    return {pid: tree(pid) for pid in executors}
