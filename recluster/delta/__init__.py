"""Everything that touches a Delta table: through delta-rs (`deltalake`), and the log itself where delta-rs
cannot (deletion vectors, our own commits).
"""
