"""Abelian reductions on the driver as running totals per key: a step costs its change.

count, distinct of whole records, sum over exact types (integers, DECIMAL) and an aggregate
of such counts and sums see a key's accumulated multiset only through sums over its updates:
a `weight`, the sum of m over the records that count (all of them, or those whose column is
not null), and per sum the sum of x*m (`_layout`). The step's updates add to these totals,
so a step reads the totals of the keys it touches before it, runs them over its times and
emits the output's differences (the contract of executor/operators/reduce/spark.py),
without reading the keys' groups.

Where totals live: an arrangement that holds only the reduction's key columns (one that only counts
read, counted.py; distinct's whole records) is its own totals, its diffs summed per key. Otherwise
the trace keeps them beside its mirror (Trace.totals), one mirror keyed like the trace plus the
total's index in the layout (`_stacked`), so one lookup reads every total of the touched keys:
several reductions over one arrangement each keep their own, appended every step, rebuilt from the
mirror after a step on Spark.

Exact under negative multiplicities (plans/semantics.py `_reduce_group`): a sum's group exists while
some record has a non-zero multiplicity, and is NULL while no record with a non-null value has one.
A non-zero weight proves both; a zero weight proves neither (+1 and -1 cancel). A key whose weight
is zero before the step or at one of its times (a group that appears, vanishes, or holds only
nulls) is unsure. Most are settled without their groups: a trace holding no update of the key
before the step proves its group was empty (a new key; `_absent`, a lookup that gathers nothing);
at a key's one time in the step, its records' multiplicities summed (before the step, and after
it) prove a group empty or, where its weights are non-zero, present (`_settled`: an emptied
group, one that comes back). Only the rest are re-evaluated from their groups (driver.py), over
their history's grid of times. An aggregate keeps the weight of all its records (its group's
existence) and each sum's, and re-evaluates a key where one is zero. A sum over integers also
keeps the sum of |x*d| (capped): it bounds what Spark's own sum adds up in any order, and once it
reaches 2**62 the key is re-evaluated, which sends a sum that could overflow to Spark as before.
Totals are kept below 2**62 (else the step runs on Spark) so merging their updates cannot overflow.
"""
from __future__ import annotations

import pyarrow.compute as pc
from pyspark.errors import ArithmeticException
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from executor.arrange.changes import Changes, Unsupported
from executor.arrange.encoding import INTEGRAL, NULL_CODE, NoCode, unscaled
from executor.arrange.mirror import Mirror, Run, run_of
from executor.operators.linear.spark import q
from executor.operators.reduce import driver as reduce_driver, spark_totals
from executor.time import TIME
from gpu_kernels import (DiffOverflow, consolidate, group_starts, multiply_diffs, running_segments,
                         segment_ids, sort_by, sum_segments)
from gpu_kernels.intersect import lower_bound
from plans import ir

BOUND = 2 ** 62  # totals stay below it; a sum's spread is capped at it
TERM = "__term"  # the column of a kept total's index in the layout


def applies(node: ir.Reduce, view) -> bool:
    """Whether the reduction keeps running totals: count, distinct of whole records, and
    sum over integers or DECIMAL, alone or as parts of an aggregate with counts. A DOUBLE
    sum is re-evaluated over its group at each time: float addition depends on its order, so
    a running total would drift from it; so are min and max. Over an imported arrangement
    only a trace that is its own totals qualifies: other totals would live on the source's
    trace, which this runner does not write."""
    red = node.reduction
    if isinstance(node.input, ir.Imported) and not _own(red, view):
        return False
    if red.kind == "distinct":
        return list(view.trace.keys) == view.batch.names
    exact = (*INTEGRAL, DecimalType)
    if red.kind in ("sum", "aggregate"):
        return all(k == "count" or (k == "sum" and isinstance(
            view.batch.schema[c].dataType, exact)) for _, k, c in red.value_parts())
    return red.kind == "count"


def _own(red: ir.Reduction, view) -> bool:
    """Whether the arrangement holds only the key columns: its diffs summed are the totals."""
    return red.kind in ("count", "distinct") and view.old.columns == list(view.trace.keys)


