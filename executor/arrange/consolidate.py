"""Consolidation: sum diffs per (record, time) and drop zeros, so streams stay canonical.

The Spark SQL aggregate is the CPU default (benchmarks/linear.py measures it against the
per-partition kernel); the kernel variant serves streams already partitioned by record.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, functions as F

from executor.operators.linear.spark import q, record_columns
from executor.time import DIFF


def consolidate(df: DataFrame, time_cols: list[str]) -> DataFrame:
    keys = record_columns(df, time_cols) + list(time_cols)
    return (df.groupBy(*map(q, keys)).agg(F.sum(DIFF).alias(DIFF))
              .where(F.col(DIFF) != 0))


def consolidate_by_kernel(df: DataFrame, time_cols: list[str], partitions: int,
                          backend: str) -> DataFrame:
    """Hash-partition by the whole record and time, then sort-consolidate each partition with
    gpu_kernels.consolidate (numeric columns only)."""
    keys = record_columns(df, time_cols) + list(time_cols)
    schema = df.schema

    def per_partition(batches):
        import pyarrow as pa

        from gpu_kernels.arrow import arrays_to_batch, batch_to_arrays
        from gpu_kernels.backend import namespace
        from gpu_kernels.consolidate import consolidate as kernel

        xp = namespace(backend)
        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        cols = batch_to_arrays(table.combine_chunks().to_batches()[0], xp)
        out_keys, out_diff = kernel(xp, [cols[k] for k in keys], cols[DIFF])
        out = dict(zip(keys, out_keys), **{DIFF: out_diff})
        yield arrays_to_batch(out, table.schema, xp)

    return df.repartition(partitions, *map(q, keys)).mapInArrow(per_partition, schema)
