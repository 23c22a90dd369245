"""The small-step path of the query operator: a step's delta rules on the driver's array
backend (executor/operators/query/delta_rules.py) instead of as Spark SQL.

A step of a few thousand changes touches few keys, yet the SQL plan of its delta rules is
dozens of stages whose planning and scheduling alone take seconds. Here the step collects
its seeds, fetches, in one Spark job per extension depth, the arranged updates under the
keys its prefixes reach (a broadcast semijoin on each shared arrangement), and counts,
proposes and validates with gpu_kernels on numpy or cupy. The arrangements stay the state;
only the touched part of them crosses to the driver. Steps with more seeds than
`diffspark.query.local_rows`, non-integer columns or nulls run as Spark SQL.
"""
from __future__ import annotations

from functools import reduce
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import LongType, StructField, StructType

from executor.arrange.encoding import INTEGRAL, arrow_schema
from executor.operators.linear.spark import q
from executor.operators.query import delta_rules
from executor.time import DIFF, TIME
from gpu_kernels import namespace, to_numpy
from plans import ir, query as cq

_WHOLE = 100_000  # asked-for keys beyond which a request reads its whole arrangement


def applicable(node: ir.Query, deltas: list[DataFrame]) -> bool:
    """Integer columns and integer constants only (the kernels' domain)."""
    for df in deltas:
        if not all(isinstance(f.dataType, INTEGRAL) for f in df.schema.fields):
            return False
    consts = [t for a in node.query.atoms for t in a.terms if isinstance(t, cq.Const)]
    consts += [t for c in node.query.comparisons for t in (c.left, c.right)
               if isinstance(t, cq.Const)]
    return all(isinstance(c.value, int) for c in consts)


def run(node: ir.Query, ready: dict[str, DataFrame], deltas: list[DataFrame],
        names: dict[str, list[str]], index: Callable, backend: str,
        max_rows: int) -> Optional[DataFrame]:
    """The query's output changes from the ready seeds, or None when the step is too big
    (or holds nulls) for the driver."""
    position = {r: i for i, r in enumerate(node.relations)}
    tables, total = {}, 0
    for r, df in ready.items():
        table = df.limit(max_rows + 1).toArrow()
        total += table.num_rows
        if total > max_rows or any(c.null_count for c in table.columns):
            return None
        tables[r] = table
    schema = _schema(node, deltas, names, position)
    spark = deltas[0].sparkSession
    if total == 0:
        return spark.createDataFrame(pa.Table.from_pylist([], arrow_schema(schema)))
    xp = namespace(backend)
    seeds = {r: ([_col(xp, t.column(c)) for c in names[r]], _col(xp, t.column(TIME)),
                 _col(xp, t.column(DIFF))) for r, t in tables.items()}

    def lookup(wants: dict) -> dict:
        return _fetch(xp, wants, names, lambda r, cols: index(position[r], cols), spark)

    rules = cq.delta_rules(node.query, node.order)
    cols, t, d = delta_rules.run(xp, node.query, rules, seeds, lookup)
    arrays = [to_numpy(xp, a) for a in (*cols, t, d)]
    table = pa.Table.from_arrays([pa.array(a).cast(f.type) for a, f in
                                  zip(arrays, arrow_schema(schema))], schema=arrow_schema(schema))
    return spark.createDataFrame(table)


def _col(xp, column) -> object:
    return xp.asarray(column.to_numpy().astype(np.int64))


def _schema(node: ir.Query, deltas, names, position) -> StructType:
    fields = []
    for v in node.query.head:
        r, k = node.query.binding(v)
        fields.append(StructField(v, deltas[position[r]].schema[names[r][k]].dataType))
    return StructType(fields + [StructField(TIME, LongType(), False),
                                StructField(DIFF, LongType(), False)])


def _fetch(xp, wants: dict, names, arranged: Callable, spark) -> dict:
    """One Spark job: for each request, the arranged updates under the asked-for keys, as
    (key columns, value, time, diff) arrays on xp."""
    width = max(len(req.key) for req in wants)
    frames = []
    for i, (req, tables) in enumerate(wants.items()):
        cols = names[req.relation]
        view = arranged(req.relation, tuple(cols[k] for k in req.key))
        parts = view.all()
        if not parts:
            continue
        df = requested(reduce(DataFrame.union, parts), cols, req)
        value = None if req.value is None else F.col(q(cols[req.value]))
        zero = F.lit(0).cast("bigint")
        keys = [F.col(q(cols[k])).cast("bigint") for k in req.key]
        df = df.select(F.lit(i).alias("__req"),
                       *[c.alias(f"__k{j}") for j, c in
                         enumerate(keys + [zero] * (width - len(keys)))],
                       (zero if value is None else value.cast("bigint")).alias("__v"),
                       F.col(TIME).cast("bigint").alias(TIME),
                       F.col(DIFF).cast("bigint").alias(DIFF))
        keys = _distinct_keys(xp, tables, len(req.key))
        if req.key and keys.shape[0] <= _WHOLE:
            table = pa.table({f"__k{j}": keys[:, j] for j in range(len(req.key))})
            df = df.join(F.broadcast(spark.createDataFrame(table)),
                         [f"__k{j}" for j in range(len(req.key))], "left_semi")
        frames.append(df)
    got = reduce(DataFrame.unionByName, frames).toArrow() if frames else None
    out = {}
    for i, req in enumerate(wants):
        if got is None:
            arr = {f"__k{j}": np.zeros(0, np.int64) for j in range(width)}
            arr |= {c: np.zeros(0, np.int64) for c in ("__v", TIME, DIFF)}
        else:
            mine = np.nonzero(got.column("__req").to_numpy() == i)[0]
            arr = {c: got.column(c).to_numpy()[mine] for c in got.column_names}
        out[req] = ([xp.asarray(arr[f"__k{j}"]) for j in range(len(req.key))],
                    xp.asarray(arr["__v"]), xp.asarray(arr[TIME]), xp.asarray(arr[DIFF]))
    return out


def requested(df: DataFrame, cols: list[str], req) -> DataFrame:
    """The arranged updates `df` of req.relation (record columns `cols`) that can answer
    the request: its constants matched, its repeats equal to the value, and no null among
    the key and value columns (a joined variable never binds null)."""
    for k, x in req.constants:
        df = df.where(F.col(q(cols[k])) == F.lit(x))
    value = None if req.value is None else F.col(q(cols[req.value]))
    for k in req.repeats:
        df = df.where(F.col(q(cols[k])) == value)
    for c in [F.col(q(cols[k])) for k in req.key] + ([value] if value is not None else []):
        df = df.where(c.isNotNull())
    return df


def _distinct_keys(xp, tables: list, width: int) -> np.ndarray:
    """The distinct key tuples asked for, as an (n, width) int64 host array."""
    if width == 0:
        return np.zeros((0, 0), np.int64)
    rows = np.concatenate([np.stack([to_numpy(xp, c) for c in cols], axis=1)
                           for cols in tables])
    return np.unique(rows, axis=0)
