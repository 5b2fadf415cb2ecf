"""Settings of the streaming job's surroundings: what triggers it and where its checkpoint lives (stream), Kafka,
Spark on Kubernetes, and its HTTP endpoints. Sections of `settings.Settings`.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from recluster.settings_input import GIB, Section


class KafkaSettings(Section):
    """The Kafka commit-event source and the metrics topic (docs/streaming.md)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    """The Kafka brokers, `host:port[,host:port...]`."""
    commits_topic: str = "recluster.commits"
    """The topic of commit events (`stream.source: kafka`)."""
    metrics_topic: str | None = None
    """Where one metrics record per touched table goes after each micro-batch; None: not published."""
    starting_offsets: Literal["earliest", "latest"] = "latest"
    """Where a new checkpoint starts reading the commits topic."""
    max_events_per_batch: int = Field(10_000, ge=1)
    """Commit events one micro-batch reads at most."""
    metrics_buffer_records: int = Field(10_000, ge=1)
    """Records kept while the broker is unreachable; the oldest are dropped (and counted) beyond this."""
    client_options: dict[str, str] = Field(default_factory=dict)
    """Extra kafka-python client settings (security_protocol, sasl_mechanism, ...)."""
    reader: Literal["python", "spark"] = "python"
    """What reads the commits topic. `python`: recluster's own source (kafka-python, no jars). `spark`: Spark's
    Kafka source, which needs `spark-sql-kafka-0-10` on the classpath (`spark.conf` `spark.jars.packages` or
    `spark.jars`); `client_options` are handed to it in the Java client's names (docs/kafka.md)."""


def default_state_dir() -> str:
    """Where the job keeps its checkpoint and history by default: `$XDG_STATE_HOME/recluster`, else
    `~/.local/state/recluster` — never the current directory of a one-off command."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "recluster")


class StreamSettings(Section):
    source: Literal["delta-log", "kafka"] = "delta-log"
    """What triggers the job: polling the watched tables' Delta logs, or commit events on Kafka."""
    checkpoint_location: str = Field(default_factory=lambda: os.path.join(default_state_dir(), "checkpoint"))
    """The Spark checkpoint of the job; the history table lives under it unless set on its own. Default:
    `$XDG_STATE_HOME/recluster/checkpoint`, else `~/.local/state/recluster/checkpoint` (never the working directory)."""
    trigger_interval_seconds: float = Field(1.0, gt=0)
    """The streaming query's processing-time trigger."""
    starting_version: Literal["latest", "earliest"] | int = "latest"
    """Where the job starts reading each log on its first start (a checkpoint then keeps its offsets): `latest`,
    `earliest` or a version number."""
    max_commits_per_batch: int = Field(1000, ge=1)
    """Commits one micro-batch reads at most."""
    max_tasks_per_batch: int = Field(4, ge=1)
    """Merge tasks one micro-batch runs at most; the rest is pending for the next."""
    max_bytes_per_batch: int = Field(8 * GIB, gt=0)
    """Input bytes one micro-batch merges at most; the rest is pending for the next."""
    table_retry_seconds: float = Field(10.0, gt=0)
    """After a table's work fails (its error shown with the table), it is tried again after this long, doubled for
    each further failure in a row; the other tables go on meanwhile."""
    table_retry_max_seconds: float = Field(600.0, gt=0)
    """The longest wait before a failing table is tried again."""


class KubernetesSettings(Section):
    """Spark on Kubernetes (client mode: this process is the driver, executors are pods; docs/operations.md).

    When enabled, `recluster watch` derives the Spark master and the `spark.kubernetes.*`, driver and executor
    settings from this section (recluster/k8s.py); keys set in `spark.conf` still win over the derived ones.
    """

    enabled: bool = False
    """Run Spark on Kubernetes: derive the master and the `spark.kubernetes.*` settings from this section."""
    api_server: str = "https://kubernetes.default.svc"
    """The API server as seen from the driver pod; the Spark master becomes `k8s://<api_server>`."""
    namespace: str = "default"
    """Where executor pods are created: the driver pod's namespace."""
    container_image: str | None = None
    """Executor image: the driver's own image, so both run the same Python, pyspark and recluster."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Pull policy of the executor image."""
    service_account: str = "recluster"
    """Service account allowed to manage executor pods, services, config maps and volume claims."""
    driver_service: str = "recluster-driver"
    """Headless service selecting the driver pod; executors reach the driver at its DNS name."""
    driver_address: Literal["service", "pod_ip"] = "service"
    """How executors reach the driver: `service`, the headless service's DNS name; `pod_ip`, the driver pod's address
    from the POD_IP environment variable (downward API `status.podIP`), for a cluster without cluster DNS."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, part of the driver's host name."""
    driver_port: int = Field(7078, ge=1, le=65535)
    """`spark.driver.port`: executors connect to the driver here (the Service exposes it)."""
    block_manager_port: int = Field(7079, ge=1, le=65535)
    """`spark.driver.blockManager.port` (the Service exposes it)."""
    executor_instances: int = Field(2, ge=0)
    """Fixed number of executors when dynamic allocation is off."""
    dynamic_allocation: bool = False
    """Scale executors with the work (with shuffle tracking: no external shuffle service on Kubernetes)."""
    min_executors: int = Field(0, ge=0)
    """With dynamic allocation: the fewest executors."""
    max_executors: int = Field(4, ge=1)
    """With dynamic allocation: the most executors."""
    executor_cores: int = Field(1, ge=1)
    """Cores of each executor pod."""
    executor_memory: str = "2g"
    """Heap of each executor (`spark.executor.memory`)."""
    executor_pod_template_file: str | None = None
    """Executor pod template (security context, volumes, credentials): a path readable by the driver."""
    event_log_dir: str | None = None
    """Spark event log (for the history server) on durable storage; None: no event log."""

    @model_validator(mode="after")
    def _check(self) -> KubernetesSettings:
        if self.enabled and not self.container_image:
            raise ValueError("kubernetes.container_image is required when kubernetes.enabled is true")
        if self.min_executors > self.max_executors:
            raise ValueError("kubernetes.min_executors must not exceed kubernetes.max_executors")
        return self

    @property
    def driver_host(self) -> str:
        """The driver's DNS name: the headless service in the driver's namespace."""
        return f"{self.driver_service}.{self.namespace}.svc.{self.cluster_domain}"


class HttpSettings(Section):
    """The job's HTTP endpoints: /healthz, /readyz, /metrics (Prometheus), /status, and the status pages (`/`,
    `/tables/<name>`, `/api/tables`; jobs/health.py, jobs/pages.py)."""

    port: int | None = Field(None, ge=0, le=65535)
    """None: no HTTP server; 0: any free port."""
    host: str = "127.0.0.1"
    """Where the server binds: this machine only unless configured (a pod sets 0.0.0.0 for its probes)."""
    progress_timeout_seconds: float = Field(900.0, gt=0)
    """/healthz fails when the query made no progress for this long; must exceed the longest micro-batch."""
