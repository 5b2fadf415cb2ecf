"""End to end on a real Kubernetes cluster (`./dev k8s up`, docs/kubernetes.md#a-local-cluster): k8s/overlays/local
applied with `kubectl apply -k`, the driver pod reclustering an S3 table (moto) that a writer outside the cluster
appends to, its merges running as Spark tasks in executor pods; then the driver pod deleted mid-merge, an executor
pod killed mid-merge, SIGTERM, and the Deployment scaled to 0 and back. After each, the table holds exactly the rows
appended (count plus an order-independent hash) and no table version was decided by two runs.

The pods reach S3 through the fault front (tests/faults/front.py) on the node's address, which delays each data
file PUT by MERGE_WRITE_SECONDS: the writer appends straight to moto, so a data PUT through the front is a merge
writing its output, and the kills land while one is in flight. Runs with `./dev k8s test` (marker k8s_cluster)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.faults.front import FaultFront
from tests.faults.plan import FaultKind, FaultRule, Target
from tests.helpers import append_clustered, http_get, row_multiset
from tests.k8s_cluster import (
    DRIVER,
    EXECUTORS,
    LOCAL_OVERLAY,
    NAMESPACE,
    NODE_IP,
    ROOT,
    apply,
    cluster_ready,
    is_ready,
    kubectl,
    kubectl_command,
    kubectl_json,
    logs,
    pod_problem,
    pods,
    service_url,
    wait_ready,
    wait_until,
)
from tests.s3_server import S3Server, moto_server, s3_environment

pytestmark = [
    pytest.mark.k8s_cluster,
    pytest.mark.needs_services,
    pytest.mark.slow,
    pytest.mark.xdist_group("k8s_cluster"),  # one cluster, one namespace: every test here on one worker
]

TABLE = "s3://recluster-local/events"
"""The table k8s/overlays/local/config.yaml lists."""
SEED = 20261128
ROWS_PER_APPEND = 20_000
MERGE_WRITE_SECONDS = 3.0
CHECKPOINT_VOLUME = "recluster-local-checkpoint"
TASK_LINE = re.compile(r"Running task (\d+)\.(\d+) in stage (\d+)\.(\d+) \(TID (\d+)\)")
FINISHED_LINE = re.compile(r"Finished task \S+ in stage \S+ \(TID (\d+)\)")


@pytest.fixture(scope="module")
def k8s_cluster() -> None:
    """The local cluster (not conftest's `cluster`, the Spark standalone one)."""
    cluster_ready()


@pytest.fixture(scope="module")
def storage(k8s_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, FaultFront]]:
    """moto on loopback for the writer and the checks, the fault front on the node's address for the pods."""
    work = tmp_path_factory.mktemp("k8s-s3")
    with moto_server(work) as server, FaultFront(server.endpoint, work / "front.log", host=NODE_IP) as front:
        server.client().create_bucket(Bucket=TABLE.split("/")[2])
        yield server, front


