"""Benchmarks, run as modules from the project root: `python -m bench.metrics_bench`."""
