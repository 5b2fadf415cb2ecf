"""Spark on Kubernetes settings derived from the `kubernetes:` section (docs/operations.md).

The job runs in client mode: the `recluster watch` process in the driver pod is the Spark driver and
executors are pods it creates through the API server. Executors reach the driver through a headless
service at fixed ports, so the driver's address and ports come from the settings, not from Spark's defaults
(random ports cannot be listed in a Service). Everything here is pure: settings in, Spark conf out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from recluster.settings import Settings, SettingsError
from recluster.spark.session import LOG4J_CONFIG

POD_NAME_ENV = "POD_NAME"
"""Set from the downward API (metadata.name) in the driver Deployment: executors get the driver pod as their
owner, so Kubernetes deletes them when the driver pod goes away."""
POD_IP_ENV = "POD_IP"
"""Set from the downward API (status.podIP) in the driver Deployment: the driver's address with
`kubernetes.driver_address: pod_ip` (no cluster DNS)."""


def driver_host(settings: Settings, environ: Mapping[str, str]) -> str:
    """Where executors reach the driver: the headless service's DNS name, or the pod's own address."""
    k8s = settings.kubernetes
    if k8s.driver_address == "service":
        return k8s.driver_host
    pod_ip = environ.get(POD_IP_ENV)
    if not pod_ip:
        raise SettingsError(f"kubernetes.driver_address=pod_ip needs the {POD_IP_ENV} environment variable")
    return pod_ip


def kubernetes_spark_conf(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark conf for a client-mode driver in a pod: master, image, namespace, driver address, executors."""
    k8s = settings.kubernetes
    environ = os.environ if environ is None else environ
    conf = {
        "spark.master": f"k8s://{k8s.api_server}",
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": k8s.namespace,
        "spark.kubernetes.container.image": k8s.container_image or "",
        "spark.kubernetes.container.image.pullPolicy": k8s.image_pull_policy,
        "spark.kubernetes.authenticate.driver.serviceAccountName": k8s.service_account,
        "spark.driver.host": driver_host(settings, environ),
        "spark.driver.bindAddress": "0.0.0.0",
        # Spark 4 gives executors the driver's bind address (0.0.0.0 here) unless told to use spark.driver.host.
        "spark.kubernetes.executor.useDriverPodIP": "false",
        "spark.driver.port": str(k8s.driver_port),
        "spark.driver.blockManager.port": str(k8s.block_manager_port),
        "spark.blockManager.port": str(k8s.block_manager_port),
        "spark.executor.cores": str(k8s.executor_cores),
        "spark.executor.memory": k8s.executor_memory,
        # recluster's log4j config with the executors' task lines on: `kubectl logs` of an executor pod shows them.
        "spark.executor.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG} "
        "-Drecluster.executor.tasks.level=info",
    }
    if k8s.dynamic_allocation:
        conf |= {
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": str(k8s.min_executors),
            "spark.dynamicAllocation.maxExecutors": str(k8s.max_executors),
        }
    else:
        conf["spark.executor.instances"] = str(k8s.executor_instances)
    if k8s.executor_pod_template_file:
        conf["spark.kubernetes.executor.podTemplateFile"] = k8s.executor_pod_template_file
    if k8s.event_log_dir:
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": k8s.event_log_dir,
            # A streaming job runs for months: roll the event log instead of growing one file forever.
            "spark.eventLog.rolling.enabled": "true",
        }
    pod_name = environ.get(POD_NAME_ENV)
    if pod_name:
        conf["spark.kubernetes.driver.pod.name"] = pod_name
    return conf


def with_kubernetes(settings: Settings, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings with the derived Spark master and conf when `kubernetes.enabled`; unchanged otherwise.

    Keys the user set in `spark.conf` win over the derived ones (an escape hatch for anything not modelled).
    """
    if not settings.kubernetes.enabled:
        return settings
    conf = kubernetes_spark_conf(settings, environ)
    master = conf.pop("spark.master")
    spark = settings.spark.model_copy(update={"master": master, "conf": {**conf, **settings.spark.conf}})
    return settings.model_copy(update={"spark": spark})


def prepare_event_log_dir(settings: Settings) -> None:
    """Spark refuses to start when a local event log directory is missing: create it (object stores need not)."""
    directory = settings.kubernetes.event_log_dir if settings.kubernetes.enabled else None
    if not directory:
        return
    if directory.startswith("file:"):
        directory = directory.removeprefix("file:").removeprefix("//")
    elif "://" in directory:
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SettingsError(f"cannot create kubernetes.event_log_dir {directory}: {error.strerror}") from None