def _layout(red: ir.Reduction, kinds: dict) -> list[tuple]:
    """The totals a reduction keeps, as (what, column): ("weight", None), the sum of m over
    all records (count, distinct, an aggregate's group); ("weight", c), over the records
    whose c is not null; ("value", c), the sum of x*m over them; then ("spread", c), the sum
    of |x*m| capped at BOUND, per sum over integers. The exact totals come first."""
    if red.kind in ("count", "distinct"):
        return [("weight", None)]
    specs = [] if red.kind == "sum" else [("weight", None)]
    for _, kind, column in red.value_parts():
        wanted = [("weight", column)] + ([("value", column)] if kind == "sum" else [])
        specs += [w for w in wanted if w not in specs]
    return specs + [("spread", c) for what, c in specs
                    if what == "value" and isinstance(kinds[c], INTEGRAL)]


def _exact(layout: list) -> int:
    """How many totals of the layout are exact (the spreads, capped, come after them)."""
    return sum(what != "spread" for what, _ in layout)


def delta(step, node: ir.Reduce, view, ready):
    """The reduction's changes for the step at the times of `ready` (the updates due before
    upto; unconsolidated Changes in the node's schema); the new totals go on the
    arrangement's commit. The trace's updates at or after the frontier (held, or due now in
    `ready`) are left out of the totals before the step."""

    xp, red, batch = step.xp, node.reduction, ready
    schema = step.runner.node_schemas[node]
    if batch.size == 0:
        return step.empty(schema)
    keys = list(view.trace.keys)
    kinds = {f.name: f.dataType for f in batch.schema.fields}
    for name, kind, column in red.value_parts() if red.kind in ("sum", "aggregate") else ():
        if kind == "sum":
            reduce_driver.same_scale(node, kinds[column], schema[name].dataType)
    layout = _layout(red, kinds)
    exact = _exact(layout)
    own = _own(red, view)
    touched = [batch.col(k) for k in keys]
    kept = None if own else _kept(step, node, view, keys, kinds)
    held = [view.old.below(step.lower).rows(touched)] if own else \
        _unstacked(xp, kept.below(step.lower).rows(touched), len(layout))
    try:
        now = _Running(xp, touched, batch.t,
                       _terms(xp, layout, dict(zip(batch.names, batch.cols)), batch.d, kinds),
                       held, step.lower)
    except DiffOverflow:
        raise Unsupported(f"{node.label()}: a total beyond int64 (Spark reports it)") from None
    _bounded(xp, node, now.now[:exact])
    since = view.trace.next_since(step.upto - 1)
    if node.input in step.runner._counted:  # the trace is the totals: add the step's
        added = Changes(view.old.schema, now.keys, now.t, now.step[0])
        step.commits[node.input] = view.trace.driver_appended(
            view.old.appended(run_of(xp, now.keys, now.t, now.step[0]), since), step.upto,
            since, step.delta(added))
    elif not own:
        step.commits[node.input].totals[red] = kept.appended(
            _stacked(xp, now.keys, now.t, now.changes(exact)), since)
    if red.kind == "distinct":
        diff = xp.astype(now.now[0] > 0, xp.int64) - xp.astype(now.prev[0] > 0, xp.int64)
        keep = xp.nonzero(diff != 0)[0]  # one row per (record, time), sorted: canonical
        return Changes(schema, [xp.take(k, keep) for k in now.keys], xp.take(now.t, keep),
                       xp.take(diff, keep), canonical=True)
    if red.kind == "count":
        return _emitted(xp, schema, now.keys, now.t, [now.now[0]], [now.prev[0]],
                        now.now[0] != 0, now.prev[0] != 0)
    # sum, aggregate: a key whose group or a sum's weight is zero before or after a time of
    # the step, or whose spread is too wide, is unsure. The trace holding no update of the
    # key before the step (so always in a load) proves its group empty before (`absent`);
    # a key of one time in the step may be settled by its records (_settled); the other
    # unsure keys are re-evaluated over their groups (reduce_driver)
    at = {spec: i for i, spec in enumerate(layout)}
    weights = [at[("weight", c)] for _, k, c in red.value_parts() if k == "sum"] + \
        ([0] if red.kind == "aggregate" else [])
    old = view.old.below(step.lower)
    absent = _absent(xp, old, now, weights)
    unsure = xp.zeros(now.t.shape, dtype=xp.bool)
    for i in weights:
        before = xp.logical_and(now.prev[i] == 0, xp.logical_not(absent))
        unsure = xp.logical_or(unsure, xp.logical_or(now.now[i] == 0, before))
    for i in range(exact, len(layout)):
        unsure = xp.logical_or(unsure, now.now[i] >= BOUND)
    unsure = now.keys_of(unsure)
    settled, was, still = _settled(xp, old, batch, now, unsure, weights,
                                   range(exact, len(layout)))
    unsure = xp.logical_and(unsure, xp.logical_not(settled))
    sure = xp.logical_not(xp.take(unsure, now.key))
    # settled groups are present where non-empty, the others where their weights say
    unsettled = xp.logical_not(xp.take(settled, now.key))
    present = xp.logical_and(sure, xp.logical_or(unsettled, xp.take(still, now.key)))
    was_present = xp.logical_and(xp.logical_and(sure, xp.logical_not(absent)),
                                 xp.logical_or(unsettled, xp.take(was, now.key)))
    read = [at[("value" if k == "sum" else "weight", c)] for _, k, c in red.value_parts()]
    for (name, kind, _), i in zip(red.value_parts(), read):
        if kind == "sum":
            reduce_driver.within_precision(xp, node, now.now[i], schema[name].dataType)
    out = _emitted(xp, schema, now.keys, now.t, [now.now[i] for i in read],
                   [now.prev[i] for i in read], present, was_present)
    if not bool(xp.any(unsure)):
        return out
    rows = now.updates_of(unsure)
    again = reduce_driver.delta(step, node, view, batch.take(xp, rows))
    return Changes(schema, [xp.concat([a, b]) for a, b in zip(out.cols, again.cols)],
                   xp.concat([out.t, again.t]), xp.concat([out.d, again.d]))


