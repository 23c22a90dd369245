"""Abelian reductions on the Spark placement as running totals per key: a step reads the
totals of the keys it touches, not their groups.

The contract is the driver's (totals.py): count, and sum over integers or DECIMAL, alone or as
parts of an aggregate, see a key's multiset only through sums over its updates, a `weight`
(the sum of m over all records, or over those whose column is not null) and per sum the
sum of x*m. Beside the arrangement's trace (Trace.spark_totals) a spine of small batches holds
them, one row per touched key per step, merged by summing; it is valid as of the frontier it
records, so a step after a driver step (which keeps its own totals) rebuilds it from the trace
once. A step joins its updates' per-(key, time) terms with the touched keys' totals, runs the
sums per key over its times and emits the results' differences as the grid path does
(keyed.py `signed`), without reading the history of the keys.

A zero weight does not prove a group empty (+1 and -1 of different records cancel), nor a
zero non-null weight a sum NULL: those keys, and any whose total left a value's range, are
re-evaluated from their groups by the grid path (spark.py `_regrouped`), and only those. One
job computes the running totals and counts those keys; with none, no group is read at all.
Value totals are DECIMAL(38, s) (s the column's scale, 0 for integers): x*m then fits for
integers and DECIMAL(p <= 19, s <= 6), which is where this path applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce as fold
from typing import Optional

from pyspark.sql import DataFrame, Window, functions as F
from pyspark.sql.types import DecimalType

from executor.arrange.encoding import INTEGRAL
from executor.arrange.spine import Spine, checkpoint, materialise
from executor.operators.linear.spark import q
from executor.operators.reduce.keyed import of_keys, signed
from executor.time import DIFF, TIME
from plans import ir

SEEN, NEXT = "__seen", "__next"
LONG = 2 ** 63 - 1
BROADCAST_ROWS = 100_000  # unsure keys beyond it are joined by a shuffle, not broadcast


@dataclass(frozen=True)
class Totals:
    """The totals of one reduction over one trace: a spine of (key columns, term columns)
    batches whose sums per key hold everything before the frontier `at`."""

    spine: Spine
    at: int


def carried(trace, red: ir.Reduction, upper: int) -> None:
    """A step that left the reduction's input alone: its totals hold up to `upper`."""
    kept = trace.spark_totals.get(red)
    if kept is not None:
        trace.spark_totals[red] = Totals(kept.spine, upper)


def layout(node: ir.Reduce, kinds: dict) -> Optional[list[tuple]]:
    """The totals the reduction keeps, as (column name, what, input column): what is
    "weight" (column None: every record) or "value"; None where this path does not apply
    (min, max, top_k, a DOUBLE sum, a DECIMAL too wide for x*m to stay exact)."""
    red = node.reduction
    if red.kind not in ("count", "sum", "aggregate"):
        return None
    specs = [] if red.kind == "sum" else [("weight", None)]
    for _, kind, column in red.value_parts():
        if kind not in ("count", "sum"):
            return None
        if kind == "sum" and _value_type(kinds[column]) is None:
            return None
        wanted = [("weight", column)] + ([("value", column)] if kind == "sum" else [])
        specs += [w for w in wanted if w not in specs]
    return [(f"__t{i}", what, column) for i, (what, column) in enumerate(specs)]


def _value_type(t) -> Optional[DecimalType]:
    """The type of a value total over a column of type t, where x*m is exact in it."""
    if isinstance(t, INTEGRAL):
        return DecimalType(38, 0)
    if isinstance(t, DecimalType) and t.precision <= 19 and t.scale <= 6:
        return DecimalType(38, t.scale)
    return None


def _term(what: str, column, kinds: dict):
    """A term of one update (weight m, or x*m), zero where its column is null."""
    m = F.col(DIFF)
    if what == "weight":
        return m if column is None else \
            F.when(F.col(q(column)).isNotNull(), m).otherwise(F.lit(0).cast("bigint"))
    t = _value_type(kinds[column])
    return F.coalesce(F.col(q(column)).cast(t) * m, F.lit(0).cast(t))


