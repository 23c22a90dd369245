"""Joins on the driver placement: the delta rule of spark.py on arrays, each term a lookup of
one side's batch keys in the other side's mirror (executor/arrange/mirror.py); a band join's
second term a range lookup per bound (join/band.py)."""
from __future__ import annotations

from executor.arrange.changes import Changes, updates_schema
from executor.arrange.encoding import NULL_CODE
from executor.arrange.mirror import Mirror, Run
from executor.operators.join import band, spark as join
from executor.operators.query import delta_rules
from executor.time import ITERATION
from gpu_kernels import join_times, multiply_diffs, neighbours
from plans import ir


def delta(step, node: ir.Join) -> Changes:
    """dA x (B_old + dB) + A_old x dB, as spark.py: each term looks one side's batch keys up
    in the other side's mirror."""
    for side in (node.left, node.right):
        step.value(side)
    left, right = step.views[node.left], step.views[node.right]
    lrec, rrec = left.batch.names, right.batch.names
    out = join.output_columns(node, lrec, rrec)
    on = list(node.on)
    fields = {f.name: f for f in right.batch.schema.fields[:len(rrec)]}
    fields |= {f.name: f for f in left.batch.schema.fields[:len(lrec)]}
    k = len(left.batch.times)
    schema = updates_schema([fields[c] for c in out], k > 1)
    if not left.batch.size and not right.batch.size:  # bilinear: no change in, none out
        return step.empty(schema)
    if node.band is not None:
        return _banded(step, node, left, right, schema)
    parts = [_pairs(step, on, _columns(left.batch), _found(right.read, left.batch, on, k),
                    lrec, out),
             _pairs(step, on, _found(left.old, right.batch, on, k), _columns(right.batch),
                    lrec, out)]
    return step.concat([Changes.of(schema, *p) for p in parts])


def _banded(step, node: ir.Join, left, right, schema) -> Changes:
    """A band join's dA x B_new + A_old x dB: dA's pairs with equal keys kept where the band
    holds; each of dB's bounds a range of A_old's band column (A is arranged by (on,
    column)), read weighted by dB's diffs (Mirror.banded), so that a bound that moves reads
    only the rows between its old and new value, not every row of its key."""
    xp, b, on, k = step.xp, node.band, list(node.on), len(left.batch.times)
    lrec = left.batch.names
    kinds = (left.batch.schema[b.column].dataType, right.batch.schema[b.value].dataType)
    a, b_new = _columns(left.batch), _found(right.read, left.batch, on, k)
    i, j = _matches(xp, on, a, b_new)
    low, high = band.bounds(xp, b.op, xp.take(b_new[0][b.value], j), *kinds)
    x = xp.take(a[0][b.column], i)
    kept = xp.nonzero(xp.logical_and(x >= low, x <= high))[0]
    pairs = _paired(xp, a, b_new, xp.take(i, kept), xp.take(j, kept), lrec, lrec)
    rcols, rt, rd = _columns(right.batch)
    low, high = band.bounds(xp, b.op, rcols[b.value], *kinds)
    live = low <= high
    for c in on:  # a null key joins nothing
        live = xp.logical_and(live, rcols[c] != NULL_CODE)
    rows = xp.nonzero(live)[0]
    run, times, weight = left.old.banded([xp.take(rcols[c], rows) for c in on],
                                         xp.take(low, rows), xp.take(high, rows),
                                         [xp.take(t, rows) for t in rt], xp.take(rd, rows))
    ocols, ot, od = _updates(left.old, run, k)
    ranges = ([ocols[c] for c in lrec], list(join_times(xp, tuple(ot), tuple(times))),
              multiply_diffs(xp, od, weight))
    return step.concat([Changes.of(schema, *p) for p in (pairs, ranges)])


def _pairs(step, on: list[str], a: tuple, b: tuple, lrec: list[str], out: list[str]):
    """(columns, times, diff) of every pair of a's and b's updates with equal keys:
    columns from a where a has them, times joined, diffs multiplied."""
    xp = step.xp
    i, j = _matches(xp, on, a, b)
    return _paired(xp, a, b, i, j, lrec, out)


def _paired(xp, a: tuple, b: tuple, i, j, lrec: list[str], out: list[str]):
    """(columns, times, diff) of the pairs (a's row i, b's row j): columns from a where a
    has them, times joined, diffs multiplied."""
    (acols, at, ad), (bcols, bt, bd) = a, b
    cols = [xp.take(acols[c], i) if c in lrec else xp.take(bcols[c], j) for c in out]
    t = join_times(xp, tuple(xp.take(x, i) for x in at), tuple(xp.take(x, j) for x in bt))
    return cols, list(t), multiply_diffs(xp, xp.take(ad, i), xp.take(bd, j))


def _matches(xp, on: list[str], a: tuple, b: tuple):
    """(i, j): the rows of a's and b's updates ({column: array}, times, diff) whose keys are
    equal, a pair per row; a null key joins nothing (Spark's `=`)."""
    (acols, _, ad), (bcols, _, bd) = a, b
    live = xp.ones(ad.shape[0], dtype=xp.bool)
    for k in on:
        live = xp.logical_and(live, acols[k] != NULL_CODE)
    rows = None if bool(xp.all(live)) else xp.nonzero(live)[0]
    keys = [acols[k] if rows is None else xp.take(acols[k], rows) for k in on]
    acode, bcode = delta_rules.codes(xp, keys, [bcols[k] for k in on], keys[0].shape[0],
                                     bd.shape[0])
    order = xp.argsort(bcode)
    ordered = xp.take(bcode, order)
    lo = xp.searchsorted(ordered, acode, side="left")
    hi = xp.searchsorted(ordered, acode, side="right")
    i, j = neighbours(xp, order, lo, hi)
    return (i if rows is None else xp.take(rows, i)), j


def _columns(c: Changes) -> tuple:
    """A batch as ({column: array}, times, diff)."""
    return dict(zip(c.names, c.cols)), c.times, c.d


def _found(mirror: Mirror, batch: Changes, on: list[str], k: int) -> tuple:
    """The mirror's updates under the batch's keys, as ({column: array}, k times, diff)."""
    return _updates(mirror, mirror.rows([batch.col(c) for c in on]), k)


def _updates(mirror: Mirror, run: Run, k: int) -> tuple:
    """A run the mirror read as ({column: array}, k times, diff): an outer mirror read
    inside a scope is at iteration 0."""
    cols = dict(zip(mirror.columns, run.cols))
    inner = cols.pop(ITERATION, None)
    times = [run.t] if k == 1 else [run.t, run.t * 0 if inner is None else inner]
    return cols, times, run.d