def _absent(xp, old: Mirror, now: "_Running", weights: list):
    """Per kept row, whether it is its key's first in the step and the key's group was
    empty before it: its weights were zero and `old` (the reduction's input before the step)
    holds no update of the key. Zero weights alone do not tell (negative multiplicities)."""
    maybe = now.first
    for i in weights:
        maybe = xp.logical_and(maybe, now.prev[i] == 0)
    rows = xp.nonzero(maybe)[0]
    if not rows.shape[0] or not old.size:
        return maybe
    if not now.keys:  # one group, the whole collection
        return xp.zeros_like(maybe)
    absent = xp.zeros_like(maybe)
    absent[rows] = xp.logical_not(old.holds([xp.take(k, rows) for k in now.keys]))
    return absent


def _settled(xp, old: Mirror, batch, now: "_Running", unsure, weights: list, spreads):
    """Per key, (settled, before, after): of the `unsure` keys, those with one time in the
    step whose group, before the step and after it, is either empty (every record's
    multiplicity sums to zero: the trace's updates before the step, plus the step's after
    it) or has non-zero weights (so is present, its totals exact), spreads within BOUND;
    and whether each group is non-empty before and after. A zero weight alone does not
    tell: records at +1 and -1 cancel in it."""
    last = xp.concat([now.key[1:] != now.key[:-1], xp.ones(min(1, now.t.shape[0]),
                                                            dtype=xp.bool)])
    single = xp.logical_and(now.first, last)
    maybe = xp.logical_and(single, xp.take(unsure, now.key))
    for i in spreads:
        maybe = xp.logical_and(maybe, xp.logical_and(now.now[i] < BOUND, now.prev[i] < BOUND))
    settled = xp.zeros(unsure.shape, dtype=xp.bool)
    rows = xp.nonzero(maybe)[0]
    if not rows.shape[0] or not now.keys:
        return settled, settled, settled
    keys = [xp.take(k, rows) for k in now.keys]
    had = old.rows(keys)
    mine = xp.zeros(unsure.shape, dtype=xp.bool)
    mine[xp.take(now.key, rows)] = True
    fresh = now.updates_of(mine)
    before = _nonempty(xp, list(had.cols), had.d, keys)
    after = _nonempty(xp, [xp.concat([h, xp.take(batch.col(c), fresh)])
                           for h, c in zip(had.cols, old.columns)],
                      xp.concat([had.d, xp.take(batch.d, fresh)]), keys)
    ok = xp.ones(rows.shape, dtype=xp.bool)
    for i in weights:
        for state, total in ((before, now.prev[i]), (after, now.now[i])):
            ok = xp.logical_and(ok, xp.logical_or(xp.logical_not(state),
                                                  xp.take(total, rows) != 0))
    at = xp.take(now.key, rows)
    was, still = xp.zeros_like(settled), xp.zeros_like(settled)
    settled[at], was[at], still[at] = ok, before, after
    return settled, was, still