def delta(node: ir.Reduce, view, ready: DataFrame, frontier: int, kept: Optional[Totals],
          terms: list[tuple], upper: int, same, regrouped) -> tuple[DataFrame, Totals]:
    """(the reduction's changes at the times of `ready`, the totals after them).
    `kept`: the totals last kept (None: none), rebuilt from the trace's batches unless they
    hold as of `frontier`;
    `regrouped(keys, broadcast)`: the grid path's changes for those keys (a frame of key
    columns; `broadcast`: whether it is small enough to broadcast)."""
    keys = list(node.by)
    kq = list(map(q, keys))
    kinds = {f.name: f.dataType for f in ready.schema.fields}
    names = [n for n, _, _ in terms]
    summed = [F.sum(n).alias(n) for n in names]
    if kept is None or kept.at != frontier:
        kept = _rebuilt(view, frontier, kq, terms, kinds)
    deltas = ready.groupBy(*kq, TIME).agg(*[F.sum(_term(w, c, kinds)).alias(n)
                                            for n, w, c in terms])
    rows = deltas.withColumn(SEEN, F.lit(False))
    if kept.spine.batches:
        held = fold(DataFrame.unionByName, [b for _, b in kept.spine.batches])
        base = (of_keys(held, deltas, kq, same).groupBy(*kq).agg(*summed)
                .withColumn(TIME, F.lit(frontier - 1).cast("bigint"))
                .withColumn(SEEN, F.lit(True)))
        rows = rows.unionByName(base.select(*rows.columns))
    w = Window.partitionBy(*kq).orderBy(TIME)
    run = w.rowsBetween(Window.unboundedPreceding, 0)
    running = rows.select(*kq, TIME, SEEN, *names,
                          *[F.sum(n).over(run).alias(f"{n}_now") for n in names],
                          F.lead(TIME).over(w).alias(NEXT))
    running = running.withColumn("__unsure", _unsure(node, terms, kinds))
    # one job computes the running totals (kept) and counts the rows they cannot decide
    running = checkpoint(running, eager=False)
    unsure = running.where("__unsure").count()
    added = running.where(~F.col(SEEN)).groupBy(*kq).agg(*summed)
    after = Totals(kept.spine.appended(added, 1), upper)
    out = _emitted(node, running, keys, terms, frontier)
    if not unsure:
        return out, after
    bad = running.where("__unsure").select(*kq).distinct()
    small = unsure <= BROADCAST_ROWS
    decided = of_keys(out, bad, kq, same, how="left_anti", broadcast=small)
    return decided.unionByName(regrouped(bad, small)), after


def _rebuilt(view, frontier: int, kq: list[str], terms: list[tuple], kinds: dict) -> Totals:
    """The totals of every key from the trace's batches before `frontier` (once, after a
    step that did not keep them: the first, a driver step, a resume)."""
    spine = Spine(_merged(kq, [n for n, _, _ in terms]), slack=4)
    if not view.old:
        return Totals(spine, frontier)
    rows = fold(DataFrame.union, view.old).where(F.col(TIME) < frontier)
    grouped = rows.groupBy(*kq).agg(*[F.sum(_term(w, c, kinds)).alias(n) for n, w, c in terms])
    return Totals(spine.appended(checkpoint(grouped, eager=False), 1), frontier)


def _merged(kq: list[str], names: list[str]):
    """The spine's merge: two batches' totals summed per key (rows whose totals are all zero
    stay: they mark a key seen, whose emptiness only its group can tell)."""
    def merge(df: DataFrame, size: int):
        return materialise(df.groupBy(*kq).agg(*[F.sum(n).alias(n) for n in names])), size
    return merge


def _unsure(node: ir.Reduce, terms: list[tuple], kinds: dict):
    """Whether a row's totals cannot decide the group: a zero weight of the group (an
    aggregate's) or of a sum's non-null records, a value total lost (NULL) or beyond a
    BIGINT sum's range. A count is always decided: its group exists while its weight is
    not zero."""
    red = node.reduction
    if red.kind == "count":
        return F.lit(False)
    at = {(w, c): n for n, w, c in terms}
    checks = [F.col(f"{at[('weight', None)]}_now") == 0] if red.kind == "aggregate" else []
    for _, kind, column in red.value_parts():
        if kind != "sum":
            continue
        v = F.col(f"{at[('value', column)]}_now")
        checks += [F.col(f"{at[('weight', column)]}_now") == 0, v.isNull()]
        if isinstance(kinds[column], INTEGRAL):
            checks.append(F.abs(v) > F.lit(LONG))
    return fold(lambda a, b: a | b, checks)


def _emitted(node: ir.Reduce, running: DataFrame, keys: list[str], terms: list[tuple],
             frontier: int) -> DataFrame:
    """Each row's result at its time (+1 from the frontier on) and retracted at the key's
    next time (-1), where the group exists: its weight (a sum's non-null one) is not zero.
    Rows of unsure keys come out too; the caller replaces them."""
    red = node.reduction
    at = {(w, c): f"{n}_now" for n, w, c in terms}
    values = []
    for name, kind, column in red.value_parts():
        if kind == "count":
            values.append(F.col(at[("weight", column)]).alias(name))
        else:
            values.append(F.col(at[("value", column)]).alias(name))
    exists = F.col(at[("weight", None)] if red.kind != "sum" else
                   at[("weight", red.column)]) != 0
    emitted = signed(F.col(TIME), F.col(NEXT), F.lit(1).cast("bigint"), frontier)
    return (running.where(exists)
            .select(*[F.col(q(k)) for k in keys], *values, F.inline(emitted)))
