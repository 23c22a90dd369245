"""Consolidation: sum diffs per (record, time) and drop zeros, so streams stay canonical.

The Spark SQL aggregate is the CPU default (benchmarks/linear.py measures it against the
per-partition kernel, the arrangement's bucket kernel run over partitions by record).
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
    the arrangement's bucket kernel (executor/arrange/buckets.py) on `backend`, any atomic
    column type."""
    from executor.arrange.buckets import bucketed, sorted_buckets

    keys = record_columns(df, time_cols) + list(time_cols)
    columns = df.select(*map(q, keys), DIFF)
    return sorted_buckets(bucketed(columns, keys, partitions), keys, backend)
