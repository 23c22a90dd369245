"""The reference interpreter (plans.semantics) with Spark as its static SQL evaluator: the
one module of executor/ that imports the oracle, for the tests and `gpu-check` to compare with.

The interpreter owns times, diffs and accumulation in plain Python; Spark only evaluates the
per-record expressions on one small DataFrame each, so SQL means exactly what it means on the
fast path while every incremental mechanism is checked independently.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from executor.arrange.encoding import arrow_schema
from plans import ir
from plans.semantics import Update, consolidate, evaluate


class SparkEvaluator:
    def __init__(self, spark: SparkSession):
        self.spark = spark

    def select(self, ddl: str, rows: list[tuple], exprs: list[str]):
        df = self._frame(ddl, rows).selectExpr(*exprs)
        ddl_out = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
        return ddl_out, [tuple(plain(v) for v in r) for r in df.collect()]

    def _frame(self, ddl: str, rows: list[tuple]):
        """The rows as a local relation (through Arrow), which Spark's optimizer evaluates
        on the driver: Python rows make an RDD, and a Spark job per expression was most of
        the tests' time. Values Arrow does not take as given (nested ones) go as rows."""
        schema = StructType.fromDDL(ddl)
        try:
            arrow = arrow_schema(schema)
            columns = list(zip(*rows)) if rows else [[] for _ in schema.fields]
            table = pa.Table.from_arrays(
                [pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)], schema=arrow)
        except (pa.ArrowException, TypeError, ValueError):
            return self.spark.createDataFrame(rows, schema)
        return self.spark.createDataFrame(table, schema)


def plain(v):
    """Rows and lists from Spark as tuples and lists of plain Python values."""
    if hasattr(v, "asDict"):
        return tuple(plain(x) for x in v)
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def rows_of(df) -> list[Update]:
    """Sorted (record tuple, time, diff) triples of an update DataFrame, consolidated: the
    form reference() returns."""
    out = []
    for r in df.collect():
        vals = tuple(r)
        out.append((tuple(plain(v) for v in vals[:-2]), vals[-2], vals[-1]))
    return consolidate(out)


def reference(spark: SparkSession, outputs: dict[str, ir.Node],
              inputs: dict[str, list[Update]]) -> dict[str, list[Update]]:
    return evaluate(outputs, inputs, SparkEvaluator(spark))
