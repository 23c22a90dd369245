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
(keyed.py `signed`), without reading the history of the keys. A step of one time (upto =
frontier + 1, the common case) needs no window: one aggregate per key gives the totals
before and after, and the results that differ come out consolidated, so the runner skips
its consolidation of the output. A count over a counted arrangement (counted.py) reads
that arrangement's trace as its totals, and one over another runner's trace its batches.

A zero weight does not prove a group empty (+1 and -1 of different records cancel), nor a
zero non-null weight a sum NULL: those keys, and any whose total left a value's range, are
re-evaluated from their groups by the grid path (spark.py `_regrouped`), and only those. One
job computes the running totals and counts those keys; with none, no group is read at all.
Value totals are DECIMAL(38, s) (s the column's scale, 0 for integers; s <= 6, as Spark's
product DECIMAL(38, s) * BIGINT keeps a scale up to 6 and would round a finer one). x*m and
the sums are taken by try_multiply and try_sum, which give NULL, never a rounded or wrapped
value, past DECIMAL(38, s): a key with such a total counts it in its `lost` total, which
only grows and is summed like the others, and is re-evaluated from its group at every step
that touches it. So a wide DECIMAL (a product of prices, DECIMAL(32, 4)) keeps totals too.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce as fold
from typing import Optional

from pyspark.sql import DataFrame, Window, functions as F
from pyspark.sql.types import DecimalType, StructType

from executor.arrange.consolidate import consolidate
from executor.arrange.encoding import INTEGRAL
from executor.arrange.spine import STEP, Spine, checkpoint, deferred, projected
from executor.operators.linear.spark import q
from executor.operators.reduce.keyed import of_keys, signed
from executor.time import DIFF, TIME
from plans import ir

SEEN, NEXT, OUT, ROWS, UNSURE = "__seen", "__next", "__out", "__rows", "__unsure"
LONG = 2 ** 63 - 1
BROADCAST_ROWS = 100_000  # unsure keys beyond it are joined by a shuffle, not broadcast
# totals of at most this many keys are read whole by the step's one job: picking the touched
# keys' instead takes a job of its own (0.3-0.7 s at 1M orders). Measured (a sum by customer,
# 8 steps of 1,000 changes, medians): about 10k keys, whole 1.40 s and picked 2.24 s; about
# 30k keys, whole 2.18 s and picked 1.90 s
WHOLE_KEYS = 10_000


@dataclass(frozen=True)
class Totals:
    """The totals of one reduction over one trace: a spine of (key columns, term columns)
    batches whose sums per key hold everything before the frontier `at`."""

    spine: Spine
    at: int
    keys: Optional[int] = None  # at most this many keys (rows summed per key); None: unknown


@dataclass(frozen=True)
class After:
    """What a step leaves of the totals: `rows` to append to them, or (`whole`) the totals
    of every key, which replace them; at most how many keys they hold (None: not
    counted)."""

    rows: DataFrame
    keys: Optional[int]
    whole: bool


def carried(trace, red: ir.Reduction, upper: int) -> None:
    """A step that left the reduction's input alone: its totals hold up to `upper`."""
    kept = trace.spark_totals.get(red)
    if kept is not None:
        trace.spark_totals[red] = Totals(kept.spine, upper, kept.keys)


def layout(node: ir.Reduce, kinds: dict) -> Optional[list[tuple]]:
    """The totals the reduction keeps, as (column name, what, input column): what is
    "weight" (column None: every record), "value", or "lost" (column None: the updates
    whose value totals left DECIMAL(38, s)); None where this path does not apply (min,
    max, top_k, a DOUBLE sum, a DECIMAL of scale above 6)."""
    red = node.reduction
    if red.kind not in ("count", "sum", "aggregate"):
        return None
    specs = [] if red.kind == "sum" else [("weight", None)]
    for _, kind, column in red.value_parts():
        if kind not in ("count", "sum"):
            return None
        if kind == "sum" and value_type(kinds[column]) is None:
            return None
        wanted = [("weight", column)] + ([("value", column)] if kind == "sum" else [])
        specs += [w for w in wanted if w not in specs]
    if any(what == "value" for what, _ in specs):
        specs.append(("lost", None))
    return [(f"__t{i}", what, column) for i, (what, column) in enumerate(specs)]


