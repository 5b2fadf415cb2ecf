"""The merge kernel: Arrow reads, curve sort and Parquet writes of one merge task, and where a task runs (placement).

Nothing here starts a JVM; `spark_tasks` spreads the same kernel over Spark tasks when placement says so."""
