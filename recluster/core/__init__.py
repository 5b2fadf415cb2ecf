"""Pure values and rules (docs/architecture.md): keys, blocks, metrics, selection, optimizing. No I/O, no Spark,
delta-rs, Kafka or HTTP imports (tests/test_architecture.py enforces it).
"""