def value_type(t) -> Optional[DecimalType]:
    """The type of a value total over a column of type t, where x*m is exact in it."""
    if isinstance(t, INTEGRAL):
        return DecimalType(38, 0)
    if isinstance(t, DecimalType) and t.scale <= 6:
        return DecimalType(38, t.scale)
    return None


def term(what: str, column, kinds: dict):
    """A term of one update (weight m, or x*m), zero where its column is null; x*m is NULL
    where it leaves DECIMAL(38, s)."""
    m = F.col(DIFF)
    if what == "weight":
        return m if column is None else \
            F.when(F.col(q(column)).isNotNull(), m).otherwise(F.lit(0).cast("bigint"))
    t = value_type(kinds[column])
    x = F.col(q(column))
    return F.when(x.isNull(), F.lit(0).cast(t)).otherwise(F.try_multiply(x.cast(t), m))


def _terms(terms: list[tuple], kinds: dict) -> list:
    """Each total's term of one update, named; `lost` is 1 where a value term is NULL."""
    each = {n: term(w, c, kinds) for n, w, c in terms if w != "lost"}
    values = [each[n] for n, w, _ in terms if w == "value"]
    return [(any_null(values) if w == "lost" else each[n]).alias(n) for n, w, _ in terms]


def any_null(columns: list):
    """1 where any of `columns` is NULL, else 0 (BIGINT)."""
    return F.when(fold(lambda a, b: a | b, [c.isNull() for c in columns]), 1) \
        .otherwise(0).cast("bigint")


def _sums(terms: list[tuple], suffix: str = "", of=F.col, over=None) -> list:
    """Aggregates summing each total's column `of(name)`, as name + suffix: value totals by
    try_sum (NULL past DECIMAL(38, s)); `over`: a window."""
    sums = [(F.try_sum if w == "value" else F.sum)(of(n)) for n, w, _ in terms]
    return [(x if over is None else x.over(over)).alias(n + suffix)
            for x, (n, _, _) in zip(sums, terms)]


def _summed(grouped, terms: list[tuple]) -> DataFrame:
    """Each total summed per group of `grouped` (GroupedData), its lost total counting a
    value sum that came out NULL."""
    return _counted(grouped.agg(*_sums(terms)), terms)


def _counted(df: DataFrame, terms: list[tuple], suffix: str = "") -> DataFrame:
    """`df` with its lost total (column lost + suffix) raised by 1 where a value total came
    out NULL: a sum past DECIMAL(38, s)."""
    values = [F.col(n + suffix) for n, w, _ in terms if w == "value"]
    if not values:
        return df
    lost = next(n for n, w, _ in terms if w == "lost") + suffix
    return df.withColumn(lost, F.col(lost) + any_null(values))


def delta(node: ir.Reduce, view, ready: DataFrame, frontier: int, kept: Optional[Totals],
          terms: list[tuple], upper: int, same, regrouped, schema: StructType,
          single: bool) -> tuple[DataFrame, Totals]:
    """(the reduction's changes at the times of `ready`, of `schema`, the totals after them).
    `kept`: the totals last kept (None: none), rebuilt from the trace's batches unless they
    hold as of `frontier`; the rest as `changes`."""
    kq = list(map(q, node.by))
    if kept is None or kept.at != frontier:
        kinds = {f.name: f.dataType for f in ready.schema.fields}
        kept = _rebuilt(view, frontier, kq, terms, kinds)
    out, after = changes(node, ready, frontier, [b for _, b in kept.spine.batches], terms,
                         same, regrouped, schema, single, kept.keys, keeps=True)
    spine = _spine(kq, terms) if after.whole else kept.spine
    return out, Totals(spine.appended(after.rows, 1), upper, after.keys)



