"""Joins on the driver placement: the delta rule of spark.py on arrays, each term a lookup of
one side's batch keys in the other side's mirror (executor/arrange/mirror.py)."""
from __future__ import annotations

from executor.arrange.changes import Changes, updates_schema
from executor.arrange.encoding import NULL_CODE
from executor.arrange.mirror import Mirror
from executor.operators.join import spark as join
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
    parts = [_pairs(step, on, _columns(left.batch), _found(right.read, left.batch, on, k),
                    lrec, out),
             _pairs(step, on, _found(left.old, right.batch, on, k), _columns(right.batch),
                    lrec, out)]
    return step.concat([Changes.of(schema, *p) for p in parts])


def _pairs(step, on: list[str], a: tuple, b: tuple, lrec: list[str], out: list[str]):
    """(columns, times, diff) of every pair of a's and b's updates with equal keys:
    columns from a where a has them, times joined, diffs multiplied."""
    xp = step.xp
    (acols, at, ad), (bcols, bt, bd) = a, b
    live = xp.ones(ad.shape[0], dtype=xp.bool)
    for k in on:  # a null key joins nothing (Spark's `=`)
        live = xp.logical_and(live, acols[k] != NULL_CODE)
    if not bool(xp.all(live)):
        rows = xp.nonzero(live)[0]
        acols = {c: xp.take(v, rows) for c, v in acols.items()}
        at, ad = [xp.take(x, rows) for x in at], xp.take(ad, rows)
    acode, bcode = delta_rules.codes(xp, [acols[k] for k in on], [bcols[k] for k in on],
                                     ad.shape[0], bd.shape[0])
    order = xp.argsort(bcode)
    ordered = xp.take(bcode, order)
    lo = xp.searchsorted(ordered, acode, side="left")
    hi = xp.searchsorted(ordered, acode, side="right")
    i, j = neighbours(xp, order, lo, hi)
    cols = [xp.take(acols[c], i) if c in lrec else xp.take(bcols[c], j) for c in out]
    t = join_times(xp, tuple(xp.take(x, i) for x in at), tuple(xp.take(x, j) for x in bt))
    return cols, list(t), multiply_diffs(xp, xp.take(ad, i), xp.take(bd, j))


def _columns(c: Changes) -> tuple:
    """A batch as ({column: array}, times, diff)."""
    return dict(zip(c.names, c.cols)), c.times, c.d


def _found(mirror: Mirror, batch: Changes, on: list[str], k: int) -> tuple:
    """The mirror's updates under the batch's keys, as ({column: array}, k times, diff): an
    outer mirror read inside a scope is at iteration 0."""
    run = mirror.rows([batch.col(c) for c in on])
    cols = dict(zip(mirror.columns, run.cols))
    inner = cols.pop(ITERATION, None)
    times = [run.t] if k == 1 else [run.t, run.t * 0 if inner is None else inner]
    return cols, times, run.d
