"""The reduce family at product times (epoch, iteration): reductions inside an iterate scope.

With product times a key's reduction can change only at joins of its input times, so per key
it is evaluated on the grid (distinct epochs) x (distinct iterations) of its input updates
and emits the 2-D differences of the results (DESIGN.md section 6): a result r at grid point
(e, i) is emitted +r at (e, i), -r at (e', i) and (e, i'), +r at (e', i'), where e' and i'
are the key's next grid coordinates. These accumulate back to r at every time of the cell.

An iterate step runs round by round in the iteration coordinate; round `i` brings the
updates at iteration i. Only differences at this step's epochs (>= lower) and iterations
>= i can change (earlier epochs are final, earlier iterations were settled by earlier
rounds), so for each key the round touches the reduction re-evaluates those grid points and
emits the desired differences minus what it already emitted there this step: corrections,
whatever order earlier rounds happened to produce them in. Updates of earlier steps
accumulate into the baseline epoch lower-1 (the trace is compacted to it anyway).
"""
from __future__ import annotations

from functools import reduce as fold

from pyspark.sql import DataFrame, Window, functions as F

from executor.arrange.changes import Changes
from executor.arrange.consolidate import consolidate
from executor.arrange.spine import materialise_counted
from executor.arrange.trace import View
from executor.operators.linear.spark import q, record_columns
from executor.operators.reduce.keyed import conjunction, equality, of_keys
from executor.operators.reduce.spark import M, output
from executor.time import DIFF
from gpu_kernels import (consolidate as consolidate_arrays, group_starts, segment_ids, sort_by,
                         spans, sum_segments)
from plans import ir

GE, GI, NE, NI = "__ge", "__gi", "__ne", "__ni"
# A round whose touched history is at most this many updates evaluates in one task: on one
# partition the grid's windows, joins and aggregates need no shuffle. Rounds late in an
# iteration touch a few keys, and a shuffle stage costs ~0.1-0.3 s where the rows cost
# microseconds (measured: ~9 s of a 10 s round was stages over a few hundred rows).
SINGLE_TASK_ROWS = 100_000


def delta(node: ir.Reduce, view: View, emitted, lower: int, round_: int, time_cols,
          empty: DataFrame, backend: str) -> DataFrame:
    """This round's corrections of the reduction's output (records, time, iteration, diff);
    `emitted` holds its changes of the earlier rounds of this step (or None)."""
    epoch, iteration = time_cols
    keys = list(view.keys)
    kq = list(map(q, keys))
    records = record_columns(empty, time_cols)
    same = equality(empty)
    touched = view.delta_frame(empty).select(*kq)
    history = of_keys(fold(DataFrame.union, view.all() or [empty]), touched, kq, same)
    history, size = materialise_counted(history)
    single = size <= SINGLE_TASK_ROWS
    if single:
        history = history.coalesce(1)
    hist = history.withColumn(GE, F.greatest(F.col(q(epoch)), F.lit(lower - 1)))
    grid = _grid(hist, kq, iteration, round_)
    h, g = hist.alias("h"), grid.alias("g")
    cond = [same(f"h.{k}", f"g.{k}") for k in kq]
    cond += [F.col(f"h.{GE}") <= F.col(f"g.{GE}"), F.col(f"h.{q(iteration)}") <= F.col(f"g.{GI}")]
    acc = (h.join(g, conjunction(cond), "inner")
           .groupBy(*[F.col(f"h.{q(c)}").alias(c) for c in records],
                    F.col(f"g.{GE}").alias(GE), F.col(f"g.{GI}").alias(GI))
           .agg(F.sum(F.col(f"h.{DIFF}")).alias(M)).where(F.col(M) != 0))
    out = output(node, acc, records, backend, (GE, GI))
    out_records = [c for c in out.columns if c not in (GE, GI, M)]
    desired = _differences(out, grid, keys, out_records, time_cols, lower, round_, same)
    if emitted is not None:
        before = of_keys(emitted, touched, kq, same).where(F.col(q(iteration)) >= round_)
        desired = desired.unionByName(before.withColumn(DIFF, -F.col(DIFF)))
    return consolidate(desired.coalesce(1) if single else desired, time_cols)