class Writer:
    """Appends random keys to the table from outside the cluster, straight to moto; remembers every row."""

    def __init__(self, server: S3Server) -> None:
        self.options = server.options()
        self.rng = np.random.default_rng(SEED)
        self.appended: list[pa.Table] = []

    def append(self) -> int:
        batch = len(self.appended)
        data = pa.table(
            {
                "k": pa.array(self.rng.integers(0, 10**9, ROWS_PER_APPEND), pa.int64()),
                "batch": pa.array([batch] * ROWS_PER_APPEND, pa.int32()),
            }
        )
        self.appended.append(append_clustered(TABLE, data, self.options))
        return self.table().version()

    def table(self) -> DeltaTable:
        return DeltaTable(TABLE, storage_options=self.options)

    def assert_rows_exact(self, when: str) -> None:
        got = row_multiset(self.table().to_pyarrow_table())
        want = row_multiset(pa.concat_tables(self.appended))
        assert got == want, f"{when}: the table holds {got[0]} rows, {want[0]} were appended (or not the same rows)"

    def recluster_commits(self) -> list[dict[str, Any]]:
        return [entry for entry in self.table().history() if entry.get("recluster.producer") == "recluster"]

    def assert_no_version_decided_twice(self) -> None:
        """Every table version the job planned merges at was decided by one run: a driver restarted from its
        checkpoint does not decide again what a killed one had committed."""
        runs: dict[str, set[str]] = {}
        for commit in self.recluster_commits():
            runs.setdefault(commit["recluster.readVersion"], set()).add(commit["recluster.runId"])
        twice = {version: ids for version, ids in runs.items() if len(ids) > 1}
        assert not twice, f"versions decided by more than one run: {twice}"

    def work_until(self, condition: Callable[[], Any], what: str, timeout: float = 420) -> Any:
        """Append a batch every few seconds until `condition` holds (the writer keeps writing meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            self.append()
            for _ in range(8):
                found = condition()
                if found:
                    return found
                time.sleep(0.5)
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not after {timeout:.0f}s of appends", pytrace=False)


def deploy(server: S3Server, front: FaultFront, volume: Path) -> None:
    """What docs/kubernetes.md tells a user: the namespace, the storage Secret, `kubectl apply -k` of the overlay.
    The cluster's storage for the checkpoint claim is a hostPath volume, made here as a provisioner would."""
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300)
    kubectl("delete", "persistentvolume", CHECKPOINT_VOLUME, "--ignore-not-found", "--wait=true")
    volume.mkdir()
    volume.chmod(0o777)  # the driver runs as uid 10001; a hostPath volume is not chowned to fsGroup
    kubectl("apply", "-f", "-", stdin=_checkpoint_volume(volume))
    kubectl("create", "namespace", NAMESPACE)
    secret = {**s3_environment(server), "AWS_ENDPOINT_URL": front.endpoint}
    literals = [f"--from-literal={key}={value}" for key, value in secret.items()]
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "recluster-storage", *literals)
    apply(LOCAL_OVERLAY)


def _checkpoint_volume(path: Path) -> str:
    return f"""apiVersion: v1
kind: PersistentVolume
metadata:
  name: {CHECKPOINT_VOLUME}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {{namespace: {NAMESPACE}, name: recluster-checkpoint}}
  hostPath: {{path: {path}, type: Directory}}
"""


def status() -> dict[str, Any] | None:
    """The job's /status through the recluster-http Service; None while no ready driver is behind it."""
    code, body = http_get(service_url("recluster-http", "/status"), timeout=5)
    if code != 200:
        return None
    found: dict[str, Any] = json.loads(body)
    return found


def merges() -> int:
    found = status()
    return sum(t["totals"]["merges"] for t in found["tables"]) if found else -1


def data_puts(front: FaultFront) -> int:
    """Data file PUTs the pods sent: merge outputs (the writer does not go through the front)."""
    return sum(count for target, count in front.requests().items() if target.startswith("PUT") and "data" in target)


def merge_in_flight(front: FaultFront) -> Callable[[], bool]:
    before = data_puts(front)
    return lambda: data_puts(front) > before


def executor_tasks() -> dict[str, tuple[list[tuple[int, ...]], set[int]]]:
    """Per executor pod: the tasks it started (task, attempt, stage, stage attempt, TID) and the TIDs it finished."""
    found = {}
    for pod in pods(EXECUTORS):
        text = logs(pod["metadata"]["name"])
        started = [tuple(map(int, m.groups())) for m in TASK_LINE.finditer(text)]
        found[pod["metadata"]["name"]] = (started, {int(m.group(1)) for m in FINISHED_LINE.finditer(text)})
    return found


def wait_driver_gone(name: str) -> None:
    wait_until(lambda: name not in {p["metadata"]["name"] for p in pods(DRIVER)}, f"driver pod {name} gone", 180)


def test_recluster_on_a_real_cluster(storage: tuple[S3Server, FaultFront], tmp_path: Path) -> None:
    server, front = storage
    front.plan(SEED, FaultRule(FaultKind.LATENCY, Target.DATA, ("PUT",), latency_seconds=MERGE_WRITE_SECONDS))
    writer = Writer(server)
    for _ in range(3):
        writer.append()
    deploy(server, front, tmp_path / "checkpoint-volume")
    try:
        check_the_deployment(writer, front)
    finally:  # the driver and its executors stop (the machine is shared), without waiting: deploy() waits for it
        kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        kubectl("delete", "persistentvolume", CHECKPOINT_VOLUME, "--ignore-not-found", "--wait=false")


