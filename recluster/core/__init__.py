"""Pure values and rules (DESIGN §2): keys, blocks, metrics, selection, optimizing. No I/O, no Spark, delta-rs,
Kafka or HTTP imports (tests/test_architecture.py enforces it).
"""