def _nonempty(xp, cols: list, d, keys: list):
    """Whether the updates (record columns, keys first; diffs `d`) leave each asked key a
    record of non-zero multiplicity."""
    left, _ = consolidate(xp, cols, d)
    n = keys[0].shape[0]
    found, _ = lower_bound(xp, tuple(left[:len(keys)]), xp.zeros(n, dtype=xp.int64),
                           xp.full(n, left[0].shape[0], dtype=xp.int64), tuple(keys))
    return found


def _bounded(xp, node: ir.Reduce, totals: list) -> None:
    """Unsupported (the step runs on Spark) where a total reaches BOUND in absolute value."""

    if any(bool(xp.any(xp.logical_or(x >= BOUND, x <= -BOUND))) for x in totals):
        raise Unsupported(f"{node.label()}: a total near the int64 range")


def _emitted(xp, schema, keys, t, now: list, prev: list, now_present, prev_present):
    """(keys, values) at each time: the new values (+1) where present now, the previous
    ones (-1) where present before."""

    a, b = xp.nonzero(now_present)[0], xp.nonzero(prev_present)[0]
    cols = [xp.concat([xp.take(k, a), xp.take(k, b)]) for k in keys]
    cols += [xp.concat([xp.take(x, a), xp.take(y, b)]) for x, y in zip(now, prev)]
    return Changes(schema, cols, xp.concat([xp.take(t, a), xp.take(t, b)]),
                   xp.concat([xp.ones_like(a), -xp.ones_like(b)]))


def _terms(xp, layout: list, cols: dict, d, kinds: dict) -> list:
    """What each update adds to each total of the layout."""
    zero = xp.zeros_like(d)
    values = {}
    for what, c in layout:
        if what == "value":
            x = cols[c]
            live = x != NULL_CODE
            values[c] = multiply_diffs(xp, xp.where(live, x, zero), d)
    terms = []
    for what, c in layout:
        if what == "weight":
            terms.append(d if c is None else xp.where(cols[c] != NULL_CODE, d, zero))
        elif what == "value":
            terms.append(values[c])
        else:
            wide = xp.logical_or(values[c] >= BOUND, values[c] <= -BOUND)
            terms.append(xp.where(wide, xp.full_like(values[c], BOUND), xp.abs(values[c])))
    return terms


def _stacked(xp, keys: list, t, totals: list) -> Run:
    """Every total's rows as one run keyed by (keys, the total's index in the layout)."""
    n = t.shape[0]
    term = xp.concat([xp.full(n, j, dtype=xp.int64) for j in range(len(totals))])
    return run_of(xp, [xp.concat([k] * len(totals)) for k in keys] + [term],
                  xp.concat([t] * len(totals)), xp.concat(totals))


def _unstacked(xp, run: Run, width: int) -> list[Run]:
    """A stacked run's rows per total (the index column dropped)."""
    parts = []
    for j in range(width):
        rows = xp.nonzero(run.cols[-1] == j)[0]
        parts.append(Run(tuple(xp.take(c, rows) for c in run.cols[:-1]), xp.take(run.t, rows),
                         xp.take(run.d, rows)))
    return parts


