"""The reduce family (count, sum, min, max, distinct, threshold, top_k, user kernels) over
arrangements.

For the keys a step touches, a reduction is re-evaluated at every time at which its input
changes, and the differences between consecutive results are emitted. In Spark SQL: the grid
G = (key, time) of the step's ready updates plus a baseline row per key at the last complete
time F-1; the key's history from the trace joins G (history time <= grid time) and sums to the
accumulated multiset at each grid time; the reduction runs per (key, grid time); each result
is emitted at its time and retracted at the key's next grid time. Updates at times >= upto
wait in `pending` until the frontier passes them, since later steps may still add updates
before them. The trace is compacted to F-1, so the baseline still sees all of the past.
Abelian reductions (count, sum over exact types, aggregates of them) over an arrangement
this runner owns keep running totals instead (spark_totals.py) and take this path only for
the keys their totals cannot decide.
"""
from __future__ import annotations

from functools import reduce as fold

from pyspark.sql import DataFrame, Window, functions as F
from pyspark.sql.types import (ArrayType, DecimalType, LongType, MapType, NumericType, StructField,
                               StructType)

from executor.arrange.spine import checkpoint
from executor.arrange.trace import View
from executor.operators.linear import kernels
from executor.operators.linear.spark import q, record_columns
from executor.operators.reduce import spark_totals
from executor.operators.reduce.keyed import conjunction, equality, of_keys, signed
from executor.time import DIFF, INFINITY, TIME
from plans import ir
from plans.errors import PlanError
from plans.types import adjusted, decimal_result

GT, NEXT, M = "__gt", "__next", "__m"


def output(node: ir.Reduce, acc: DataFrame, records: list[str], backend: str,
           grid: tuple[str, ...] = (GT,)) -> DataFrame:
    """Per (key, grid time): the reduction's output records with multiplicity M, from the
    accumulated multiset `acc` (keys, grid time columns, records, M != 0)."""
    red = node.reduction
    check_types(node, acc, records)
    by = [*map(q, node.by), *grid]
    if red.kind == "kernel":
        return kernels.reduce_groups(acc, list(node.by), red, list(grid), M, backend)
    if red.kind in ("count", "sum", "min", "max", "aggregate"):
        if red.kind in ("min", "max"):  # present while a record has positive multiplicity
            acc = acc.where(F.col(M) > 0)
        kinds = {f.name: f.dataType for f in acc.schema.fields}
        unit = any(k == "sum" and _rounds(kinds[c]) for _, k, c in red.value_parts())
        if unit:  # x*M would round these sums: the multiset as |M| rows of M's sign
            acc = acc.withColumn(M, F.explode(F.array_repeat(
                F.signum(F.col(M)).cast("bigint"), F.abs(F.col(M)).cast("int"))))
        out = acc.groupBy(*by).agg(*[_value(k, c, kinds, unit).alias(n)
                                     for n, k, c in red.value_parts()])
        if red.kind == "count":  # present while the multiplicities do not cancel
            out = out.where(F.col("count") != 0)
        return out.withColumn(M, F.lit(1).cast("bigint"))
    if red.kind == "distinct":
        return acc.where(F.col(M) > 0).select(*map(q, records), *grid,
                                              F.lit(1).cast("bigint").alias(M))
    if red.kind == "threshold":
        counted = acc.select(*map(q, records), *grid, F.col(M).alias("count"))
        return (counted.selectExpr(*map(q, records), *grid,
                                   f"CAST(({red.expr}) AS BIGINT) AS {M}")
                .where(F.col(M) != 0))
    if red.kind == "top_k":
        order = [_sort(F.expr(e), desc, nulls_first) for e, desc, nulls_first in red.order]
        order += [F.col(q(c)).asc_nulls_first() for c in records]
        w = Window.partitionBy(*by).orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
        ranked = acc.where(F.col(M) > 0).withColumn("__before", F.sum(M).over(w) - F.col(M))
        return (ranked.where(F.col("__before") < red.k)
                .select(*map(q, records), *grid,
                        F.least(F.col(M), F.lit(red.k) - F.col("__before")).alias(M)))
    raise PlanError(f"{node.label()}: unknown reduction {red.kind}")


def _value(kind: str, column, kinds: dict, unit: bool):
    """One value over a group's accumulated rows (multiplicity M != 0), as
    plans/semantics.py `_aggregate_value` defines it, of Spark's type: a DECIMAL(p, s) sum
    is DECIMAL(min(38, p + 10), s), as Spark's Sum over the multiset (x*M alone would be
    typed and rounded as Spark's product with a BIGINT). With `unit`, every M is +1 or -1."""
    m = F.col(M)
    if kind == "count":
        return F.sum(m if column is None else F.when(F.col(q(column)).isNotNull(), m)
                     .otherwise(F.lit(0).cast("bigint")))
    if kind == "sum":
        x, t = F.col(q(column)), kinds[column]
        if not isinstance(t, DecimalType):
            return F.sum(x * m)
        spark = DecimalType(min(38, t.precision + 10), t.scale)
        return F.sum(F.when(m > 0, x).otherwise(-x) if unit else x * m).cast(spark)
    return (F.min if kind == "min" else F.max)(F.when(m > 0, F.col(q(column))))


