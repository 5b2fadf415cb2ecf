"""Peak memory during maintenance calls: this driver process, the Spark JVM and its Python workers (Linux /proc)."""

from __future__ import annotations

import os
import threading

from docgen.figures import MB


def status_kb(pid: int, name: str) -> int | None:
    """A `kB` field (VmRSS, VmHWM) of /proc/<pid>/status; None when the process or field is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux: `echo 5 > /proc/<pid>/clear_refs`)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


class MemoryProbe:
    """Peak memory during maintenance calls, in MB, accumulated (max) over every call of one strategy.

    driver: VmHWM of this Python process minus its RSS when the call started (delta-rs runs in-process, and
            collected Arrow data lands here); jvm: VmHWM of the Spark driver JVM (absolute: its heap, once grown,
            stays resident); workers: the largest sampled sum of RSS over the JVM's descendant processes (the
            Python workers running mapInArrow), sampled every 0.1 s. Without clear_refs, sampled RSS is used.
    """

    def __init__(self, jvm_pid: int | None) -> None:
        self.jvm_pid = jvm_pid
        self.driver_mb = self.jvm_mb = self.workers_mb = 0.0
        self.method = "VmHWM (reset via clear_refs)"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled = {"driver": 0, "jvm": 0, "workers": 0}
        self._driver_start = 0

    def _sample(self) -> None:
        while True:
            self._sampled["driver"] = max(self._sampled["driver"], status_kb(os.getpid(), "VmRSS") or 0)
            if self.jvm_pid:
                self._sampled["jvm"] = max(self._sampled["jvm"], status_kb(self.jvm_pid, "VmRSS") or 0)
                workers = sum(status_kb(pid, "VmRSS") or 0 for pid in descendants(self.jvm_pid))
                self._sampled["workers"] = max(self._sampled["workers"], workers)
            if self._stop.wait(0.1):
                return

    def __enter__(self) -> MemoryProbe:
        self._driver_reset = reset_peak(os.getpid())
        self._jvm_reset = bool(self.jvm_pid) and reset_peak(self.jvm_pid or 0)
        self._driver_start = status_kb(os.getpid(), "VmRSS") or 0
        self._sampled = {"driver": 0, "jvm": 0, "workers": 0}
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        driver = status_kb(os.getpid(), "VmHWM") if self._driver_reset else None
        jvm = status_kb(self.jvm_pid, "VmHWM") if self._jvm_reset and self.jvm_pid else None
        if driver is None or (self.jvm_pid and jvm is None):
            self.method = "sampled VmRSS every 0.1 s (clear_refs unavailable)"
        driver_peak = max(driver or 0, self._sampled["driver"])
        self.driver_mb = max(self.driver_mb, (driver_peak - self._driver_start) * 1024 / MB)
        self.jvm_mb = max(self.jvm_mb, max(jvm or 0, self._sampled["jvm"]) * 1024 / MB)
        self.workers_mb = max(self.workers_mb, self._sampled["workers"] * 1024 / MB)
