"""Every benchmark, one entry each: what `python -m bench` runs and lists, and what docs/performance.md's table of
benchmarks is generated from (`python -m bench --write-docs`; `./dev docs` runs `--check-docs`).

A benchmark is a module run as `python -m <module> [--quick] <args>` in its own interpreter (a fresh JVM each); it
writes `bench/results/<results>[-quick]-<date>.json`. Run times are not typed here: the table reads the `seconds`
field of the newest results file of each mode (docgen.figures.Results) and names that file; a benchmark whose results
do not record their seconds says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from docgen.figures import ROOT


@dataclass(frozen=True)
class Benchmark:
    name: str
    """What `python -m bench NAME` takes."""
    module: str
    compares: str
    """recluster against which baseline, on what."""
    results: str
    """The results file's name before `[-quick]-<date>.json`."""
    cited: tuple[str, ...]
    """The results files the docs cite (docs/*.md, README.md; most through docgen, the newest of `results`)."""
    args: tuple[str, ...] = ()
    quick: bool = True
    """False: the benchmark has one size, `--quick` runs it as it is."""
    needs: str = ""
    """What it needs beyond the venv (`./dev referee`, `./dev kafka`: its `main` fails with the reason without)."""
    run_time: str = ""
    """Instead of the results files' `seconds`, when those mean something else."""

    def command(self, quick: bool) -> list[str]:
        return ["-m", self.module, *(["--quick"] if quick and self.quick else []), *self.args]

    def results_name(self, quick: bool) -> str:
        return f"{self.results}-quick" if quick and self.quick else self.results


REFEREE = "Delta Spark (`./dev referee`)"

