"""The Spark placement of the merge kernel: read exactly a task's files (Spark's Parquet reader where it reaches
them, else the kernel's pyarrow.fs reader inside Spark tasks), range-partition and sort by the key, and run
`kernel.write_sorted_partition` on each sorted partition through `mapInArrow`. Nothing but one result row per
written file comes back to the driver.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import pyarrow as pa

from recluster.core.blocks import WrittenFile
from recluster.core.errors import TableError
from recluster.core.selection.plan import MergeTask
from recluster.delta.column_mapping import is_mapped, stored_schema
from recluster.delta.row_tracking import RowTracking
from recluster.delta.storage import executor_storage_options, file_location
from recluster.spark.curve_column import CURVE_FIELD, CurveSpec, curve_column
from recluster.spark.kernel import InputSpec, OutputSpec, read_data_files, write_sorted_partition, written_files

RESULT_SCHEMA = "path string, rows long, bytes long, stats string, level int"


DataReader = Literal["auto", "spark", "pyarrow"]


HADOOP_FILESYSTEMS = {
    "s3": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "s3a": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "gs": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "abfs": "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem",
    "abfss": "org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem",
}
"""The Hadoop filesystem class Spark's reader needs per URI scheme (from jars a pip install does not bring)."""


READ_SPLIT_BYTES = 128 << 20
"""Input bytes per Spark task of the pyarrow reader (Spark's own reader splits at the same size)."""


def _scheme(uri: str) -> str:
    return urlparse(uri).scheme.lower() if "://" in uri else ""


def spark_reads_natively(spark: Any, table_root: str) -> bool:
    """Whether Spark's own reader can open the table's files: local paths always; an object store only when
    its Hadoop filesystem class is on the driver's classpath (its jars and credentials are then Spark's)."""
    scheme = _scheme(table_root)
    if scheme in ("", "file"):
        return True
    class_name = HADOOP_FILESYSTEMS.get(scheme)
    if class_name is None:
        return False
    try:
        spark._jvm.java.lang.Class.forName(class_name)
    except Exception:  # py4j wraps the JVM's ClassNotFoundException
        return False
    return True


def spark_path(table_root: str, path: str) -> str:
    """A data file's location for Spark's reader: Hadoop reaches `s3://` buckets through `s3a://`."""
    if _scheme(table_root) in ("", "file"):
        return file_location(table_root, path)
    root = "s3a://" + table_root.split("://", 1)[1] if _scheme(table_root) == "s3" else table_root
    return f"{root}/{unquote(path)}"


def read_task_files(
    spark: Any,
    task: MergeTask,
    table_root: str,
    data_schema: pa.Schema,
    reader: DataReader,
    storage_options: Mapping[str, str],
    row_tracking: RowTracking | None = None,
) -> Any:
    """A DataFrame of the task's rows (data columns only), read by Spark or by pyarrow.fs in Spark tasks."""
    spark_schema = _spark_schema(data_schema)
    with_vectors = any(block.has_deletion_vector for block in task.files)  # Spark's reader cannot apply them
    # Spark's reader would look for logical names in the files, and cannot derive row ids
    mapped = is_mapped(data_schema) or row_tracking is not None
    native = reader != "pyarrow" and not with_vectors and not mapped and spark_reads_natively(spark, table_root)
    if reader == "spark" and not native and not with_vectors and not mapped:
        raise TableError(
            f"spark.data_reader=spark, but Spark has no Hadoop filesystem for {_scheme(table_root)}:// "
            f"(its jars are not on the classpath); use spark.data_reader auto or pyarrow"
        )
    if native:
        paths = [spark_path(table_root, block.path) for block in task.files]
        return spark.read.schema(spark_schema).parquet(*paths).select(*(spark_column(n) for n in data_schema.names))
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(spark_schema, timezone="UTC")
    spec = InputSpec(
        table_root=table_root,
        storage_options=dict(storage_options),
        paths=tuple(block.path for block in task.files),
        schema=arrow_schema,
        deletion_vectors=tuple(block.deletion_vector for block in task.files),
        stored=stored_schema(arrow_schema, data_schema) if is_mapped(data_schema) else None,
        row_tracking=row_tracking,
    )
    slices = max(1, spark.sparkContext.defaultParallelism, math.ceil(task.bytes / READ_SPLIT_BYTES))
    indexes = spark.range(0, len(spec.paths), numPartitions=min(len(spec.paths), slices))
    return indexes.mapInArrow(lambda batches: read_data_files(spec, batches), spark_schema)


def spark_column(name: str) -> Any:
    """A top-level column by its exact name, even with a dot, space, comma or backquote in it."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def _with_curve(batch: pa.RecordBatch, data_schema: pa.Schema, curve: CurveSpec) -> pa.RecordBatch:
    """A positional batch with its rows' curve values appended (computed on the key columns by name)."""
    named = pa.Table.from_batches([batch]).rename_columns(data_schema.names)
    values = curve_column(named, curve)
    return pa.RecordBatch.from_arrays([*batch.columns, values], names=[*batch.schema.names, CURVE_FIELD.name])


def execute_task(spark: Any, task: MergeTask, spec: OutputSpec, reader: DataReader = "auto") -> list[WrittenFile]:
    """The kernel in Spark tasks: read the task's files, range-partition and sort by the key, and run
    `write_sorted_partition` on each sorted partition (mapInArrow). Nothing but the result rows reaches the driver."""
    spec = dataclasses.replace(spec, storage_options=executor_storage_options(spec.table_root, spec.storage_options))
    data_schema = spec.schema
    frame = read_task_files(spark, task, spec.table_root, data_schema, reader, spec.storage_options, spec.row_tracking)
    # Columns travel by position under plain names: mapInArrow resolves a name with a dot as a nested field.
    positional = [f"_c{i}" for i in range(len(data_schema.names))]
    frame = frame.toDF(*positional)
    if spec.curve is not None:  # the curve value first: partitioned, sorted and cut on it
        from pyspark.sql.types import LongType, StructField, StructType

        curve = spec.curve
        frame = frame.mapInArrow(
            lambda batches: (_with_curve(batch, data_schema, curve) for batch in batches),
            StructType([*frame.schema.fields, StructField(CURVE_FIELD.name, LongType(), False)]),
        )
    order = [frame[positional[data_schema.names.index(name)]].asc_nulls_first() for name in spec.key]
    if spec.curve is not None:
        order = [frame[CURVE_FIELD.name].asc(), *order]
    partitions = max(1, math.ceil(task.rows / spec.target_rows), math.ceil(task.bytes / spec.target_file_bytes))
    # Range-partition on the first key column only, so that one of its values never spans two partitions;
    # without a key (compaction) only the number of partitions matters.
    if order:
        sorted_frame = frame.repartitionByRange(partitions, order[0]).sortWithinPartitions(*order)
    else:
        sorted_frame = frame.repartition(partitions)
    rows = sorted_frame.mapInArrow(lambda batches: write_sorted_partition(spec, batches), RESULT_SCHEMA).collect()
    return written_files(task, (row.asDict() for row in rows))
