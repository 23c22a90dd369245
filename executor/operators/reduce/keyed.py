"""Key equality, reads of the touched keys and the emission of results, shared by the Spark
placement's reductions (the grid path in spark.py, running totals in spark_totals.py, product
times in product.py)."""
from __future__ import annotations

import re
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
        name = re.sub(r"^\w+\.", "", a).strip("`")  # less a qualifier (`b.`), if any
        return F.col(a).eqNullSafe(F.col(b)) if name in nullable else F.col(a) == F.col(b)

    return same


def of_keys(rows: DataFrame, keys: DataFrame, kq: list[str], same, how: str = "left_semi",
            broadcast: bool = True) -> DataFrame:
    """The rows (all of a trace's batches, as one union) whose key is among `keys`' keys
    (`how="left_anti"`: is not): one join with one broadcast of the distinct keys (a job),
    not one per batch."""
    # the keys renamed, not aliased: `keys` is often computed from `rows` (a reduction's
    # unsure keys from its running totals), and Spark resolves a qualified name in such a
    # self-join against the inner plan's aliases ("no column `b`.`a`")
    names = [f"`__touched{i}`" for i in range(len(kq))]
    touched = keys.select(*[F.col(k).alias(n.strip("`")) for k, n in zip(kq, names)]).distinct()
    touched = F.broadcast(touched) if broadcast else touched
    return rows.join(touched, conjunction([same(k, n) for k, n in zip(kq, names)]), how)


def signed(at: Column, following: Column, m: Column, frontier: int) -> Column:
    """A result with multiplicity m at time `at` (from the frontier on: a baseline row at F-1
    is only retracted) and retracted at the key's `following` time (where there is one), as
    the (time, diff) structs F.inline emits."""
    return F.array_compact(F.array(
        F.when(at >= frontier, F.struct(at.alias(TIME), m.alias(DIFF))),
        F.when(following.isNotNull(), F.struct(following.alias(TIME), (-m).alias(DIFF)))))
