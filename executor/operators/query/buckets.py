"""Worst-case optimal joins per bucket on the executors (DESIGN §6).

An extension through several extenders (bind z in `u(x, z), u(y, z)`) runs in one kernel
per bucket of prefixes, the driver placement's (delta_rules.extended: count, propose from
the smallest, validate with the others, as of each prefix's time). The prefixes are
bucketed by the hash of their first extender's key; each extender's arranged updates under
the keys a bucket's prefixes ask for are fetched to that bucket by one Spark join (the
arrangement is already hash-partitioned by that key, so only the asked keys move). The
prefixes and their index rows then meet in one `mapInArrow` task, which lists candidates
one chunk at a time and keeps only the variables later steps and the head need: a count of
triangles never lists its triangles, and no candidate crosses a shuffle.

Spark SQL's plan of the same extension joins the prefixes with each arrangement for counts,
proposals and validations (about a dozen joins and aggregates), and moves every candidate
through a shuffle. The choice between the two is `method`.
"""
from __future__ import annotations

from functools import reduce
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import LongType, StructField, StructType

from executor.arrange.encoding import INTEGRAL, NULL_CODE
from executor.arrange.spine import checkpoint
from executor.operators.linear.spark import q
from executor.operators.query.local import requested
from executor.time import DIFF, TIME
from plans import query as cq

KERNEL, SQL = "kernel", "sql"
# Updates from which a step's extensions run per bucket rather than as Spark SQL joins: the
# triangle count's first step on the Spark placement, 2 cores, took 23-29 s per bucket and
# 22-27 s as SQL at 100K edges (runs differ), 59-77 s and 120-157 s at 1M
# (benchmarks/triangles.py --spark-first)
KERNEL_ROWS = 1_000_000
_TAG, _BUCKET, _VALUE = "__tag", "__b", "__v"


def method(deltas: list[DataFrame], rows: Optional[int]) -> str:
    """KERNEL for a step expected to hold at least KERNEL_ROWS updates (None: not known)
    of integer columns only, else SQL. The one place the choice is made (explain shows
    `rule`); an extension the kernel cannot take still runs as SQL (`extend` says None)."""
    if rows is None or rows < KERNEL_ROWS:
        return SQL
    integral = all(isinstance(f.dataType, INTEGRAL) for df in deltas for f in df.schema.fields)
    return KERNEL if integral else SQL


def buckets(spark) -> int:
    """Buckets of prefixes: one per core of the session (Spark's default parallelism).
    Every bucket fetches the index rows its prefixes ask for, so the rows sent grow with
    the buckets (1M R-MAT edges on 2 cores: 2 buckets 59-63 s, 8 buckets 71-89 s)."""
    return max(1, spark.sparkContext.defaultParallelism)


def rule() -> str:
    """The choice, as Runner.explain shows it."""
    return (f"conjunctive queries on Spark: extensions through several extenders by one "
            f"kernel per bucket of prefixes (mapInArrow) for a step expected to hold at "
            f"least {KERNEL_ROWS:,} updates of integer columns; Spark SQL joins otherwise")


def extend(p: DataFrame, step: cq.Extension, bound: list[str], live: set, ctx,
           buckets: int, backend: str) -> Optional[DataFrame]:
    """The prefixes `p` (bound variables, time, diff) extended by step.var in `buckets`
    buckets, with only the `live` variables, consolidated per bucket; None where the kernel
    cannot take the extension (an extender without key columns, whose rows every bucket
    would need, or values of several types)."""
    from executor.operators.query.delta_rules import Request, request

    exts = step.extenders
    if not all(e.key for e in exts):
        return None
    requests: dict[Request, list[cq.Extender]] = {}
    for e in exts:
        requests.setdefault(request(e), []).append(e)
    index = {req: requested(ctx.trace(req.relation, req.key, ()), ctx.names[req.relation], req)
             for req in requests}
    values = {index[req].schema[ctx.names[req.relation][req.value]].dataType
              for req in requests}
    if len(values) > 1:
        return None
    # a variable that must join or compare never binds null: such prefixes find nothing
    compared = {v for c in step.comparisons for v in c.vars()} & set(bound)
    for v in sorted({v for e in exts for _, v in e.key} | compared):
        p = p.where(F.col(q(v)).isNotNull())
    # a prefix's bucket is its first extender's key's hash, and each bucket moves to the
    # partition of that number: a partition holds one bucket, and its index rows once
    reps = F.array(*[F.lit(r).cast("bigint") for r in _representatives(p.sparkSession,
                                                                     buckets)])
    bucket = F.pmod(F.hash(*[F.col(q(v)) for _, v in exts[0].key]), F.lit(buckets))
    # read once for the prefixes and once per request: kept by the first job that reads them
    p = checkpoint(p.withColumn(_BUCKET, F.element_at(reps, bucket + 1)), eager=False)
    width = max(len(e.key) for e in exts)
    null = F.lit(None).cast("bigint")
    parts = [p.select(F.lit(0).alias(_TAG), _BUCKET, *[null.alias(f"__k{i}")
                                                       for i in range(width)],
                      null.alias(_VALUE), *[F.col(q(v)).cast("bigint").alias(v) for v in bound],
                      F.col(TIME).cast("bigint").alias(TIME), DIFF)]
    tags = {}
    for i, (req, same) in enumerate(requests.items(), start=1):
        tags[req] = i
        parts.append(_fetched(p, req, same, index[req], ctx.names[req.relation], i, width,
                              bound))
    both = reduce(DataFrame.union, parts).repartition(buckets, _BUCKET)
    kept = [v for v in bound + [step.var] if v in live]
    schema = StructType([StructField(v, LongType()) for v in kept] +
                        [StructField(TIME, LongType()), StructField(DIFF, LongType())])
    rows = both.mapInArrow(_kernel(step, tags, bound, kept, backend), schema)
    kinds = {v: p.schema[v].dataType for v in bound} | {step.var: values.pop()}
    return rows.select(*[F.col(q(v)).cast(kinds[v]).alias(v) for v in kept], TIME, DIFF)


