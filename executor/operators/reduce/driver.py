"""The reduce family on the driver: the keys a step touches, re-evaluated at each of its times.

Same contract as executor/operators/reduce/spark.py on Spark. For every key the step touches, the key's
accumulated multiset is rebuilt at the last complete time F-1 (its updates in the trace's
mirror) and at each time of the step's updates (the grid); the reduction runs per (key, grid
time), and each result is emitted at its time and retracted at the key's next grid time.
Everything is int64 codes (executor/arrange/encoding.py); values are decoded only where a reduction
needs them (a DOUBLE sum, an order over strings, a user expression or kernel). What the
driver cannot reproduce exactly (an int64 overflow that Spark would report, a decimal result
at another scale) raises Unsupported and the step runs on Spark. count, distinct of whole
records and sums over exact types keep running totals instead (executor/operators/reduce/totals.py), which
sends here only the keys their totals cannot decide.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import DecimalType, DoubleType, FloatType, StructField, StructType

from executor.arrange.changes import Changes, Unsupported
from executor.arrange.encoding import (NULL_CODE, NoCode, arrow_schema, arrow_type, float_codes,
                                       float_values, order_keys, ordered, rank)
from executor.operators.linear import expressions
from executor.time import DIFF, TIME
from gpu_kernels import (DiffOverflow, consolidate, distinct, group_ids, group_starts,
                         multiply_diffs, running_segments, sort_by, spans, sum_segments,
                         to_numpy)
from plans import ir
from plans.reduce_kernel import call_reduce_kernel

_SAFE = 2.0 ** 62  # sums whose |terms| add up below this cannot overflow int64


def delta(step, node: ir.Reduce, view, ready, held=None):
    """The reduction's changes for the step (unconsolidated Changes in the node's schema):
    at the times of `ready` (the updates due before upto). The history is the trace's
    (mirror and step batch); its updates at later times fall after every grid time. `held`
    (a Run in the mirror's columns) replaces the mirror's updates under the touched keys
    where fewer decide the result (top_k's candidates, executor/operators/reduce/top_k.py)."""
    xp, batch, old = step.xp, view.batch, view.old
    schema = step.runner.node_schemas[node]
    if ready.size == 0:
        return step.empty(schema)
    columns, nkeys = old.columns, old.nkeys
    kinds = {f.name: f.dataType for f in batch.schema.fields}
    touched = [ready.col(c) for c in columns[:nkeys]]
    fresh = [batch.col(c) for c in columns]
    held = old.rows(touched) if held is None else held
    cols = [xp.concat([h, b]) for h, b in zip(held.cols, fresh)]
    t, d = xp.concat([held.t, batch.t]), xp.concat([held.d, batch.d])

    # the grid: each touched key at F-1 and at each time of its updates, sorted by (key, time)
    h = t.shape[0]
    ids = _ids(xp, [xp.concat([c, r]) for c, r in zip(cols[:nkeys], touched)], h + ready.size)
    kid, bk = ids[:h], ids[h:]
    keys_once = distinct(xp, bk)
    (gk, gt), _ = consolidate(xp, [xp.concat([bk, keys_once]), xp.concat(
        [ready.t, xp.full(keys_once.shape, step.lower - 1, dtype=xp.int64)])],
        xp.ones(bk.shape[0] + keys_once.shape[0], dtype=xp.int64))
    times = distinct(xp, gt)
    n_times = times.shape[0]
    gcode = gk * n_times + xp.searchsorted(times, gt)
    first = xp.searchsorted(times, xp.maximum(t, xp.asarray(step.lower - 1)), side="left")
    lo = xp.searchsorted(gcode, kid * n_times + first, side="left")
    hi = xp.searchsorted(gcode, kid * n_times + n_times, side="left")
    row, grid = spans(xp, lo, hi)

    # each (key, grid time)'s accumulated multiset: rows sorted by (grid entry, record)
    acc, m = consolidate(xp, [grid, *[xp.take(c, row) for c in cols]], xp.take(d, row))
    g, acc = acc[0], dict(zip(columns, acc[1:]))
    records = [f.name for f in batch.schema.fields[:-2]]
    out_g, out, out_m = reduced(step, node, g, acc, m, kinds, records, schema)

    # each result at its grid time, retracted at the key's next grid time
    n = gk.shape[0]
    later = xp.minimum(out_g + 1, xp.asarray(n - 1))
    has_next = xp.logical_and(out_g + 1 < n, xp.take(gk, later) == xp.take(gk, out_g))
    now = xp.nonzero(xp.take(gt, out_g) >= step.lower)[0]
    nxt = xp.nonzero(has_next)[0]
    names = [f.name for f in schema.fields[:-2]]
    return Changes(schema, [xp.concat([xp.take(out[c], now), xp.take(out[c], nxt)]) for c in names],
                   xp.concat([xp.take(gt, xp.take(out_g, now)),
                              xp.take(gt, xp.take(later, nxt))]),
                   xp.concat([xp.take(out_m, now), -xp.take(out_m, nxt)]))


def reduced(step, node: ir.Reduce, g, acc: dict, m, kinds: dict, records: list, schema):
    """The reduction of every group of accumulated rows (group entry g, {column: codes},
    multiplicity m; sorted by g): (group entry, {output column: codes}, multiplicity) per
    output record."""
    try:
        return _REDUCE[node.reduction.kind](step, node, g, acc, m, kinds, records, schema)
    except DiffOverflow:
        raise Unsupported(f"{node.label()}: an int64 overflow (Spark reports it)") from None


def _ids(xp, keys: list, n: int):
    """A dense int64 id per row, equal iff the rows' key columns are equal (0 without keys)."""
    return group_ids(xp, keys) if keys else xp.zeros(n, dtype=xp.int64)


def _groups(xp, g):
    """(group entries, first row of each) of rows sorted by group."""
    starts = group_starts(xp, [g])
    return xp.take(g, starts), starts


def _per_group(xp, g, groups, values, fill):
    """values indexed by group (rows `g` sorted, one value per distinct g) spread onto
    `groups`, with `fill` where a group has none."""
    out = xp.full(groups.shape, fill, dtype=xp.int64)
    if g.shape[0] == 0:
        return out
    at = xp.searchsorted(groups, g)
    out[at] = values
    return out


# ---------------------------------------------------------------------- the reductions
# Each takes the accumulated rows (group entry g, columns, multiplicity m; sorted by g) and
# returns (group entry, {output column: codes}, multiplicity) per output record.

def _keyed(step, node, g, acc, value, m_out):
    xp = step.xp
    groups, starts = _groups(xp, g)
    out = {k: xp.take(acc[k], starts) for k in node.by}
    out[node.reduction.column] = value
    return groups, out, m_out


def _sum(step, node, g, acc, m, kinds, records, schema):
    """A DOUBLE sum, over its group at each time: float addition depends on its order, so a
    running total would drift from the sum of the group. Also the keys of an exact sum that
    its totals cannot decide (executor/operators/reduce/totals.py)."""
    column = node.reduction.column
    value = _sum_values(step, node, g, acc[column], m, kinds[column], schema[column].dataType)
    return _keyed(step, node, g, acc, value, step.xp.ones(value.shape, dtype=step.xp.int64))


def _sum_values(step, node, g, x, m, kind, out_kind):
    """Per group of `g`, the sum of x*m over the non-null x (NULL where there is none)."""
    xp = step.xp
    live = xp.nonzero(x != NULL_CODE)[0]
    xl, ml, gl = xp.take(x, live), xp.take(m, live), xp.take(g, live)
    groups, _ = _groups(xp, g)
    if isinstance(kind, (DoubleType, FloatType)):
        vals = float_values(to_numpy(xp, xl)) * to_numpy(xp, ml)
        sums = _segment_sums(to_numpy(xp, gl), vals)
        value = xp.asarray(float_codes(sums))
    else:
        same_scale(node, kind, out_kind)
        terms = multiply_diffs(xp, xl, ml)
        if float(xp.sum(xp.abs(xp.astype(terms, xp.float64)))) >= _SAFE:
            raise Unsupported(f"{node.label()}: a sum near the int64 range")
        value = xp.asarray(_segment_sums(to_numpy(xp, gl), to_numpy(xp, terms)))
        within_precision(xp, node, value, out_kind)
    present, _ = _groups(xp, gl)
    return _per_group(xp, present, groups, value, NULL_CODE)


def same_scale(node, kind, out_kind) -> None:
    """Unsupported where a sum's type scales its DECIMAL input (the driver adds unscaled
    integers as they are; Spark's Sum keeps the scale, so this guards a typing change)."""
    if isinstance(out_kind, DecimalType) and out_kind.scale != kind.scale:
        raise Unsupported(f"{node.label()}: a sum of {kind.simpleString()} typed "
                          f"{out_kind.simpleString()}")


def within_precision(xp, node, unscaled, kind) -> None:
    """Unsupported (the step runs on Spark, whose Sum raises or gives NULL by its ANSI
    setting) where a DECIMAL total has more digits than its type, DECIMAL(p + 10, s), holds."""
    # abs of NULL_CODE (int64's minimum) wraps to itself, below any bound
    if isinstance(kind, DecimalType) and kind.precision <= 18 and bool(xp.any(
            xp.abs(unscaled) >= 10 ** kind.precision)):
        raise Unsupported(f"{node.label()}: a total beyond DECIMAL({kind.precision}, "
                          f"{kind.scale})")


def _segment_sums(g: np.ndarray, values: np.ndarray) -> np.ndarray:
    if g.shape[0] == 0:
        return values[:0]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    return np.add.reduceat(values, starts)


def _extreme(step, node, g, acc, m, kinds, records, schema):
    """min or max, present while a record has positive multiplicity."""
    xp, red = step.xp, node.reduction
    positive = xp.nonzero(m > 0)[0]
    g, m = xp.take(g, positive), xp.take(m, positive)
    acc = {c: xp.take(v, positive) for c, v in acc.items()}
    value = _extreme_values(step, red.kind, g, acc[red.column], m, kinds[red.column])
    return _keyed(step, node, g, acc, value, xp.ones(value.shape, dtype=xp.int64))


def _extreme_values(step, which: str, g, x, m, kind):
    """Per group of `g`, the least (`which` min) or greatest non-null x among rows of
    positive multiplicity (NULL where there is none)."""
    xp = step.xp
    groups, _ = _groups(xp, g)
    live = xp.nonzero(xp.logical_and(m > 0, x != NULL_CODE))[0]
    gl, xl = xp.take(g, live), xp.take(x, live)
    keys = xp.asarray(order_keys(step.encoder, to_numpy(xp, xl), kind))
    perm = sort_by(xp, [gl, keys])
    gs = xp.take(gl, perm)
    starts = group_starts(xp, [gs])
    pick = starts if which == "min" or not gs.shape[0] else xp.concat(
        [starts[1:], xp.asarray([gs.shape[0]], dtype=xp.int64)]) - 1
    return _per_group(xp, xp.take(gs, pick), groups, xp.take(xp.take(xl, perm), pick),
                      NULL_CODE)


def _aggregate(step, node, g, acc, m, kinds, records, schema):
    """Every value of the group at once (plans/semantics.py `_aggregate_value`); a group is
    present while it has records."""
    xp = step.xp
    groups, starts = _groups(xp, g)
    out = {k: xp.take(acc[k], starts) for k in node.by}
    for name, kind, column in node.reduction.parts:
        x = acc[column] if column is not None else None
        if kind == "count":
            counted = m if x is None else xp.where(x != NULL_CODE, m, xp.zeros_like(m))
            out[name] = sum_segments(xp, counted, starts)
        elif kind == "sum":
            out[name] = _sum_values(step, node, g, x, m, kinds[column], schema[name].dataType)
        else:
            out[name] = _extreme_values(step, kind, g, x, m, kinds[column])
    return groups, out, xp.ones(groups.shape, dtype=xp.int64)


def _top_k(step, node, g, acc, m, kinds, records, schema):
    xp, red = step.xp, node.reduction
    positive = xp.nonzero(m > 0)[0]
    g, m = xp.take(g, positive), xp.take(m, positive)
    acc = {c: xp.take(v, positive) for c, v in acc.items()}
    keys = [g, *order_columns(step, acc, kinds, records, red.order)]
    perm = sort_by(xp, keys)
    rest = [c for c in records if c not in node.by]  # group keys are equal within a group
    perm = _ties_ordered(step, perm, [xp.take(k, perm) for k in keys],
                         [acc[c] for c in rest], [kinds[c] for c in rest])
    g, m = xp.take(g, perm), xp.take(m, perm)
    before = running_segments(xp, m, group_starts(xp, [g])) - m
    keep = xp.nonzero(before < red.k)[0]
    return (xp.take(g, keep), {c: xp.take(xp.take(acc[c], perm), keep) for c in records},
            xp.minimum(xp.take(m, keep), red.k - xp.take(before, keep)))


def _ties_ordered(step, perm, ranked: list, rest: list, kinds: list):
    """`perm` (rows sorted by the `ranked` columns, given in that order) with each run of
    rows equal in them sorted by the `rest` of their record in Spark's order. Only the
    tied rows' values are ranked: a STRING's rank decodes its values, and ties are few
    (a top 20 of 38,000 customers by revenue had none)."""
    xp = step.xp
    n = perm.shape[0]
    if n < 2 or not rest:
        return perm
    starts = group_starts(xp, ranked)
    if starts.shape[0] == n:  # no ties
        return perm
    ends = xp.concat([starts[1:], xp.asarray([n], dtype=xp.int64)])
    long = xp.nonzero(ends - starts > 1)[0]
    run, tied = spans(xp, xp.take(starts, long), xp.take(ends, long))  # sorted positions
    rows = xp.take(perm, tied)
    keys = [xp.asarray(order_keys(step.encoder, to_numpy(xp, xp.take(c, rows)), kind))
            for c, kind in zip(rest, kinds)]
    within = sort_by(xp, [run, *keys])
    out = xp.asarray(perm, copy=True)
    out[tied] = xp.take(rows, within)
    return out


def order_columns(step, acc: dict, kinds: dict, records: list, order: tuple,
                  ranks: bool = True):
    """int64 columns that sort the records (`acc`: {column: codes}) as top_k's ORDER BY
    does. Per key, over a type whose codes sort as its values (executor/arrange/encoding.py
    `ordered`): a nulls flag, then the code (complemented for DESC). Over another type (a
    STRING): the values' dense ranks among these records where `ranks`, else None is
    returned (no column that other records could be compared by)."""
    xp = step.xp
    order = [(_named(e, acc), descending, nulls) for e, descending, nulls in order]
    computed = iter(expression_values(step, acc, kinds, records,
                                      [e for e, _, _ in order if e not in acc]))
    out = []
    for e, descending, nulls_first in order:
        values = None if e in acc else next(computed)
        kind = kinds[e] if e in acc else from_arrow_type(values.type)
        if not ordered(kind):
            if not ranks:
                return None
            values = step.encoder.decode(to_numpy(xp, acc[e]), kind) if e in acc else values
            out.append(xp.asarray(rank(values, descending, nulls_first)))
            continue
        try:
            codes = acc[e] if e in acc else xp.asarray(step.encoder.encode(values, kind))
        except NoCode:  # a DECIMAL result beyond int64
            if not ranks:
                return None
            out.append(xp.asarray(rank(values, descending, nulls_first)))
            continue
        null = codes == NULL_CODE
        one, zero = xp.ones_like(codes), xp.zeros_like(codes)
        out.append(xp.where(null, zero, one) if nulls_first else xp.where(null, one, zero))
        out.append(xp.where(null, zero, xp.bitwise_invert(codes) if descending else codes))
    return out


_QUOTED = re.compile(r"`((?:[^`]|``)+)`")


def _named(expr: str, acc: dict) -> str:
    """The column a quoted name (`revenue`, as the SQL front end writes an ORDER BY column)
    reads, when the records have it; else the expression as it is. Its codes are then read
    as they are, not decoded, evaluated and coded again."""
    quoted = _QUOTED.fullmatch(expr.strip())
    name = quoted.group(1).replace("``", "`") if quoted else None
    return name if name in acc else expr


def _count(step, node, g, acc, m, kinds, records, schema):
    """A count over its group (one whose totals live elsewhere, executor/operators/reduce/totals.py): the sum
    of the multiplicities, present while non-zero."""
    xp = step.xp
    groups, starts = _groups(xp, g)
    total = sum_segments(xp, m, starts)
    keep = xp.nonzero(total != 0)[0]
    out = {k: xp.take(xp.take(acc[k], starts), keep) for k in node.by}
    out[schema.fields[len(node.by)].name] = xp.take(total, keep)
    return xp.take(groups, keep), out, xp.ones(keep.shape, dtype=xp.int64)


def _distinct(step, node, g, acc, m, kinds, records, schema):
    xp = step.xp
    positive = xp.nonzero(m > 0)[0]
    return (xp.take(g, positive), {c: xp.take(acc[c], positive) for c in records},
            xp.ones(positive.shape, dtype=xp.int64))


def _threshold(step, node, g, acc, m, kinds, records, schema):
    """Each record's multiplicity becomes CAST(expr AS BIGINT) over `count` = its
    multiplicity (a null or 0 drops it), evaluated once per distinct multiplicity."""
    xp = step.xp
    counts = to_numpy(xp, distinct(xp, m))
    table = pa.table({"count": pa.array(counts, type=pa.int64())})
    (f,) = _evaluate(step, table, StructType.fromDDL("count BIGINT"),
                     [f"CAST(({node.reduction.expr}) AS BIGINT)"])
    values = f.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    mult = xp.asarray(values[np.searchsorted(counts, to_numpy(xp, m))])
    keep = xp.nonzero(mult != 0)[0]
    return (xp.take(g, keep), {c: xp.take(acc[c], keep) for c in records},
            xp.take(mult, keep))


def _kernel(step, node, g, acc, m, kinds, records, schema):
    """A user reduction kernel (README "Reductions") over many groups in one call."""
    xp, red = step.xp, node.reduction
    groups, starts = _groups(xp, g)
    group = xp.searchsorted(groups, g)
    values = [c for c in records if c not in node.by]
    cols = {c: xp.asarray(step.encoder.decode(to_numpy(xp, acc[c]), kinds[c])
                          .to_numpy(zero_copy_only=False)) for c in values}
    out_group, res, count = call_reduce_kernel(red, xp, group, cols, m, int(groups.shape[0]))
    keep = xp.nonzero(count != 0)[0]
    firsts = xp.take(starts, xp.take(out_group, keep))
    out = {k: xp.take(acc[k], firsts) for k in node.by}
    for f in StructType.fromDDL(red.schema).fields:
        column = pa.array(to_numpy(xp, res[f.name]))
        out[f.name] = xp.asarray(step.encoder.encode(column, f.dataType))[keep]
    return xp.take(groups, xp.take(out_group, keep)), out, xp.take(count, keep)


def expression_values(step, acc, kinds, records, exprs) -> list:
    """Arrow columns of `exprs` over the decoded records: a record column as itself, any
    other expression by Spark over the local rows (no job)."""
    xp = step.xp
    if all(e in records for e in exprs):
        return [step.encoder.decode(to_numpy(xp, acc[e]), kinds[e]) for e in exprs]
    schema = StructType([StructField(c, kinds[c], True) for c in records])
    table = pa.Table.from_arrays([step.encoder.decode(to_numpy(xp, acc[c]), kinds[c])
                                  for c in records], schema=arrow_schema(schema))
    return _evaluate(step, table, schema, exprs)


def _evaluate(step, table: pa.Table, schema: StructType, exprs: list[str]) -> list:
    """Spark expressions over local rows: on Arrow where executor/operators/linear/expressions.py compiles
    them, else by Catalyst on the driver (no job)."""
    n = table.num_rows
    updates = table.append_column(TIME, pa.array(np.zeros(n, dtype=np.int64))) \
        .append_column(DIFF, pa.array(np.ones(n, dtype=np.int64)))
    named = [f"{e} AS `_{i}`" for i, e in enumerate(exprs)]
    try:
        out = expressions.compile_stages((ir.Map(tuple(named)),), updates.schema,
                                         conf=step.runner.conf)(updates)
        return [out.column(i).combine_chunks() for i in range(len(exprs))]
    except (expressions.NotCompiled, expressions.Fallback):
        pass
    frame = step.spark.createDataFrame(table) if n else step.spark.createDataFrame([], schema)
    projected = frame.selectExpr(*exprs)
    rows = projected.collect()
    return [pa.array([r[i] for r in rows], type=arrow_type(f.dataType))
            for i, f in enumerate(projected.schema.fields)]


_REDUCE = {"count": _count, "sum": _sum, "min": _extreme, "max": _extreme,
           "aggregate": _aggregate, "top_k": _top_k,
           "distinct": _distinct, "threshold": _threshold, "kernel": _kernel}
