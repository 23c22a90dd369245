"""Key equality, reads of the touched keys and the emission of results, shared by the Spark
placement's reductions (the grid path in spark.py, running totals in spark_totals.py, product
times in product.py)."""
from __future__ import annotations

from functools import reduce as fold

from pyspark.sql import Column, DataFrame, functions as F

from executor.time import DIFF, TIME


def conjunction(conditions):
    """The conjunction of join conditions (true when there are none: a global reduction)."""
    return fold(lambda a, b: a & b, conditions, F.lit(True))


def equality(df: DataFrame):
    """Key equality for joins inside a reduction: plain `=` (which keeps the arrangement's
    hash partitioning usable) where the key cannot be null, null-safe `<=>` otherwise."""
    nullable = {f.name for f in df.schema.fields if f.nullable}

    def same(a: str, b: str):
        name = a.split(".", 1)[1].strip("`")
        return F.col(a).eqNullSafe(F.col(b)) if name in nullable else F.col(a) == F.col(b)

    return same


def of_keys(rows: DataFrame, keys: DataFrame, kq: list[str], same, how: str = "left_semi",
            broadcast: bool = True) -> DataFrame:
    """The rows (all of a trace's batches, as one union) whose key is among `keys`' keys
    (`how="left_anti"`: is not): one join with one broadcast of the distinct keys (a job),
    not one per batch."""
    touched = keys.select(*kq).distinct()
    touched = (F.broadcast(touched) if broadcast else touched).alias("t")
    return rows.alias("b").join(touched, conjunction([same(f"b.{k}", f"t.{k}") for k in kq]),
                                how)


def signed(at: Column, following: Column, m: Column, frontier: int) -> Column:
    """A result with multiplicity m at time `at` (from the frontier on: a baseline row at F-1
    is only retracted) and retracted at the key's `following` time (where there is one), as
    the (time, diff) structs F.inline emits."""
    return F.array_compact(F.array(
        F.when(at >= frontier, F.struct(at.alias(TIME), m.alias(DIFF))),
        F.when(following.isNotNull(), F.struct(following.alias(TIME), (-m).alias(DIFF)))))