def _kept(step, node: ir.Reduce, view, keys: list[str], kinds: dict) -> Mirror:
    """The reduction's totals of the trace before the step: kept on the trace, or rebuilt
    from its mirror (one pass; kept in place, being the same collection's)."""

    red, trace, xp = node.reduction, view.trace, step.xp
    if red in trace.totals:
        return trace.totals[red]
    old = view.old.below(step.lower)
    layout = _layout(red, kinds)
    exact = _exact(layout)
    far = old.remote is not None and all(
        what == "weight" or spark_totals.value_type(kinds[c]) for what, c in layout)
    whole = old.local() if far else old.all()
    columns = dict(zip(old.columns, whole.cols))
    try:
        key_cols = [columns[k] for k in keys]
        terms = _terms(xp, layout, columns, whole.d, kinds)
        if far:  # the Spark batches' totals, one aggregate, instead of all their updates
            more_keys, more = _summed_on_spark(step, node, old, keys, layout, kinds)
            key_cols = [xp.concat([a, b]) for a, b in zip(key_cols, more_keys)]
            terms = [xp.concat([a, b]) for a, b in zip(terms, more)]
        t = xp.full(terms[0].shape, step.lower - 1, dtype=xp.int64)
        summed = _Running(xp, key_cols, t, terms, [], step.lower - 1)
    except DiffOverflow:
        raise Unsupported(f"{node.label()}: a total beyond int64 (Spark reports it)") from None
    totals = summed.now
    _bounded(xp, node, totals[:exact])
    totals = totals[:exact] + [xp.minimum(s, xp.asarray(BOUND)) for s in totals[exact:]]
    since = trace.next_since(step.lower - 1)
    kept = trace.totals[red] = Mirror(xp, [*keys, TERM], len(keys)).appended(
        _stacked(xp, summed.keys, summed.t, totals), since)
    return kept


def _summed_on_spark(step, node: ir.Reduce, old: Mirror, keys: list[str], layout: list,
                     kinds: dict) -> tuple[list, list]:
    """(key codes, each total of the layout per key) of the updates a mirror left in Spark's
    batches (Mirror.over) below its upper, summed per key in one Spark aggregate (x*m exact
    in DECIMAL(38, s), spark_totals.value_type); Unsupported where a total leaves int64."""
    xp, encoder = step.xp, step.encoder
    frame = old.remote.frame()
    if old.upper is not None:
        frame = frame.where(F.col(TIME) < old.upper)
    cap = F.lit(BOUND).cast(DecimalType(38, 0))
    values = {c: spark_totals.term("value", c, kinds) for what, c in layout if what != "weight"}
    sums = [spark_totals.term(what, c, kinds).cast(DecimalType(38, 0)) if what == "weight"
            else values[c] if what != "spread" else F.least(F.abs(values[c]), cap)
            for what, c in layout]
    # every total is summed as a DECIMAL(38) (a BIGINT sum wraps with ANSI mode off); a
    # global reduction's aggregate has a row even over no rows: dropped. A term is NULL
    # where x*m left DECIMAL(38) (counted: a sum skips it), a sum where it overflowed with
    # ANSI mode off
    lost = [F.max(spark_totals.any_null(list(values.values()))).alias("__lost")] if values else []
    grouped = frame.groupBy(*map(q, keys)).agg(F.count(F.lit(1)).alias("__rows"), *lost, *[
        F.sum(x).alias(f"__t{i}") for i, x in enumerate(sums)]).where(F.col("__rows") > 0)
    try:
        table = grouped.toArrow()
        if values and pc.max(table.column("__lost")).as_py():
            raise NoCode("a term x*m beyond DECIMAL(38)")
        codes = [xp.asarray(encoder.encode(table.column(k), old.schema[k].dataType))
                 for k in keys]
        totals = [table.column(f"__t{i}").combine_chunks() for i in range(len(layout))]
        if any(x.null_count for x in totals):
            raise NoCode("a total beyond DECIMAL(38) (ANSI mode off)")
        totals = [xp.asarray(unscaled(x)) for x in totals]
    except (NoCode, ArithmeticException) as e:  # a total beyond int64, or ANSI's overflow
        raise Unsupported(f"{node.label()}: totals on Spark: {str(e).splitlines()[0]}") from None
    spreads = [i for i, (what, _) in enumerate(layout) if what == "spread"]
    for i in spreads:
        totals[i] = xp.minimum(totals[i], xp.asarray(BOUND))
    return codes, totals