def _representatives(spark, partitions: int) -> tuple[int, ...]:
    """For each partition j, a long that Spark's hash partitioning into `partitions` sends
    to j (found by Spark's own hash, which no setting changes: one small job per process
    and count, kept by count, not by session)."""
    known = _REPRESENTATIVES.get(partitions)
    if known is not None:
        return known
    ids = spark.range(64 * partitions).select(
        "id", F.pmod(F.hash("id"), F.lit(partitions)).alias("j")).groupBy("j").agg(
        F.min("id").alias("id")).collect()
    found = {r["j"]: r["id"] for r in ids}
    if len(found) < partitions:
        raise RuntimeError(f"no long hashes to each of {partitions} partitions")
    _REPRESENTATIVES[partitions] = tuple(found[j] for j in range(partitions))
    return _REPRESENTATIVES[partitions]


_REPRESENTATIVES: dict[int, tuple[int, ...]] = {}


def _fetched(p: DataFrame, req, same: list, t: DataFrame, cols: list[str], tag: int,
             width: int, bound: list[str]) -> DataFrame:
    """The arranged updates `t` that answer `req` (record columns `cols`) under the keys
    the buckets' prefixes ask for (by any of the extenders `same` that read them), each sent
    to every bucket that asks, as rows of the union: key columns __k*, value __v, time,
    diff."""
    keys = [f"__a{i}" for i in range(len(req.key))]
    t = t.select(*[F.col(q(cols[k])).alias(a) for k, a in zip(req.key, keys)],
                 F.col(q(cols[req.value])).cast("bigint").alias(_VALUE), TIME, DIFF)
    asked = reduce(DataFrame.union, [
        p.select(_BUCKET, *[F.col(q(v)).cast(t.schema[a].dataType).alias(a)
                            for (_, v), a in zip(e.key, keys)]) for e in same]).distinct()
    null = F.lit(None).cast("bigint")
    return t.join(asked, keys).select(
        F.lit(tag).alias(_TAG), _BUCKET,
        *[F.col(a).cast("bigint").alias(f"__k{i}") for i, a in enumerate(keys)],
        *[null.alias(f"__k{i}") for i in range(len(keys), width)], _VALUE,
        *[null.alias(v) for v in bound], F.col(TIME).cast("bigint").alias(TIME),
        F.col(DIFF).cast("bigint").alias(DIFF))


def _kernel(step: cq.Extension, tags: dict, bound: list[str], kept: list[str],
            backend: str):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return extended_bucket(batches, step, tags, bound, kept, backend)
    return run


def extended_bucket(batches: Iterator[pa.RecordBatch], step: cq.Extension, tags: dict,
                    bound: list[str], kept: list[str],
                    backend: str = "numpy") -> Iterator[pa.RecordBatch]:
    """One bucket's prefixes (tag 0) extended through the index rows fetched for each
    request (its tag): the driver placement's kernel, in the executors. A null carried
    variable travels as the null code; a value equal to that code is refused."""
    from executor.operators.query.delta_rules import Prefixes, extended, no_nulls
    from gpu_kernels import namespace, to_numpy

    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches).combine_chunks()
    held = pc.min_max(table.column(_BUCKET))
    if held["min"] != held["max"]:  # the index rows of two buckets would add up
        raise RuntimeError(f"a partition of the query kernel holds buckets {held}")
    tag = table.column(_TAG)
    prefixes = table.filter(pc.equal(tag, 0))
    if not prefixes.num_rows:
        return
    xp = namespace(backend)

    def ints(t: pa.Table, name: str, nulls: bool = False):
        column = t.column(name)
        if nulls and column.null_count:
            if pc.any(pc.equal(column, NULL_CODE)).as_py():
                raise ValueError(f"variable {name}: the value {NULL_CODE} is the null code "
                                 f"of the executors' query kernel (rule: integers above it)")
            column = column.fill_null(NULL_CODE)
        return xp.asarray(column.to_numpy(zero_copy_only=False).astype(np.int64))

    p = Prefixes({v: ints(prefixes, v, nulls=True) for v in bound}, ints(prefixes, TIME),
                 ints(prefixes, DIFF))
    got = {}
    for req, i in tags.items():
        rows = table.filter(pc.equal(tag, i))
        got[req] = ([ints(rows, f"__k{j}") for j in range(len(req.key))],
                    ints(rows, _VALUE), ints(rows, TIME), ints(rows, DIFF))
    out = extended(xp, step, p, got, 1 << 19, set(kept), no_nulls(), 1)
    columns = [to_numpy(xp, out.vars[v]) for v in kept]
    arrays = [pa.array(c, mask=c == NULL_CODE) if v in bound else pa.array(c)
              for v, c in zip(kept, columns)]
    arrays += [pa.array(to_numpy(xp, out.t)), pa.array(to_numpy(xp, out.d))]
    yield from pa.Table.from_arrays(arrays, names=kept + [TIME, DIFF]).to_batches()
