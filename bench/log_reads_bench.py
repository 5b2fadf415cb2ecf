"""What a job's commit reads cost its other threads: `python -m bench.log_reads_bench [--quick]`.

A job reads the commit files events announce (and discovery probes the next commit of each table it owns) from
several threads at once, while its micro-batch, discovery and HTTP threads run Python. Here READERS threads read one
commit file of a table on the S3 emulator (moto_server, through the fault front of tests/faults adding LATENCY_MS to
every request, as an object store answers in tens of milliseconds) in a loop, while the main thread counts the
iterations of a pure-Python loop for SECONDS. Reported: that count against the same loop with no readers (1.0: the
readers cost it nothing), and the reads a second, for the reads recluster makes (`read_log_actions`: one GET through
obstore) against the reads it made before (the same file through delta-rs's file system for pyarrow, a HEAD then a
GET), alternating, ROUNDS times each (quick: 1). Writes bench/results/log-reads[-quick]-<date>.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from bench.common import log, publish
from docgen.figures import ratio_row
from recluster.delta.storage import log_file, read_log_actions, table_filesystem
from tests.faults.front import FaultFront
from tests.faults.plan import FaultKind, FaultRule, Target
from tests.s3_server import moto_server

READERS = 4
SECONDS = 3.0
ROUNDS = 3
LATENCY_MS = 20


def spin(seconds: float) -> int:
    """Iterations of a pure-Python loop in `seconds`: how much of the interpreter this thread got."""
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def with_readers(read: Callable[[], object]) -> tuple[int, float]:
    """The spin count while READERS threads call `read` in a loop, and their reads a second."""
    stop, reads = threading.Event(), [0] * READERS

    def reader(index: int) -> None:
        while not stop.is_set():
            read()
            reads[index] += 1

    threads = [threading.Thread(target=reader, args=(index,)) for index in range(READERS)]
    for thread in threads:
        thread.start()
    count = spin(SECONDS)
    stop.set()
    for thread in threads:
        thread.join()
    return count, sum(reads) / SECONDS


def through_pyarrow(uri: str, options: dict[str, str]) -> Callable[[], object]:
    """The read before: the commit file opened through delta-rs's file system for pyarrow."""
    filesystem, name = table_filesystem(uri, options), log_file(uri, f"{0:020d}.json")

    def read() -> bytes:
        with filesystem.open_input_stream(name) as stream:
            return bytes(stream.read())

    return read


def main(quick: bool = False) -> dict[str, Any]:
    began = time.monotonic()
    rounds = 1 if quick else ROUNDS
    shares: dict[str, list[float]] = {"obstore": [], "pyarrow": []}
    rates: dict[str, list[float]] = {"obstore": [], "pyarrow": []}
    with (
        tempfile.TemporaryDirectory(prefix="recluster-log-reads-") as work,
        moto_server(Path(work)) as s3,
        FaultFront(s3.endpoint, Path(work) / "front.log") as front,
    ):
        uri = s3.table_uri("reads")
        write_deltalake(uri, pa.table({"k": pa.array(range(100), pa.int64())}), storage_options=s3.options())
        front.plan(0, FaultRule(FaultKind.LATENCY, Target.ANY, latency_seconds=LATENCY_MS / 1000))
        options = {**s3.options(), "AWS_ENDPOINT_URL": front.endpoint}
        reads = {"obstore": lambda: read_log_actions(uri, 0, options), "pyarrow": through_pyarrow(uri, options)}
        for read in reads.values():
            read()  # each path's client made before the clock
        for round_ in range(rounds):
            for kind in ("obstore", "pyarrow") if round_ % 2 == 0 else ("pyarrow", "obstore"):
                alone = spin(SECONDS)
                count, rate = with_readers(reads[kind])
                shares[kind].append(count / alone)
                rates[kind].append(rate)
                log(f"{kind}: the other thread got {count / alone:.2f} of its loop alone; {rate:.0f} reads a second")
    ours, theirs = statistics.median(shares["obstore"]), statistics.median(shares["pyarrow"])
    rows = [
        ratio_row(
            f"a Python thread's share of its time alone, beside {READERS} threads reading commits", ours, theirs, "> 1"
        ),
        ratio_row(
            "commit files read a second",
            statistics.median(rates["obstore"]),
            statistics.median(rates["pyarrow"]),
            "> 1",
        ),
    ]
    result = {
        "readers": READERS,
        "latency_ms": LATENCY_MS,
        "spin_seconds": SECONDS,
        "share_of_spin": shares,
        "reads_per_second": rates,
        "seconds": time.monotonic() - began,
    }
    title = f"Commit reads on the S3 emulator ({LATENCY_MS} ms a request): obstore against delta-rs's file system"
    return publish("log-reads", title, quick, rows, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.log_reads_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round")
    main(quick=parser.parse_args().quick)