def _rounds(t) -> bool:
    """Whether Spark types DECIMAL t times a BIGINT with fewer decimals than t (above 38
    digits it keeps min(scale, 6)): such a sum cannot weight its rows by M."""
    if not isinstance(t, DecimalType):
        return False
    return adjusted(*decimal_result("multiply", (t.precision, t.scale), (20, 0)))[1] < t.scale


def check_types(node: ir.Reduce, acc: DataFrame, records: list[str]) -> None:
    """Refuse, when the plan is built (the Runner resolves every operator on empty inputs),
    a reduction its column's type cannot take: sum needs a number, min, max and top_k's
    order keys a type with an order (no MAP). Spark would fail only at the first step."""
    red = node.reduction
    if red.kind in ("count", "sum", "min", "max", "aggregate"):
        keys = []
        for _, kind, column in red.value_parts():
            if column is None:
                continue
            if column not in records:
                raise PlanError(f"{kind}({column}): no column '{column}'; the input's "
                                f"columns are {', '.join(records)}")
            keys.append((kind, column, acc.schema[column].dataType))
    elif red.kind == "top_k":
        keys = [("top_k", e, acc.select(F.expr(e)).schema.fields[0].dataType)
                for e, _, _ in red.order]
    else:
        return
    for kind, column, dtype in keys:
        rule = None
        if kind == "sum" and not isinstance(dtype, NumericType):
            rule = "sum needs a numeric column"
        elif kind in ("min", "max", "top_k") and not _orderable(dtype):
            rule = f"{kind} needs a column with an order (not a MAP)"
        if rule:
            where = f"{kind}({red.expr if kind == 'top_k' else column})"
            raise PlanError(f"{where}: column '{column}' is {dtype.simpleString().upper()}; "
                            f"rule: {rule}")


def _orderable(dtype) -> bool:
    if isinstance(dtype, MapType):
        return False
    if isinstance(dtype, ArrayType):
        return _orderable(dtype.elementType)
    if isinstance(dtype, StructType):
        return all(_orderable(f.dataType) for f in dtype.fields)
    return type(dtype).__name__ != "VariantType"


def _sort(col, descending: bool, nulls_first: bool):
    """One sort key of top_k (plans/ordering.py)."""
    if descending:
        return col.desc_nulls_first() if nulls_first else col.desc_nulls_last()
    return col.asc_nulls_first() if nulls_first else col.asc_nulls_last()


def delta(node: ir.Reduce, view: View, pending, frontier: int, upto, time_cols, empty,
          backend: str, trace=None, schema=None, counted: bool = False):
    """(output changes of this step, new pending updates, whether those changes are
    consolidated). `trace`: the commit of the arrangement's trace, given where this runner
    owns it; abelian reductions then keep running totals beside it (spark_totals.py) and
    read their group only where those cannot decide. `counted`: the view is a counted
    arrangement's (counted.py), whose trace holds the count's totals. `schema`: the node's
    output schema (None while the plan is resolved), which those results are cast to."""
    if len(time_cols) != 1:
        raise PlanError(f"{node.label()}: reductions over nested times are not supported yet")
    keys = list(view.keys)
    if node.by != tuple(keys) and node.reduction.kind not in ("distinct", "threshold"):
        raise PlanError(f"{node.label()}: input arranged by {keys}, expected {list(node.by)}")
    records = record_columns(empty, time_cols)
    incoming = view.delta_frame(empty)
    if pending is not None:
        incoming = pending.union(incoming)
    if upto is None:
        ready, pending = incoming, None
    else:
        ready = incoming.where(F.col(TIME) < upto)
        pending = incoming.where(F.col(TIME) >= upto)
    kq = list(map(q, keys))
    same = equality(empty)
    kinds = {f.name: f.dataType for f in empty.schema.fields}
    single = upto == frontier + 1  # the step's updates are all at time `frontier`
    terms = spark_totals.layout(node, kinds) if trace is not None and not counted else None
    if node.reduction.kind == "count" and terms is None:
        return spark_totals.count_changes(node, view, ready, frontier, same,
                                          schema or _count_schema(node, empty),
                                          single), pending, single
    if terms is not None:
        def regrouped(only: DataFrame, broadcast: bool) -> DataFrame:
            return _regrouped(node, view, of_keys(ready, only, kq, same, broadcast=broadcast),
                              frontier, records, backend, same, empty)

        out, trace.spark_totals[node.reduction] = spark_totals.delta(
            node, view, ready, frontier, trace.spark_totals.get(node.reduction), terms,
            INFINITY if upto is None else upto, same, regrouped, schema, single)
        return out, pending, single
    if node.reduction.kind in ("distinct", "threshold") and keys == records:
        running = _running(view, ready, frontier, kq, same)
        return _thresholded(running, kq, node.reduction), pending, False
    return _regrouped(node, view, ready, frontier, records, backend, same, empty), pending, False