def _grid(hist: DataFrame, kq: list[str], iteration: str, round_: int) -> DataFrame:
    """Per touched key: its epochs x its iterations from the round's predecessor on, each
    with the key's next coordinate (null at the last)."""
    epochs = hist.select(*kq, GE).distinct()
    epochs = epochs.withColumn(NE, F.lead(GE).over(Window.partitionBy(*kq).orderBy(GE)))
    its = hist.select(*kq, F.col(q(iteration)).alias(GI)).distinct()
    its = its.withColumn(NI, F.lead(GI).over(Window.partitionBy(*kq).orderBy(GI)))
    # grid iterations below the round's predecessor cannot change: leave them out
    its = its.where((F.col(GI) >= round_) | (F.col(NI) >= round_) | F.col(NI).isNull())
    e, i = epochs.alias("e"), its.alias("i")
    same = [F.col(f"e.{k}").eqNullSafe(F.col(f"i.{k}")) for k in kq]
    return e.join(i, conjunction(same), "inner").select(
        *[F.col(f"e.{k}").alias(k.strip("`")) for k in kq], GE, NE, GI, NI)


def _differences(out: DataFrame, grid: DataFrame, keys: list[str], out_records, time_cols,
                 lower: int, round_: int, same) -> DataFrame:
    """Each grid result as its 2-D differences, kept where this round may change them."""
    epoch, iteration = time_cols
    o, g = out.alias("o"), grid.alias("g")
    cond = [same(f"o.{q(k)}", f"g.{q(k)}") for k in keys]
    cond += [F.col(f"o.{GE}") == F.col(f"g.{GE}"), F.col(f"o.{GI}") == F.col(f"g.{GI}")]
    ge, ne, gi, ni = (F.col(f"g.{c}") for c in (GE, NE, GI, NI))
    m = F.col(f"o.{M}")

    def corner(t, i, sign):
        keep = t.isNotNull() & i.isNotNull() & (t >= lower) & (i >= round_)
        return F.when(keep, F.struct(t.alias(epoch), i.alias(iteration),
                                     (m * sign).alias(DIFF)))

    signed = F.array_compact(F.array(corner(ge, gi, 1), corner(ne, gi, -1),
                                     corner(ge, ni, -1), corner(ne, ni, 1)))
    recs = [F.col(f"o.{q(c)}").alias(c) for c in out_records]
    return o.join(g, conjunction(cond), "inner").select(*recs, F.inline(signed))