def check_the_deployment(writer: Writer, front: FaultFront) -> None:
    """The steps of docs/kubernetes.md#the-end-to-end-test, on the deployed overlay."""
    # Readiness comes only once the table is loaded: until then the driver answers /readyz 503, and the Service
    # that serves the status page has no address.
    answers: list[int] = []

    def ready_driver() -> dict[str, Any] | None:
        # The Service's addresses read before the pod: a pod not ready now was not ready then either (read the other
        # way round, a pod that became ready in between looked routed while not ready).
        endpoints = kubectl_json("-n", NAMESPACE, "get", "endpoints", "recluster-http")
        routed = [a for subset in endpoints.get("subsets", []) for a in subset.get("addresses", [])]
        for pod in pods(DRIVER):
            if is_ready(pod):
                return pod
            ip = pod.get("status", {}).get("podIP")
            if ip:
                assert not routed, f"the status Service routes to a driver that is not ready: {routed}"
                code, _ = http_get(f"http://{ip}:8080/readyz", timeout=5)
                answers.append(code)
        return None

    driver = wait_until(ready_driver, "the driver pod ready", 600, lambda: "; ".join(map(pod_problem, pods(DRIVER))))
    assert 503 in answers, f"the driver never answered /readyz 503 before it was ready: {answers}"
    first = wait_until(status, "/status through the recluster-http Service", 60)
    assert first["ready"] and [t["table"] for t in first["tables"]] == [TABLE]
    assert first["tables"][0]["version"] >= 2, first  # the three appends made before the job started

    # Merges run as Spark tasks in the executor pods, and the status page and /metrics through the Service count them.
    writer.work_until(lambda: merges() > 0, "a merge committed by the job")
    assert len(executor_tasks()) == 2, f"executor pods: {sorted(executor_tasks())}"
    wait_until(
        lambda: any(finished for _, finished in executor_tasks().values()),
        "an executor pod logging a finished task",
        120,
        lambda: str(executor_tasks()),
    )
    code, metrics = http_get(service_url("recluster-http", "/metrics"))
    assert code == 200
    merged = re.search(rf'^recluster_merges_total{{table="{TABLE}"}} (\S+)$', metrics, re.MULTILINE)
    assert merged and float(merged.group(1)) > 0, metrics[:2000]
    writer.assert_rows_exact("with the job running")

    # The driver pod deleted mid-merge (no grace): the Deployment's new pod resumes from the checkpoint.
    writer.work_until(merge_in_flight(front), "a merge writing its output")
    name = driver["metadata"]["name"]
    kubectl("-n", NAMESPACE, "delete", "pod", name, "--grace-period=0", "--force")
    wait_driver_gone(name)
    writer.assert_rows_exact("after the driver pod was deleted mid-merge")
    driver = wait_ready(DRIVER, "the driver pod after the deletion")
    assert driver["metadata"]["name"] != name
    committed = len(writer.recluster_commits())
    writer.work_until(lambda: len(writer.recluster_commits()) > committed, "a merge committed by the new driver")
    writer.assert_rows_exact("after the restarted driver merged")
    writer.assert_no_version_decided_twice()

    # An executor pod killed mid-merge: Spark replaces it and reruns the task.
    writer.work_until(merge_in_flight(front), "a merge writing its output")
    running = {pod: {t[4] for t in started} - finished for pod, (started, finished) in executor_tasks().items()}
    victim = next((pod for pod, unfinished in running.items() if unfinished), None)
    assert victim, f"no executor runs a task while a merge writes: {running}"
    kubectl("-n", NAMESPACE, "delete", "pod", victim, "--grace-period=0", "--force")
    writer.assert_rows_exact("after an executor pod was killed mid-merge")
    committed = len(writer.recluster_commits())
    writer.work_until(lambda: len(writer.recluster_commits()) > committed, "a merge committed after the executor kill")
    executors = wait_until(lambda: len(pods(EXECUTORS)) == 2 and pods(EXECUTORS), "a replacement executor", 300)
    assert victim not in {pod["metadata"]["name"] for pod in executors}
    reruns = [t for started, _ in executor_tasks().values() for t in started if t[1] > 0 or t[3] > 0]
    assert reruns, "no task attempt was rerun after the executor was killed"
    writer.assert_rows_exact("after the merges that followed the executor kill")
    writer.assert_no_version_decided_twice()

    # SIGTERM (a plain `kubectl delete pod`): the job stops gracefully, well within terminationGracePeriodSeconds.
    name = driver["metadata"]["name"]
    grace = kubectl_json("-n", NAMESPACE, "get", "pod", name)["spec"]["terminationGracePeriodSeconds"]
    follower = subprocess.Popen(
        [*kubectl_command(), "-n", NAMESPACE, "logs", "-f", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    started = time.monotonic()
    kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=true", timeout=grace + 60)
    stopped_after = time.monotonic() - started
    output = follower.communicate(timeout=60)[0].decode(errors="replace")
    assert "stopped (SIGTERM); the checkpoint holds the position" in output, output[-3000:]
    assert stopped_after < grace, f"the driver took {stopped_after:.0f}s to stop (grace {grace}s)"
    writer.assert_rows_exact("after SIGTERM")

    # Scaled to 0 (no driver, and its executors go with it) while the writer goes on, then back to 1.
    wait_ready(DRIVER, "the driver pod after SIGTERM")
    kubectl("-n", NAMESPACE, "scale", "deployment/recluster", "--replicas=0")
    wait_until(lambda: not pods(DRIVER) and not pods(EXECUTORS), "no driver and no executor pods at 0 replicas", 300)
    for _ in range(2):
        writer.append()
    kubectl("-n", NAMESPACE, "scale", "deployment/recluster", "--replicas=1")
    wait_ready(DRIVER, "the driver pod after scaling back to 1")
    committed = len(writer.recluster_commits())
    version = writer.work_until(
        lambda: len(writer.recluster_commits()) > committed, "a merge committed after scaling back to 1"
    )
    assert version
    writer.assert_rows_exact("at the end")
    writer.assert_no_version_decided_twice()


def test_a_manifest_that_does_not_apply_fails_with_one_line(k8s_cluster: None, tmp_path: Path) -> None:
    """The local overlay with one invalid field, in a namespace of its own: the apply fails with kubectl's line."""
    copy = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", copy)
    overlay = copy / "overlays" / "local"
    for name, old, new in (
        ("deployment-patch.yaml", "replicas: 1", "replicas: one"),
        ("kustomization.yaml", f"namespace: {NAMESPACE}", "namespace: recluster-broken"),
    ):
        text = (overlay / name).read_text(encoding="utf-8")
        assert old in text
        (overlay / name).write_text(text.replace(old, new), encoding="utf-8")
    kubectl("create", "namespace", "recluster-broken")
    try:
        with pytest.raises(pytest.fail.Exception) as failure:
            apply(overlay)
    finally:
        kubectl("delete", "namespace", "recluster-broken", "--wait=false")
    message = str(failure.value)
    assert message.startswith("`kubectl apply -k ") and "replicas" in message and "\n" not in message, message


def test_a_missing_image_fails_with_one_line(k8s_cluster: None) -> None:
    kubectl("-n", "default", "delete", "pod", "missing-image", "--ignore-not-found", "--wait=true")
    kubectl("-n", "default", "run", "missing-image", "--image=localhost/recluster:missing", "--image-pull-policy=Never")
    try:
        with pytest.raises(pytest.fail.Exception) as failure:
            wait_ready("run=missing-image", "the pod of a missing image", timeout=120, namespace="default")
        message = str(failure.value)
        assert "ErrImageNeverPull" in message and "\n" not in message, message
    finally:
        kubectl("-n", "default", "delete", "pod", "missing-image", "--ignore-not-found", "--wait=false")