def _regrouped(node: ir.Reduce, view: View, ready: DataFrame, frontier: int, records,
               backend: str, same, empty) -> DataFrame:
    """The grid path: the reduction re-evaluated over the group of each key `ready` touches,
    at each of its times."""
    keys = list(view.keys)
    kq = list(map(q, keys))
    grid = ready.select(*kq, F.col(TIME).alias(GT)).distinct()
    grid = grid.union(grid.select(*kq).distinct().withColumn(GT, F.lit(frontier - 1)))
    grid = grid.withColumn(NEXT, F.lead(GT).over(Window.partitionBy(*kq).orderBy(GT)))
    # The grid is read three times (for the touched keys, by the history join and by _emit):
    # a lazy checkpoint computes it once, in the first job that reads it, not in each
    # broadcast's own job.
    grid = checkpoint(grid, eager=False)
    batches = view.all()
    history = of_keys(fold(DataFrame.union, batches), grid, kq, same) if batches else empty
    h, g = history.alias("h"), grid.alias("g")
    cond = [same(f"h.{k}", f"g.{k}") for k in kq]
    cond.append(F.col(f"h.{TIME}") <= F.col(f"g.{GT}"))
    acc = (h.join(g, conjunction(cond), "inner")
           .groupBy(*[F.col(f"h.{q(c)}").alias(c) for c in records], F.col(f"g.{GT}").alias(GT))
           .agg(F.sum(F.col(f"h.{DIFF}")).alias(M)).where(F.col(M) != 0))
    out = output(node, acc, records, backend)
    out_records = [c for c in out.columns if c not in (GT, M)]
    return _emit(out, grid, keys, out_records, frontier, same)


def _count_schema(node: ir.Reduce, empty: DataFrame) -> StructType:
    """A count's output: its key columns, `count` (BIGINT), time and diff."""
    fields = {f.name: f for f in empty.schema.fields}
    return StructType([fields[k] for k in node.by] + [StructField("count", LongType())] +
                      [fields[TIME], fields[DIFF]])


def _running(view: View, ready: DataFrame, frontier: int, kq: list[str], same) -> DataFrame:
    """Per key and time of the step's changes: the key's summed multiplicity then (`count`)
    and at its previous time (`__prev`, null before its first). The old batches
    (semi-joined with the touched keys) give each key's sum at F-1, the step's updates its
    changes; one window runs the sums. No grid, no history join: the fast path of distinct
    and threshold over whole records (a count's is spark_totals.count_changes)."""
    changes = ready.groupBy(*kq, TIME).agg(F.sum(DIFF).alias(M)).where(F.col(M) != 0)
    rows = changes
    if view.old:
        old = fold(DataFrame.union, view.old).where(F.col(TIME) < frontier)
        if kq:  # the touched keys' rows; a global count reads all
            old = of_keys(old, changes, kq, same)
        rows = rows.unionByName(old.groupBy(*kq).agg(F.sum(DIFF).alias(M))
                                .withColumn(TIME, F.lit(frontier - 1)))
    w = Window.partitionBy(*kq).orderBy(TIME)
    now = F.sum(M).over(w.rowsBetween(Window.unboundedPreceding, 0))
    running = rows.withColumn("count", now).withColumn("__prev", F.lag("count").over(w))
    return running.where(F.col(TIME) >= frontier)


def _thresholded(running: DataFrame, kq: list[str], red: ir.Reduction) -> DataFrame:
    """distinct / threshold of whole records: a record's multiplicity is f(count) while it
    is present (0 otherwise), emitted as f(now) - f(previous) where they differ."""
    present, value = ("count > 0", "1") if red.kind == "distinct" else \
        ("count <> 0", f"CAST(({red.expr}) AS BIGINT)")
    f = f"CASE WHEN {present} THEN {value} ELSE 0 END"
    now = running.selectExpr(*kq, TIME, "__prev", f"{f} AS __now")
    prev = now.select(*kq, TIME, "__now", F.coalesce("__prev", F.lit(0)).alias("count"))
    return (prev.selectExpr(*kq, TIME, f"CAST(__now - ({f}) AS BIGINT) AS {DIFF}")
            .where(F.col(DIFF) != 0))


def _emit(out: DataFrame, grid: DataFrame, keys: list[str], out_records, frontier: int,
          same):
    """Each result at its grid time (+), retracted at the key's next grid time (-); the
    baseline row (time F-1) is only retracted. One join, one generator: no second pass."""
    o, g = out.alias("o"), grid.alias("g")
    cond = [same(f"o.{q(k)}", f"g.{q(k)}") for k in keys]
    cond.append(F.col(f"o.{GT}") == F.col(f"g.{GT}"))
    joined = o.join(g, conjunction(cond), "inner")
    emitted = signed(F.col(f"g.{GT}"), F.col(f"g.{NEXT}"), F.col(f"o.{M}"), frontier)
    recs = [F.col(f"o.{q(c)}").alias(c) for c in out_records]
    return joined.select(*recs, F.inline(emitted))