def count_changes(node: ir.Reduce, view, ready: DataFrame, frontier: int, same,
                  schema: StructType, single: bool) -> DataFrame:
    """A count's changes where no totals are kept beside its arrangement: the diffs of the
    arrangement's batches before the step sum per key to its counts, whether they are the
    updates (an imported trace) or a counted arrangement's totals (counted.py)."""
    terms = layout(node, {})  # a count's: the weight of every record
    held = [b.select(*map(q, node.by), F.col(DIFF).alias(terms[0][0])) for b in view.old]
    return changes(node, ready, frontier, held, terms, same, None, schema, single)[0]


def changes(node: ir.Reduce, ready: DataFrame, frontier: int, held: list[DataFrame],
            terms: list[tuple], same, regrouped, schema: StructType, single: bool,
            keys_held: Optional[int] = None,
            keeps: bool = False) -> tuple[DataFrame, After]:
    """(the reduction's changes at the times of `ready`, of `schema`; the totals after them:
    key columns and `terms`' columns).
    `held`: frames of totals (key columns and `terms`' columns, summed per key) before
    `frontier`;
    `regrouped(keys, broadcast)`: the grid path's changes for those keys (a frame of key
    columns; `broadcast`: whether it is small enough to broadcast), never called for a
    count;
    `single`: every update of `ready` is at time `frontier` (a step of one time): one
    aggregate per key replaces the window over times, and the changes come out
    consolidated;
    `keys_held`: at most how many keys `held` holds (None: unknown, or `held` are not
    totals), so that a step of one time reads them whole when they are few;
    `keeps`: the caller keeps the totals, so a count counts their keys where that lets the
    next step read them whole."""
    keys = list(node.by)
    kq = list(map(q, keys))
    kinds = {f.name: f.dataType for f in ready.schema.fields}
    rows = ready.select(*kq, TIME, *_terms(terms, kinds))
    if not single:
        rows = _summed(rows.groupBy(*kq, TIME), terms)
    rows = rows.withColumn(SEEN, F.lit(False))
    # a step of one time reads few totals (a global reduction's one key) whole, by its one
    # job, and keeps the keys it touched (ROWS > 0); its totals after replace them (no
    # merges). Other totals are picked by a broadcast of the step's keys, a job of its own
    # run when the step's plan is made
    whole = single and bool(held) and (
        not kq or (keys_held is not None and keys_held <= WHOLE_KEYS))
    if held:
        totals = fold(DataFrame.unionByName, held)
        picked = totals if whole else of_keys(totals, ready, kq, same)
        base = (_summed(picked.groupBy(*kq), terms)
                .withColumn(TIME, F.lit(frontier - 1).cast("bigint"))
                .withColumn(SEEN, F.lit(True)))
        rows = rows.unionByName(base.select(*rows.columns))
    running = _per_key(rows, kq, terms, bool(held)) if single else \
        _over_times(rows, kq, terms)
    if single:  # each key's changes, computed with its totals by the same job: the step's
        # output is a projection of that job's checkpoint (no job of its own)
        running = running.withColumn(OUT, _changes(node, terms, schema))
    # the count of the totals' keys after the step, where the step reads every key
    learn = keeps and bool(kq) and (whole or not held)

    def emitted(computed: DataFrame) -> DataFrame:
        return projected(_inlined(computed.where(F.col(ROWS) > 0), keys, frontier, schema)) \
            if single else _emitted(node, computed, keys, terms, frontier, schema)

    if node.reduction.kind == "count":  # always decided: the rows are computed lazily
        running = checkpoint(running, eager=False, storage=STEP)
        return emitted(running), After(_added(running, kq, terms, single, whole),
                                       running.count() if learn else None, whole)
    doubt = _unsure(node, terms, kinds, "now")
    if single:  # the result retracted is decided by the totals before; keys read whole
        # but not touched are left alone
        doubt = (doubt | (F.col(SEEN) & _unsure(node, terms, kinds, "before"))) & \
            (F.col(ROWS) > 0)
    # one job computes the running totals (kept), counts the rows they cannot decide and
    # the keys
    running = checkpoint(running.withColumn(UNSURE, doubt), eager=False, storage=STEP)
    every, unsure = running.agg(F.count(F.lit(1)), F.count(F.when(F.col(UNSURE), 1))).first()
    out = emitted(running)
    after = After(_added(running, kq, terms, single, whole), every if learn else None, whole)
    if not unsure:
        return out, after
    bad = running.where(UNSURE).select(*kq).distinct()
    small = unsure <= BROADCAST_ROWS
    decided = of_keys(out, bad, kq, same, how="left_anti", broadcast=small)
    again = _cast(regrouped(bad, small), schema)
    return decided.unionByName(consolidate(again, [TIME]) if single else again), after