class _Running:
    """Totals of keys over time. The step's terms (one array per total, per update at `t`)
    and the keys' totals before it (`held`: per total, a run of (keys, time, total), put at
    F-1) are summed per (key, time), sorted, and run per key. Kept are the rows at or after
    `lower`: `keys`, `t`, `step` (their terms summed), `now` and `prev` (each total after and
    before), and `key` (each row's key, an index into keys_of's flags)."""

    def __init__(self, xp, key_cols: list, t, terms: list, held: list, lower: int):
        self.xp, self.n = xp, t.shape[0]
        all_keys = [xp.concat([c] + [h.cols[i] for h in held]) for i, c in enumerate(key_cols)]
        all_t = xp.concat([t] + [xp.full_like(h.t, lower - 1) for h in held])
        # term s over the held rows (one run per total, or none): its own run, zero elsewhere
        bounds = [0]
        for h in held:
            bounds.append(bounds[-1] + h.d.shape[0])
        all_terms = []
        for s, x in enumerate(terms):
            tail = xp.zeros(bounds[-1], dtype=x.dtype)
            if s < len(held):
                tail[bounds[s]:bounds[s + 1]] = held[s].d
            all_terms.append(xp.concat([x, tail]))
        self._perm = perm = sort_by(xp, [*all_keys, all_t])
        sorted_keys = [xp.take(k, perm) for k in all_keys]
        sorted_t = xp.take(all_t, perm)
        starts = group_starts(xp, [*sorted_keys, sorted_t])
        step = [sum_segments(xp, xp.take(x, perm), starts) for x in all_terms]
        keys_at = [xp.take(k, starts) for k in sorted_keys]
        t_at = xp.take(sorted_t, starts)
        rows = starts.shape[0]
        firsts = group_starts(xp, keys_at) if keys_at else \
            xp.zeros(1 if rows else 0, dtype=xp.int64)
        now = [running_segments(xp, s, firsts) for s in step]
        self._keys = firsts.shape[0]
        key = segment_ids(xp, firsts, rows)
        # each sorted update's key, to find the step's updates under flagged keys
        self._update_key = xp.take(key, segment_ids(xp, starts, perm.shape[0]))
        kept = xp.nonzero(t_at >= lower)[0]
        self.key = xp.take(key, kept)
        self.keys = [xp.take(k, kept) for k in keys_at]
        self.t = xp.take(t_at, kept)
        self.step = [xp.take(s, kept) for s in step]
        self.now = [xp.take(s, kept) for s in now]
        self.prev = [a - b for a, b in zip(self.now, self.step)]
        # whether each kept row is its key's first at or after `lower` (its `prev`: the
        # totals before the step)
        self.first = xp.concat([xp.ones(min(1, self.t.shape[0]), dtype=xp.bool),
                                self.key[1:] != self.key[:-1]])

    def changes(self, exact: int) -> list:
        """Each total's change at each kept row, a spread (after the `exact` totals)
        saturating at BOUND."""
        xp, cap = self.xp, self.xp.asarray(BOUND)
        return self.step[:exact] + [xp.minimum(now, cap) - xp.minimum(prev, cap)
                                    for now, prev in zip(self.now[exact:], self.prev[exact:])]

    def keys_of(self, flags):
        """Per key, whether one of its kept rows is flagged."""
        xp = self.xp
        hit = xp.zeros(self._keys, dtype=xp.bool)
        hit[xp.take(self.key, xp.nonzero(flags)[0])] = True
        return hit

    def updates_of(self, keys):
        """The positions, among the step's updates, of those under the flagged keys."""
        xp = self.xp
        rows = xp.take(self._perm, xp.nonzero(xp.take(keys, self._update_key))[0])
        return xp.sort(xp.take(rows, xp.nonzero(rows < self.n)[0]), stable=False)
