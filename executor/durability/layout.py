"""How a trace batch lies in a state directory, and how it comes back arranged on resume.

An arranged batch is hash-partitioned by its key into P partitions and sorted
(executor/arrange/trace.py). Written as a Spark bucketed table, P buckets by the key (bucketing
uses the same hash as `repartition(P, key)`), it reads back already partitioned: restoring
it is a scan and a sort within partitions, with no shuffle and no re-consolidation.
benchmarks/durability.py (c) measured it against plain Parquet re-partitioned on load: at
2M records, restore 7.7 s against 10.6 s (and 21.9 s re-arranged), for a slower write (11.2
s against 4-8 s), under heavy shared load (README, Durability). The table is registered only
to write or read the files and dropped at once; it is external, so dropping it leaves the files.

A batch without keys, or restored by a runner with another P, is read as plain Parquet and
arranged again. So is a batch a driver step wrote (executor/driver.py): it is an Arrow table,
written plain by pyarrow with no Spark job, and Spark's bucketing hash is not reproduced.
"""
from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from executor.arrange.spine import materialise_counted
from executor.arrange.trace import arrange
from executor.operators.linear.spark import q
from executor.time import DIFF

# Spark plans a bucketed table as a plain scan unless a join or aggregate directly above
# wants its partitioning; a restored batch is sorted and checkpointed first, so the
# partitioning would be lost. With this off, a bucketed scan stays bucketed (it changes
# nothing for tables that are not bucketed).
AUTO_BUCKETED_SCAN = "spark.sql.sources.bucketing.autoBucketedScan.enabled"


def order(columns: list[str], keys: list[str], time_cols: list[str]) -> list[str]:
    """An arrangement's sort order: key, value, time."""
    values = [c for c in columns if c not in keys and c not in time_cols and c != DIFF]
    return keys + values + time_cols


def write(df, path: str, keys: list[str], time_cols: list[str], buckets: int) -> None:
    """Write a batch to `path`: a Spark frame in `buckets` buckets by its key (0: plain
    Parquet; a batch without keys cannot be bucketed), an Arrow table as plain Parquet."""
    if isinstance(df, pa.Table):
        os.makedirs(path)
        pq.write_table(df, os.path.join(path, "part-00000.parquet"))
        return
    if not buckets:
        df.write.parquet(path)
        return
    name = _table_name()
    try:
        (df.write.format("parquet").option("path", path).bucketBy(buckets, *keys)
         .sortBy(*order(df.columns, keys, time_cols)).saveAsTable(name))
    finally:
        df.sparkSession.sql(f"DROP TABLE IF EXISTS {name}")


def read(spark: SparkSession, path: str, schema_json: str, keys: list[str],
         time_cols: list[str], partitions: int, buckets: int) -> tuple[DataFrame, int]:
    """The batch at `path` arranged into `partitions` and materialised, and its records."""
    if not keys or buckets != partitions:
        plain = spark.read.schema(StructType.fromJson(json.loads(schema_json))).parquet(path)
        return arrange(plain, keys, time_cols, partitions)
    spark.conf.set(AUTO_BUCKETED_SCAN, "false")
    ddl = spark._jvm.org.apache.spark.sql.types.DataType.fromJson(schema_json).toDDL()
    location = path.replace("\\", "\\\\").replace("'", "\\'")
    name = _table_name()
    spark.sql(f"CREATE TABLE {name} ({ddl}) USING parquet CLUSTERED BY "
              f"({', '.join(map(q, keys))}) INTO {buckets} BUCKETS LOCATION '{location}'")
    try:
        table = spark.table(name)
        return materialise_counted(table.sortWithinPartitions(
            *map(q, order(table.columns, keys, time_cols))))
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def _table_name() -> str:
    return "diffspark_state_" + uuid.uuid4().hex
