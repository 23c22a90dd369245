"""Arranging on the executors by kernel: one Exchange moves each update to its key's bucket,
and each bucket is sorted and consolidated there in one pass by gpu_kernels' `consolidation`
(the driver placement's kernel), through `mapInArrow`.

Spark SQL's arrangement of the same rows is an Exchange, a partial and a final hash
aggregate and a sort (its optimizer drops a sort below an aggregate, so the sort cannot do
the grouping). The kernel sorts each bucket's rows by int64 words that order them as Spark
does (encoding.order_words) and sums the diffs of equal rows as it goes; its Python tasks
cost a fixed time each, so it wins on big batches only (benchmarks/arrangements.py part d,
README "Arrangements").

Spark cannot see the layout a Python function leaves, so the checkpointed rows are declared
with the hash partitioning and sort order of the Exchange and sort they are equal to
(`_declared`): joins and reductions over arranged batches then plan no Exchange and no Sort,
as over the aggregate's. That declaration is only true where the kernel's order is Spark's,
so `method` sends columns of any other type (nested types, strings of a non-binary
collation) to the aggregate.
"""
from __future__ import annotations

from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, ShortType, StringType,
                               StructType, TimestampNTZType, TimestampType)

from executor.arrange.spine import STORAGE, materialise_counted
from executor.operators.linear.spark import q
from executor.time import DIFF

KERNEL, SQL = "kernel", "sql"
# Updates from which the kernel arranges about as fast as the aggregate or faster
# (benchmarks/arrangements.py part d, 2 cores; each of the P Python tasks costs a fixed time,
# and the rows cross to Arrow and back). On an AMD EPYC: 1.03-1.09x at 3M, 1.07-1.33x at 6M.
# On an Intel Xeon (2026-12-07, two runs): 0.77-1.11x at 3M, 0.94-1.26x at 6M (integers, a
# STRING, TPC-H's DECIMAL and DATE); a TPC-H SF 1 q03 first step arranged its 3.2M
# lineitems faster by the aggregate. So from 6M, not 4M as before
KERNEL_ROWS = 6_000_000
_ORDERED = (ByteType, ShortType, IntegerType, LongType, BooleanType, DateType, TimestampType,
            TimestampNTZType, DecimalType, FloatType, DoubleType, BinaryType)


def method(schema: StructType, columns: list[str], rows: Optional[int]) -> str:
    """How a batch with these record and time columns, expected to hold `rows` updates (None:
    not known), is arranged on Spark: KERNEL for at least KERNEL_ROWS updates where each
    column's type orders the same in the kernel and in Spark, else SQL. The one place the
    choice is made (Runner.explain states it)."""
    if rows is None or rows < KERNEL_ROWS:
        return SQL
    return KERNEL if all(_ordered(schema[c].dataType) for c in columns) else SQL


def rule() -> str:
    """The choice, as Runner.explain shows it."""
    return (f"arrangements on Spark: a sort + consolidate kernel per key bucket (mapInArrow) "
            f"for a batch expected to hold at least {KERNEL_ROWS:,} updates of atomic "
            f"types; the SQL aggregate and sort otherwise")


def _ordered(kind: DataType) -> bool:
    if isinstance(kind, StringType):
        return kind.isUTF8BinaryCollation()
    return isinstance(kind, _ORDERED)


def arrange(df: DataFrame, keys: list[str], records: list[str], time_cols: list[str],
            partitions: int, backend: str = "numpy") -> tuple[DataFrame, int]:
    """The arranged form of `df` (records then times, then the diff) and its record count,
    materialised in one job: hash-partitioned by `keys` into `partitions` buckets (one when
    there are no keys), each sorted by (keys, values, times) and consolidated by the kernels
    on `backend` (numpy, cupy or auto, in the executors' Python workers)."""
    order = keys + [c for c in records if c not in keys] + time_cols
    columns = df.select(*map(q, records + time_cols), DIFF)
    rows, size = materialise_counted(
        sorted_buckets(bucketed(columns, keys, partitions), order, backend), STORAGE)
    return _declared(rows, keys, order, partitions), size


def bucketed(df: DataFrame, keys: list[str], partitions: int) -> DataFrame:
    """`df` moved to its key buckets: hash-partitioned by `keys` into `partitions` (one
    partition without keys), the layout of every arranged batch."""
    return df.repartition(partitions, *map(q, keys)) if keys else df.repartition(1)


def sorted_buckets(parted: DataFrame, order: list[str], backend: str = "numpy") -> DataFrame:
    """Each partition of `parted` (update columns) sorted by `order` and consolidated, in one
    mapInArrow; `order` names every column but the diff."""
    floats = [c for c in order if isinstance(parted.schema[c].dataType, (DoubleType, FloatType))]

    def bucket(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return arranged_bucket(batches, order, floats, backend)

    return parted.mapInArrow(bucket, parted.schema)


def arranged_bucket(batches: Iterator[pa.RecordBatch], order: list[str], floats: list[str],
                    backend: str = "numpy") -> Iterator[pa.RecordBatch]:
    """One bucket's updates sorted by `order` and consolidated (runs in the executors).
    Floating columns come out as Spark's grouping leaves them: -0.0 as 0.0."""
    from executor.arrange.encoding import order_words
    from gpu_kernels import consolidation, namespace, to_numpy

    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches).combine_chunks()
    if not table.num_rows:
        return
    xp = namespace(backend)
    words = [xp.asarray(w) for c in order for w in order_words(_array(table.column(c)))]
    rows, sums = consolidation(xp, words, xp.asarray(_array(table.column(DIFF)).to_numpy()))
    out = table.take(pa.array(to_numpy(xp, rows)))
    out = out.set_column(out.schema.get_field_index(DIFF), DIFF,
                         pa.array(to_numpy(xp, sums), pa.int64()))
    for name in floats:
        i = out.schema.get_field_index(name)
        column = out.column(i)
        zero = pa.scalar(0.0, column.type)
        out = out.set_column(i, name, pc.if_else(pc.equal(column, zero), zero, column))
    yield from out.to_batches()


def _array(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _declared(rows: DataFrame, keys: list[str], order: list[str],
              partitions: int) -> DataFrame:
    """`rows` (a checkpoint) with the hash partitioning and sort order that an Exchange by
    `keys` and a sort by `order` would give it, which it has: Spark reads it with the layout
    of the aggregate's arrangement (Dataset.checkpoint takes them from the plan the same way)."""
    from pyspark.sql.classic.dataframe import DataFrame as Classic

    rdd = rows._jdf.queryExecution().analyzed().rdd()
    if rdd.getNumPartitions() != (partitions if keys else 1):
        return rows  # no Exchange ran (Spark saw no rows to arrange): nothing to declare
    shape = bucketed(rows, keys, partitions).sortWithinPartitions(*map(q, order))  # never run
    session = rows.sparkSession
    jvm = session._jvm
    companion = getattr(getattr(jvm.org.apache.spark.sql.execution, "LogicalRDD$"), "MODULE$")
    plan = companion.fromDataset(rdd, shape._jdf, False)
    return Classic(jvm.org.apache.spark.sql.classic.Dataset.ofRows(session._jsparkSession, plan),
                   session)


def declared_layout(df: DataFrame) -> Optional[tuple[str, str]]:
    """(partitioning, ordering) Spark reads a checkpoint with, as text (tests, explain)."""
    plan = df._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "LogicalRDD":
        return None
    return plan.outputPartitioning().toString(), plan.outputOrdering().toString()