def _added(running: DataFrame, kq: list[str], terms: list[tuple], single: bool,
           whole: bool) -> DataFrame:
    """The rows the step adds to the totals (read from the checkpointed `running`, so that
    the spine never recomputes them): its terms per touched key (and time); `whole`: every
    key's totals after the step."""
    if whole:
        return running.select(*kq, *[F.col(f"{n}_now").alias(n) for n, _, _ in terms])
    step = running.where(F.col(ROWS) > 0) if single else running.where(~F.col(SEEN))
    return step.select(*kq, *[F.col(f"{n}_step").alias(n) for n, _, _ in terms])


def _per_key(rows: DataFrame, kq: list[str], terms: list[tuple], held: bool) -> DataFrame:
    """One row per key of `rows`: its totals before the step (`_before`), the step's terms
    (`_step`) and the totals after (`_now`), whether it was seen before (never, without
    `held` totals: one sum per term) and the step's rows of it (ROWS; 0: a key of totals
    read whole, or a global reduction's one row over none)."""
    some = [F.count(F.when(~F.col(SEEN), 1)).alias(ROWS)]
    if not held:
        per_key = _counted(rows.groupBy(*kq).agg(*some, *_sums(terms, "_step")), terms, "_step")
        per_key = per_key.select("*", F.lit(False).alias(SEEN), *[
            c for n, _, _ in terms for c in (F.col(f"{n}_step").alias(f"{n}_now"),
                                             (F.col(f"{n}_step") * 0).alias(f"{n}_before"))])
    else:
        fresh = _sums(terms, "_step", lambda n: F.when(~F.col(SEEN), F.col(n)))
        per_key = rows.groupBy(*kq).agg(*some, F.max(SEEN).alias(SEEN), *fresh,
                                        *_sums(terms, "_now"))
        per_key = _counted(_counted(per_key, terms, "_step"), terms, "_now")
        per_key = per_key.select("*", *[F.try_subtract(F.col(f"{n}_now"), F.col(f"{n}_step"))
                                        .alias(f"{n}_before") for n, _, _ in terms])
    return per_key


def _over_times(rows: DataFrame, kq: list[str], terms: list[tuple]) -> DataFrame:
    """Per touched key and time: the running totals (`_now`), the key's next time, and the
    row's own terms (`_step`: the step's, or on the baseline row (SEEN) the totals before)."""
    w = Window.partitionBy(*kq).orderBy(TIME)
    run = w.rowsBetween(Window.unboundedPreceding, 0)
    return _counted(rows.select(*kq, TIME, SEEN,
                                *[F.col(n).alias(f"{n}_step") for n, _, _ in terms],
                                *_sums(terms, "_now", over=run),
                                F.lead(TIME).over(w).alias(NEXT)), terms, "_now")


def _rebuilt(view, frontier: int, kq: list[str], terms: list[tuple], kinds: dict) -> Totals:
    """The totals of every key from the trace's batches before `frontier` (once, after a
    step that did not keep them: the first, a driver step, a resume)."""
    spine = _spine(kq, terms)
    if not view.old:
        return Totals(spine, frontier, 0)
    rows = fold(DataFrame.union, view.old).where(F.col(TIME) < frontier)
    grouped = _summed(rows.select(*kq, *_terms(terms, kinds)).groupBy(*kq), terms)
    return Totals(spine.appended(checkpoint(grouped, eager=False), 1), frontier)


def _spine(kq: list[str], terms: list[tuple]) -> Spine:
    """An empty spine of totals."""
    return Spine(_merged(kq, terms), slack=4, tiered=True)


def _merged(kq: list[str], terms: list[tuple]):
    """The spine's merge: two batches' totals summed per key (rows whose totals are all zero
    stay: they mark a key seen, whose emptiness only its group can tell)."""
    def merge(df: DataFrame, size: int):
        return deferred(_summed(df.groupBy(*kq), terms)), size
    return merge


