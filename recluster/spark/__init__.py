"""The Spark session the job drives: built, configured and given scheduler pools here; merges run elsewhere."""
