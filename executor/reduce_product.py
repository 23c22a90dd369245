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

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from plans import ir

from .consolidate import consolidate
from .linear import q, record_columns
from .reduce import M, _all, equality, output
from .spine import materialise_counted
from .time import DIFF
from .trace import View

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
    ready = view.delta_frame(empty)
    # renamed: fresh column ids, so a self-join with the trace's own batches resolves
    touched = F.broadcast(ready.select(*kq).distinct().toDF(*keys)).alias("t")
    on = _all([same(f"b.{k}", f"t.{k}") for k in kq])
    history = fold(DataFrame.union, [b.alias("b").join(touched, on, "left_semi")
                                      for b in view.all()] or [empty])
    history, size = materialise_counted(history)
    single = size <= SINGLE_TASK_ROWS
    if single:
        history = history.coalesce(1)
    hist = history.withColumn(GE, F.greatest(F.col(q(epoch)), F.lit(lower - 1)))
    grid = _grid(hist, kq, iteration, round_)
    h, g = hist.alias("h"), grid.alias("g")
    cond = [same(f"h.{k}", f"g.{k}") for k in kq]
    cond += [F.col(f"h.{GE}") <= F.col(f"g.{GE}"), F.col(f"h.{q(iteration)}") <= F.col(f"g.{GI}")]
    acc = (h.join(g, _all(cond), "inner")
           .groupBy(*[F.col(f"h.{q(c)}").alias(c) for c in records],
                    F.col(f"g.{GE}").alias(GE), F.col(f"g.{GI}").alias(GI))
           .agg(F.sum(F.col(f"h.{DIFF}")).alias(M)).where(F.col(M) != 0))
    out = output(node, acc, records, backend, (GE, GI))
    out_records = [c for c in out.columns if c not in (GE, GI, M)]
    desired = _differences(out, grid, keys, out_records, time_cols, lower, round_, same)
    if emitted is not None:
        before = emitted.alias("b").join(touched, on, "left_semi") \
            .where(F.col(q(iteration)) >= round_)
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
    return e.join(i, _all(same), "inner").select(
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
    return o.join(g, _all(cond), "inner").select(*recs, F.inline(signed))