def _unsure(node: ir.Reduce, terms: list[tuple], kinds: dict, when: str):
    """Whether a row's totals (`_now` or `_before`) cannot decide the group: a zero weight
    of the group (an aggregate's) or of a sum's non-null records, a value total lost (NULL,
    now or ever: `lost`) or beyond a BIGINT sum's range. A count is always decided: its
    group exists while its weight is not zero."""
    red = node.reduction
    if red.kind == "count":
        return F.lit(False)
    at = _totals(terms, when)
    checks = [at[("lost", None)] > 0] if ("lost", None) in at else []
    if red.kind == "aggregate":
        checks.append(at[("weight", None)] == 0)
    for _, kind, column in red.value_parts():
        if kind != "sum":
            continue
        v = at[("value", column)]
        checks += [at[("weight", column)] == 0, v.isNull()]
        if isinstance(kinds[column], INTEGRAL):
            checks.append(F.abs(v) > F.lit(LONG))
    return fold(lambda a, b: a | b, checks)


def _totals(terms: list[tuple], when: str) -> dict:
    """A row's totals (`_now`, `_before`) as columns by (what, input column)."""
    return {(w, c): F.col(f"{n}_{when}") for n, w, c in terms}


def _result(node: ir.Reduce, terms: list[tuple], when: str, schema: StructType):
    """The result of a row's totals (`_now` or `_before`): its value columns by name, of
    `schema`'s types, and whether the group exists (its weight, a sum's non-null one, is
    not zero)."""
    red = node.reduction
    at = _totals(terms, when)
    values = {name: at[("weight" if kind == "count" else "value", column)]
              .cast(schema[name].dataType) for name, kind, column in red.value_parts()}
    exists = at[("weight", None if red.kind != "sum" else red.column)] != 0
    return values, exists


def _emitted(node: ir.Reduce, running: DataFrame, keys: list[str], terms: list[tuple],
             frontier: int, schema: StructType) -> DataFrame:
    """Each row's result at its time (+1 from the frontier on) and retracted at the key's
    next time (-1), where the group exists. Rows of unsure keys come out too; the caller
    replaces them."""
    values, exists = _result(node, terms, "now", schema)
    emitted = signed(F.col(TIME), F.col(NEXT), F.lit(1).cast("bigint"), frontier)
    return _cast(running.where(exists).select(*map(q, keys), *_named(values),
                                              F.inline(emitted)), schema)


def _changes(node: ir.Reduce, terms: list[tuple], schema: StructType):
    """A row's changes in a step of one time, as an array of (value columns, diff) structs
    of `schema`'s types (the casts are done where the array is computed): per key, the
    result before retracted and the result now inserted where the two differ, so the
    changes are consolidated (two keys' records differ in their key). Rows of unsure keys
    have changes too; the caller replaces them."""
    now, exists_now = _result(node, terms, "now", schema)
    before, exists_before = _result(node, terms, "before", schema)
    exists_before = F.col(SEEN) & exists_before
    differ = fold(lambda a, b: a | b, [~now[n].eqNullSafe(before[n]) for n in now],
                  exists_now != exists_before)
    one = F.lit(1).cast("bigint")
    return F.array_compact(F.array(
        F.when(exists_now & differ, F.struct(*_named(now), one.alias(DIFF))),
        F.when(exists_before & differ, F.struct(*_named(before), (-one).alias(DIFF)))))


def _inlined(running: DataFrame, keys: list[str], frontier: int,
             schema: StructType) -> DataFrame:
    """The changes held in `running`'s OUT column (`_changes`), one row each, at `frontier`."""
    at = F.lit(frontier).cast("bigint").alias(TIME)
    return _cast(running.select(*map(q, keys), F.inline(F.col(OUT)), at), schema)


def _named(values: dict) -> list:
    return [v.alias(n) for n, v in values.items()]


def _cast(df: DataFrame, schema: StructType) -> DataFrame:
    """`df`'s columns in `schema`'s order and types."""
    return df.select(*[F.col(q(f.name)).cast(f.dataType) for f in schema.fields])