# ---------------------------------------------------------------------- the driver placement
def delta_in_scope(step, node: ir.Reduce, view):
    """The round's corrections of the reduction's output on the driver (Changes at product
    times, unconsolidated): the rule above on arrays, every grid point reduced at once by
    driver.py's per-group reductions. `view.old` holds the key's history with the iteration
    as its mirror's last column (executor/arrange/driver.py)."""
    from executor.operators.reduce.driver import _ids, reduced

    xp, scope, lower = step.xp, step.scope, step.lower
    round_, schema, batch, old = scope.round, step.runner.node_schemas[node], view.batch, view.old
    if not batch.size:
        return step.empty(schema)
    columns, nkeys = old.columns[:-1], old.nkeys
    fresh = [*map(batch.col, columns), *batch.inner]
    held = old.rows(fresh[:nkeys])
    cols = [xp.concat([h, b]) for h, b in zip(held.cols, fresh)]
    it = cols.pop()
    epoch = xp.maximum(xp.concat([held.t, batch.t]), xp.asarray(lower - 1, dtype=xp.int64))
    d = xp.concat([held.d, batch.d])
    n = d.shape[0]
    kid = _ids(xp, cols[:nkeys], n)  # every row is of a touched key: ids 0..keys-1
    nk = int(xp.max(kid)) + 1

    # each key's grid: its epochs x its iterations from the round's predecessor on
    ones = xp.ones_like(d)
    (ek, ev), _ = consolidate_arrays(xp, [kid, epoch], ones)
    (ik, iv), _ = consolidate_arrays(xp, [kid, it], ones)
    follows = xp.concat([ik[1:] == ik[:-1], xp.asarray([False])])
    next_it = xp.concat([iv[1:], xp.asarray([0], dtype=xp.int64)])
    keep = (iv >= round_) | xp.logical_not(follows) | (next_it >= round_)
    kept_before = xp.cumulative_sum(xp.astype(keep, xp.int64), include_initial=True)
    kept = xp.nonzero(keep)[0]
    ik, iv = xp.take(ik, kept), xp.take(iv, kept)
    keys = xp.arange(nk + 1, dtype=xp.int64)
    e0, i0 = xp.searchsorted(ek, keys), xp.searchsorted(ik, keys)
    ne, ni = e0[1:] - e0[:-1], i0[1:] - i0[:-1]
    first_cell = xp.cumulative_sum(ne * ni, include_initial=True)

    # every row at each grid point at or after it (epoch and iteration)
    a0 = _ids(xp, [kid, epoch], n) - xp.take(e0, kid)
    b0 = xp.take(kept_before, _ids(xp, [kid, it], n)) - xp.take(i0, kid)
    width = xp.take(ni, kid) - b0
    count = (xp.take(ne, kid) - a0) * width
    row, j = spans(xp, xp.zeros_like(count), count)
    w = xp.take(width, row)
    r_kid = xp.take(kid, row)
    cell = xp.take(first_cell, r_kid) + (xp.take(a0, row) + j // w) * xp.take(ni, r_kid) \
        + xp.take(b0, row) + j % w
    acc, m = consolidate_arrays(xp, [cell, *[xp.take(c, row) for c in cols]], xp.take(d, row))
    kinds = {f.name: f.dataType for f in batch.schema.fields}
    out_g, out, out_m = reduced(step, node, acc[0], dict(zip(columns, acc[1:])), m, kinds,
                                batch.names, schema)

    # each result as its 2-D differences, where this round may change them
    gk = xp.searchsorted(first_cell, out_g, side="right") - 1
    local = out_g - xp.take(first_cell, gk)
    span = xp.take(ni, gk)
    a, b = xp.take(e0, gk) + local // span, xp.take(i0, gk) + local % span
    has_ne, has_ni = local // span + 1 < xp.take(ne, gk), local % span + 1 < span
    ge, gi = xp.take(ev, a), xp.take(iv, b)
    nxt_e = xp.take(ev, xp.minimum(a + 1, ev.shape[0] - 1))
    nxt_i = xp.take(iv, xp.minimum(b + 1, iv.shape[0] - 1))
    now_e, now_i = ge >= lower, gi >= round_
    corners = [(now_e & now_i, ge, gi, out_m), (has_ne & now_i, nxt_e, gi, -out_m),
               (has_ni & now_e & (nxt_i >= round_), ge, nxt_i, -out_m),
               (has_ne & has_ni & (nxt_i >= round_), nxt_e, nxt_i, out_m)]
    names = [f.name for f in schema.fields[:-3]]
    parts = []
    for where, t, i, sign in corners:
        rows = xp.nonzero(where)[0]
        parts.append(Changes.of(schema, [xp.take(out[c], rows) for c in names],
                                [xp.take(t, rows), xp.take(i, rows)], xp.take(sign, rows)))
    before = scope.emitted_since(node)
    if before is not None:  # less what earlier rounds emitted there
        key_names = columns[:nkeys]
        touched = xp.nonzero(_member(xp, [before.col(k) for k in key_names],
                                    [batch.col(k) for k in key_names]))[0] \
            if nkeys else xp.arange(before.size, dtype=xp.int64)
        mine = before.take(xp, touched)
        parts.append(Changes.of(schema, mine.cols, mine.times, -mine.d))
    return step.concat(parts)


def _member(xp, cols: list, among: list):
    """Whether each row of `cols` equals some row of `among` (same number of columns)."""
    n = cols[0].shape[0]
    if n == 0:
        return xp.zeros(0, dtype=xp.bool)
    both = [xp.concat([a, b]) for a, b in zip(cols, among)]
    total = both[0].shape[0]
    perm = sort_by(xp, both)
    starts = group_starts(xp, [xp.take(c, perm) for c in both])
    group = segment_ids(xp, starts, total)
    # per group of equal rows: how many come from `among` (their positions are >= n)
    hits = sum_segments(xp, xp.astype(perm >= n, xp.int64), starts)
    found = xp.take(xp.take(hits > 0, group), xp.argsort(perm, stable=False))
    return found[:n]