BENCHMARKS = (
    Benchmark(
        "metrics",
        "bench.metrics_bench",
        "clustering_info and the incremental level state against a full recompute (goals < 3 s, < 10 ms)",
        "metrics",
        ("metrics-2026-11-25.json",),
        quick=False,
    ),
    Benchmark(
        "merge",
        "bench.merge_bench",
        "a FINAL merge against raw Spark sort + write of the same files; incremental rounds' write amplification "
        "against a full rewrite after every append",
        "merge",
        ("merge-2026-11-27.json", "merge-quick-2026-11-27.json", "merge-2026-11-22.json"),
    ),
    Benchmark(
        "stream",
        "bench.stream_bench",
        "the streaming job under a steady writer: commit-to-decision latency against the trigger interval",
        "stream",
        ("stream-2026-11-24.json",),
    ),
    Benchmark(
        "memory",
        "bench.memory_bench",
        "peak driver memory of planning on a 100,000-file table against delta-rs alone loading its add actions",
        "memory",
        ("memory-2026-11-25.json",),
    ),
    Benchmark(
        "commit",
        "bench.commit_bench",
        "our own log commits against delta-rs `create_write_transaction`",
        "commit",
        ("commit-2026-11-24.json",),
    ),
    Benchmark(
        "output",
        "bench.output_bench",
        "FINAL against delta-rs z_order and raw Spark on the same data",
        "output",
        ("output-2026-11-24.json",),
    ),
    Benchmark(
        "fixed-cost",
        "bench.fixed_cost_bench",
        "small work (cold CLI minor optimize, a round after one append) against delta-rs compact",
        "fixed-cost",
        ("fixed-cost-2026-11-24.json",),
    ),
    Benchmark(
        "driver-start",
        "bench.driver_start_bench",
        "a recluster watch's start to its first round with the tests' Spark driver options (class archive, quick "
        "compiler) against without",
        "driver-start",
        ("driver-start-2026-11-28.json",),
    ),
    Benchmark(
        "python-worker",
        "bench.python_worker_bench",
        "a task's Python worker importing pyspark with the path Spark gives it (its zip first) through recluster's "
        "daemon against PySpark's",
        "python-worker",
        ("python-worker-2026-11-29.json",),
    ),
    Benchmark(
        "referee-cpu",
        "bench.referee_cpu_bench",
        "the Delta Spark referee's CPU writing the suite's feature tables with the tests' settings against those "
        "before one task thread, against Spark's expression code generation and against no class archive",
        "referee-cpu",
        ("referee-cpu-quick-2026-11-28.json", "referee-cpu-quick-2026-11-29.json"),
        needs=REFEREE,
    ),
    Benchmark(
        "suite-cpu",
        "bench.suite_cpu_bench",
        "the full test suite's CPU by process (the referee, our Spark drivers, pytest workers, subprocesses, "
        "emulators): what bounds the suite's time",
        "suite-cpu",
        (
            "suite-cpu-2026-11-28.json",
            "suite-cpu-2026-11-29.json",
            "suite-cpu-workers2-2026-11-29.json",
            "suite-cpu-workers3-2026-11-29.json",
            "suite-cpu-workers3-auto-2026-11-29.json",
            "suite-cpu-workers3-auto-second-2026-11-29.json",
            "suite-cpu-one-thread-referee-python-daemon-2026-11-29.json",
            "suite-cpu-fixed-2026-11-29.json",
            "suite-cpu-session-start-2026-11-29b.json",
            "suite-cpu-recipe-scopes-2026-11-29.json",
            "suite-cpu-recipe-scopes-second-2026-11-29.json",
            "suite-cpu-one-group-2026-11-29b.json",
            "suite-cpu-session-28-2026-11-29.json",
            "suite-cpu-session-29-2026-12-07.json",
            "suite-cpu-session-30-2026-12-07.json",
            "suite-cpu-session-31-2026-12-07.json",
        ),
        quick=False,
        needs="every test service (`./dev test` sets them up)",
    ),
    Benchmark(
        "discovery-takeup",
        "bench.discovery_takeup_bench",
        "a first start on many tables found under a root on the S3 emulator (20 ms a request): discovery reading "
        "8 tables at once against one at a time",
        "discovery-takeup",
        ("discovery-takeup-quick-2026-11-28.json",),
    ),
    Benchmark(
        "log-reads",
        "bench.log_reads_bench",
        "a Python thread's share of the interpreter beside four threads reading commit files on the S3 emulator (20 ms "
        "a request), and their reads a second: one GET through obstore against delta-rs's file system for pyarrow",
        "log-reads",
        ("log-reads-2026-12-07.json",),
    ),
    Benchmark(
        "kafka-batch",
        "bench.kafka_batch_bench",
        "a micro-batch's collect() of its commit events from three Kafka partitions on local[1]: every partition's "
        "range read by one task against one task a partition",
        "kafka-batch",
        ("kafka-batch-2026-12-07.json",),
        needs="Apache Kafka (`./dev kafka`)",
    ),
    Benchmark(
        "fleet-scale",
        "bench.fleet_scale_bench",
        "three jobs sharing many small tables on the S3 emulator (issue 44): owned, commit-to-decision at 20 appends a "
        "second against the targets and against the small-table rule off, a job killed",
        "fleet-scale",
        (
            "fleet-scale-quick-2026-11-28.json",
            "fleet-scale-quick-full-reopen-2026-11-28.json",
            "fleet-scale-quick-session-start-2026-11-28.json",
            "fleet-scale-quick-uri-writer-2026-11-28.json",
            "fleet-scale-quick-2026-11-29.json",
            "fleet-scale-quick-read-threads-2026-11-29.json",
            "fleet-scale-quick-relist-2026-11-29.json",
            "fleet-scale-quick-session-start-2026-11-29.json",
            "fleet-scale-quick-indexed-listings-2026-11-29.json",
        ),
        args=("--baseline",),
    ),
    Benchmark(
        "fleet-scale-kafka",
        "bench.fleet_scale_bench",
        "the same fleet learning of the appends from commit events on Apache Kafka, against the same lake with the "
        "logs polled, side by side (`--rate 5`: at a rate the emulator serves)",
        "fleet-scale-kafka",
        (
            "fleet-scale-kafka-quick-2026-11-29.json",
            "fleet-scale-kafka-quick-writer-refreshing-2026-11-29.json",
            "fleet-scale-kafka-rate5-quick-before-warm-up-2026-11-29.json",
            "fleet-scale-kafka-rate5-quick-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-serial-claims-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-before-split-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-split-first-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-one-open-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-reopened-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-deferred-opened-2026-11-29.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-before-holdings-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-holdings-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-overlapped-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-term-before-hand-back-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-term-hand-back-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-before-event-order-2026-12-07.json",
            "fleet-scale-kafka-tables1000-rate5-interval300-event-order-2026-12-07.json",
            "fleet-scale-kafka-tables1000-interval300-before-obstore-reads-2026-12-07.json",
            "fleet-scale-kafka-tables1000-interval300-obstore-reads-2026-12-07.json",
            "fleet-scale-kafka-tables1000-interval300-log-writer-2026-12-07.json",
            "fleet-scale-kafka-attempt-2026-11-29.json",
            "fleet-scale-kafka-interval300-2026-11-29.json",
            "fleet-scale-kafka-interval300-deferred-opened-2026-11-29.json",
            "fleet-scale-kafka-interval300-sweep-waits-2026-11-29.json",
            "fleet-scale-kafka-interval300-one-get-claims-2026-11-29.json",
            "fleet-scale-kafka-interval300-holdings-2026-12-07.json",
            "fleet-scale-kafka-interval300-overlapped-2026-12-07.json",
            "fleet-scale-kafka-interval300-event-order-2026-12-07.json",
            "fleet-scale-kafka-interval300-obstore-reads-2026-12-07.json",
            "fleet-scale-kafka-interval300-log-writer-2026-12-07.json",
            "fleet-scale-kafka-interval300-log-writer-before-cpu-2026-12-07.json",
            "fleet-scale-kafka-interval300-log-writer-cpu-2026-12-07.json",
            "fleet-scale-kafka-interval300-cpu-2026-12-07.json",
            "fleet-scale-kafka-interval300-log-writer-one-task-2026-12-07.json",
        ),
        args=("--source", "both"),
        needs="Apache Kafka (`./dev kafka`)",
    ),
    Benchmark(
        "curve",
        "bench.curve_bench",
        "multi-column keys on curves against delta-rs z_order",
        "curve",
        ("curve-2026-11-25.json",),
    ),
    Benchmark(
        "pages",
        "bench.pages_bench",
        "status pages for many tables against the same work without a page (`status --json`)",
        "pages",
        ("pages-2026-11-24.json",),
    ),
    Benchmark(
        "big-table",
        "bench.big_table_bench",
        "`info` and planning on 1,000,000-file tables against the delta-rs floor",
        "big-table",
        ("big-table-2026-11-26.json",),
    ),
    Benchmark(
        "idle",
        "bench.idle_bench",
        "one scheduling pass over idle watched tables against evaluating every table",
        "idle",
        ("idle-2026-11-25.json",),
    ),
    Benchmark(
        "job-scale",
        "bench.job_scale_bench",
        "1,000 tables in one job against one table: commit-to-decision latency",
        "job-scale",
        ("job-scale-2026-11-25.json",),
    ),
    Benchmark(
        "watermark",
        "bench.watermark_bench",
        "time-like keys with default settings against z_order and compact",
        "watermark",
        ("watermark-2026-11-26.json",),
    ),
    Benchmark(
        "watermark-model",
        "bench.watermark_model_bench",
        "the time-like trigger against the previous default, in the model",
        "watermark-model",
        ("watermark-model-2026-11-26.json",),
    ),
    Benchmark(
        "cluster",
        "bench.cluster_bench",
        "FINAL on a Spark standalone cluster, 1 worker against 2",
        "cluster",
        ("cluster-2026-11-25.json",),
    ),
    Benchmark(
        "estimate",
        "bench.estimate_bench",
        "`recluster estimate` against a real run of the same appends",
        "estimate",
        ("estimate-2026-11-27.json",),
    ),
    Benchmark(
        "kafka-latency",
        "bench.kafka_latency_bench",
        "the job driven by commit events on Apache Kafka (SASL_SSL) against the same job polling the Delta log",
        "kafka-latency",
        (),
        needs="Apache Kafka's jars (`./dev kafka`)",
    ),
    Benchmark(
        "delta-optimize",
        "bench.delta_optimize_bench",
        "FINAL against Delta Spark's OPTIMIZE ZORDER BY and liquid OPTIMIZE FULL, same cores",
        "delta-optimize",
        ("delta-optimize-quick-2026-11-26.json",),
        needs=REFEREE,
    ),
    Benchmark(
        "delta-cluster",
        "bench.delta_cluster_bench",
        "FINAL in Spark tasks against Delta's OPTIMIZE ZORDER BY on the same standalone cluster",
        "delta-cluster",
        ("delta-cluster-2026-11-27.json",),
        needs=REFEREE,
    ),
    Benchmark(
        "advise",
        "bench.advise_bench",
        "`recluster advise` on a 10,000-query event log (a real Delta Spark application's, repeated) against "
        "decompressing and parsing its every line",
        "advise",
        ("advise-2026-11-28.json",),
        needs=REFEREE,
    ),
    Benchmark(
        "upkeep",
        "bench.upkeep_bench",
        "incremental upkeep (a round per append) against liquid OPTIMIZE every 1 and 5 appends and ZORDER BY",
        "upkeep",
        ("upkeep-2026-11-27.json",),
        needs=REFEREE,
    ),
    Benchmark(
        "streaming-writers",
        "bench.streaming_writers_bench",
        "a Delta Spark streaming writer and DML beside `recluster watch` against beside OPTIMIZE every 10 s",
        "streaming-writers",
        (
            "streaming-writers-2026-11-27.json",
            "streaming-writers-old-code-2026-11-27.json",
            "streaming-writers-trigger-10s-2026-11-27.json",
        ),
        needs=REFEREE,
        run_time="two 10-minute runs (quick: 1-minute) and Delta Spark's start: its `seconds` is one run's length",
    ),
    Benchmark(
        "storage-faults",
        "bench.storage_faults_bench",
        "every command under injected storage faults against the same commands without faults (rows exact)",
        "storage-faults",
        ("storage-faults-2026-11-27.json",),
        needs=REFEREE,
    ),
    Benchmark(
        "compare",
        "bench.compare",
        "every strategy (none, compact, z_order, Spark sort, recluster) on the same four workloads",
        "compare",
        ("compare-2026-11-22.json",),
    ),
    Benchmark(
        "absorb",
        "bench.compare",
        "the absorb policy against levels and delta-rs z_order on issue 11's workloads",
        "absorb",
        ("absorb-2026-11-22.json",),
        args=("--suite", "absorb"),
    ),
)

BY_NAME = {benchmark.name: benchmark for benchmark in BENCHMARKS}


def registry_problems() -> list[str]:
    """What is out of step: a benchmark module not registered, a registered module or cited results file missing."""
    bench = ROOT / "bench"
    on_disk = {f"bench.{path.stem}" for path in bench.glob("*_bench.py")} | {"bench.compare"}
    registered = {benchmark.module for benchmark in BENCHMARKS}
    problems = [f"{module} is not in bench/registry.py" for module in sorted(on_disk - registered)]
    for benchmark in BENCHMARKS:
        relative = benchmark.module.removeprefix("bench.").replace(".", "/")
        if not (bench / f"{relative}.py").exists() and not (bench / relative / "__main__.py").exists():
            problems.append(f"{benchmark.name}: no module {benchmark.module}")
        problems += [
            f"{benchmark.name}: cited results file {file} is missing"
            for file in benchmark.cited
            if not (bench / "results" / file).exists()
        ]
    return problems
