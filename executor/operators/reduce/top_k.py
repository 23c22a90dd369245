"""top_k on the driver as a ranked index, so a step costs its change, not its groups.

executor/operators/reduce/driver.py re-evaluates each group a step touches over the whole group. For
top_k few of a group's records can be in its top k at any time of the step: the T records
the step touches, and of the others (whose multiplicities stay as they were) the first k + T
with a positive multiplicity in the group's order. At least k of those are untouched, each
counting at least 1, so no untouched record after them reaches the top k. The index holds
the arrangement's records with a positive multiplicity at the last complete time, sorted by
(group keys, order keys, the rest of the record), so a group's first rows are a binary search
away. The touched records' history (from the mirror) and those candidates go through
reduce_driver's grid as the groups' history: the same results, ties and multiplicities above
one included. It lives beside the mirror (Trace.totals, dropped by a step on Spark), tagged
with its time; one of another time is rebuilt from the mirror.

The index is two sorted runs, as an arrangement's spine keeps batches, so that a step costs
its change and not the index: a big `base`, less its `dead` rows (positions), and a small
`recent` run of the records steps changed since. A step marks the touched records' base rows
dead and rewrites only `recent` with their new multiplicities; a record is live in one run at
most. The candidates are each run's first k + T rows of the group (dead ones not counted), so
no untouched record after them reaches the top k either. When recent and dead rows pass
SPARE of the base, the runs merge into one base (one pass over the index): rewriting the
whole index each step cost 7 ms at 38,000 records of 10 columns (TPC-H q10's top 20).

An order key sorts by codes that sort as its values do (reduce_driver.order_columns). The
rest of the record sorts by its codes, which for a STRING are not Spark's order of the ties:
the candidates are extended to whole runs of ties, and reduce_driver orders them by the decoded
values. An order key of STRING or BINARY has no sortable code: that top_k runs through
reduce_driver alone.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from executor.arrange.mirror import Mirror, Run
from executor.operators.reduce import driver as reduce_driver
from gpu_kernels import consolidate, equal_range, group_starts, sort_by, spans
from gpu_kernels.intersect import lower_bound
from plans import ir


# recent and dead rows, as a fraction of the base, beyond which the runs merge (0: every step)
SPARE = 0.125


@dataclass(frozen=True)
class Sorted:
    """Records with their positive multiplicities `m`, sorted by `keys`: the group keys, two
    columns per order key, then the rest of the record."""

    keys: tuple
    m: object

    @property
    def size(self) -> int:
        return int(self.m.shape[0])


@dataclass(frozen=True)
class Ranked:
    """The records with a positive multiplicity at time `at`: `base` less the rows at `dead`
    (sorted positions), and `recent`."""

    at: int
    base: Sorted
    dead: object
    recent: Sorted


class _Unranked(Exception):
    """An order without sortable codes: the step's top_k runs through reduce_driver."""


def applies(node: ir.Reduce) -> bool:
    """top_k over this runner's own arrangement (an imported one's trace is not written)."""
    return node.reduction.kind == "top_k" and not isinstance(node.input, ir.Imported)


def delta(step, node: ir.Reduce, view, ready):
    """The top_k's changes for the step at the times of `ready` (unconsolidated Changes in
    the node's schema); the updated index goes on the arrangement's commit."""
    xp, red, old = step.xp, node.reduction, view.old
    have = view.trace.totals.get(red)
    if ready.size == 0:
        if have is not None and have.at == step.lower - 1:  # nothing due: still exact
            step.commits[node.input].totals[red] = replace(have, at=step.upto - 1)
        return reduce_driver.delta(step, node, view, ready)
    columns, nkeys = old.columns, old.nkeys
    kinds = {f.name: f.dataType for f in view.batch.schema.fields}
    recs, _ = consolidate(xp, [ready.col(c) for c in columns], xp.ones_like(ready.d))
    try:
        keys = _keys(step, node, columns, nkeys, recs, kinds)
        index = have if have is not None and have.at == step.lower - 1 else \
            _built(step, node, old, kinds)
    except _Unranked:
        return reduce_driver.delta(step, node, view, ready)
    perm = sort_by(xp, keys)  # the touched records in the index's order
    keys, ordered_recs = [xp.take(k, perm) for k in keys], [xp.take(c, perm) for c in recs]
    n = perm.shape[0]
    found, at = _found(xp, index.base, keys)
    found = xp.logical_and(found, xp.logical_not(_among(xp, at, index.dead)))
    gone = xp.sort(at[found], stable=False)
    found_recent, at_recent = _found(xp, index.recent, keys)
    gone_recent = xp.sort(at_recent[found_recent], stable=False)

    # candidates: per touched group, each run's first k + T live records, less the touched
    firsts = group_starts(xp, keys[:nkeys]) if nkeys else xp.zeros(1, dtype=xp.int64)
    touched = xp.diff(xp.concat([firsts, xp.asarray([n], dtype=xp.int64)]))
    group = tuple(xp.take(k, firsts) for k in keys[:nkeys])
    dropped = xp.sort(xp.concat([index.dead, gone]), stable=False)
    width = 2 * len(red.order)
    cols, ms = [], []
    for run, skip in ((index.base, dropped), (index.recent, gone_recent)):
        rows = _firsts(xp, run, skip, group, red.k + touched, nkeys + width)
        record = list(run.keys[:nkeys]) + list(run.keys[nkeys + width:])
        cols.append([xp.take(c, rows) for c in record])
        ms.append(xp.take(run.m, rows))
    history = old.keyed_by(len(old.columns)).rows(recs)
    m = xp.concat([*ms, history.d])
    held = Run(tuple(xp.concat([b, r, h]) for b, r, h in zip(*cols, history.cols)),
               xp.concat([xp.full(m.shape[0] - history.size, step.lower - 1, dtype=xp.int64),
                          history.t]), m)
    out = reduce_driver.delta(step, node, view, ready, held)

    # the touched records' multiplicities after the step: their updates below upto
    before = xp.nonzero(history.t < step.lower)[0]
    summed, m = consolidate(xp, [xp.concat([xp.take(c, before), ready.col(name)])
                                 for c, name in zip(history.cols, columns)],
                            xp.concat([xp.take(history.d, before), ready.d]))
    now = _looked_up(xp, summed, m, ordered_recs)
    live = xp.nonzero(now > 0)[0]
    recent = _merged(xp, index.recent, gone_recent, [xp.take(k, live) for k in keys],
                     xp.take(now, live), xp.take(at_recent, live))
    ranked = Ranked(step.upto - 1, index.base, dropped, recent)
    if ranked.recent.size + ranked.dead.shape[0] > SPARE * ranked.base.size:
        ranked = _compacted(xp, ranked)
    step.commits[node.input].totals[red] = ranked
    return out


def _found(xp, run: Sorted, keys: list):
    """(found, position) of each sorted tuple of `keys` in the run."""
    n = keys[0].shape[0]
    return lower_bound(xp, run.keys, xp.zeros(n, dtype=xp.int64),
                       xp.full(n, run.size, dtype=xp.int64), tuple(keys))


def _firsts(xp, run: Sorted, skip, group: tuple, wanted, ranked: int):
    """The run's rows among the first `wanted` of each group (`group`: its key columns, none
    for one group) not at the sorted positions `skip`, extended past ties (`ranked`: the
    columns of group and order keys); `skip` rows in a group's range add to its count."""
    size, groups = run.size, wanted.shape[0]
    lo, hi = xp.zeros(groups, dtype=xp.int64), xp.full(groups, size, dtype=xp.int64)
    if group:
        lo, hi = equal_range(xp, run.keys[:len(group)], lo, hi, group)
    skipped = xp.searchsorted(skip, hi) - xp.searchsorted(skip, lo)
    stop = _tied(xp, run.keys[:ranked], lo, xp.minimum(hi, lo + wanted + skipped), hi)
    _, rows = spans(xp, lo, stop)
    return xp.take(rows, xp.nonzero(xp.logical_not(_among(xp, rows, skip)))[0])


def _keys(step, node: ir.Reduce, columns: list[str], nkeys: int, recs: list,
          kinds: dict) -> list:
    """The index's sort columns of records (codes in `columns` order): group keys, the
    order's columns (reduce_driver.order_columns), the rest of the record."""
    order = reduce_driver.order_columns(step, dict(zip(columns, recs)), kinds, columns,
                                      node.reduction.order, ranks=False)
    if order is None:
        raise _Unranked()
    return list(recs[:nkeys]) + order + list(recs[nkeys:])


def _built(step, node: ir.Reduce, old: Mirror, kinds: dict) -> Ranked:
    """The index of the mirror's records below the step (one pass over the trace)."""
    xp = step.xp
    whole = old.below(step.lower).all()
    recs, m = consolidate(xp, list(whole.cols), whole.d)
    live = xp.nonzero(m > 0)[0]
    recs, m = [xp.take(c, live) for c in recs], xp.take(m, live)
    keys = _keys(step, node, old.columns, old.nkeys, recs, kinds)
    perm = sort_by(xp, keys)
    return _alone(xp, step.lower - 1, Sorted(tuple(xp.take(k, perm) for k in keys),
                                             xp.take(m, perm)))


def _alone(xp, at: int, base: Sorted) -> Ranked:
    """An index of one run: no dead rows, an empty recent run."""
    return Ranked(at, base, xp.zeros(0, dtype=xp.int64),
                  Sorted(tuple(k[:0] for k in base.keys), base.m[:0]))


def _tied(xp, ranked: tuple, lo, stop, hi):
    """`stop` moved past the rows tied with the row before it (equal group and order keys):
    the candidates are then whole runs of ties, a prefix of the group in Spark's order too,
    whatever order the codes of the rest of the record (a STRING's) give the ties."""
    some = xp.nonzero(stop > lo)[0]
    if not some.shape[0]:
        return stop
    last, end = xp.take(stop, some) - 1, xp.take(hi, some)
    # most rows have no tie: one comparison with the next row leaves their stop as it is,
    # and only runs of ties are searched for their end (log2 of the group's length steps)
    tied = last + 1 < end
    after = xp.minimum(last + 1, end - 1)
    for k in ranked:
        tied = xp.logical_and(tied, xp.take(k, after) == xp.take(k, last))
    ties = xp.nonzero(tied)[0]
    if ties.shape[0]:
        first = xp.take(last, ties)
        _, far = equal_range(xp, ranked, first, xp.take(end, ties),
                             tuple(xp.take(k, first) for k in ranked))
        stop[xp.take(some, ties)] = far
    return stop


def _among(xp, rows, sorted_positions):
    """Whether each of `rows` is one of `sorted_positions`."""
    if not sorted_positions.shape[0]:
        return xp.zeros(rows.shape, dtype=xp.bool)
    at = xp.searchsorted(sorted_positions, rows)
    at = xp.minimum(at, xp.asarray(sorted_positions.shape[0] - 1))
    return xp.take(sorted_positions, at) == rows


def _looked_up(xp, sorted_keys: list, values, asked: list):
    """The value beside each asked tuple among `sorted_keys` (0 where absent)."""
    n = asked[0].shape[0]
    if not values.shape[0]:
        return xp.zeros(n, dtype=xp.int64)
    hit, at = lower_bound(xp, tuple(sorted_keys), xp.zeros(n, dtype=xp.int64),
                          xp.full(n, values.shape[0], dtype=xp.int64), tuple(asked))
    at = xp.minimum(at, xp.asarray(values.shape[0] - 1))
    return xp.where(hit, xp.take(values, at), xp.zeros_like(at))


def _merged(xp, run: Sorted, gone, keys: list, m, at) -> Sorted:
    """The run less the rows at `gone`, with rows (`keys` sorted, multiplicities `m`) put
    before the rows at `at` (positions in the old run, non-decreasing)."""
    keep = xp.ones(run.size, dtype=xp.bool)
    keep[gone] = False
    kept = xp.nonzero(keep)[0]
    n = kept.shape[0] + at.shape[0]
    new_at = xp.searchsorted(kept, at) + xp.arange(at.shape[0], dtype=xp.int64)
    old_at = xp.arange(kept.shape[0], dtype=xp.int64) + xp.searchsorted(at, kept, side="right")

    def placed(old, new):
        out = xp.empty(n, dtype=old.dtype)
        out[old_at] = xp.take(old, kept)
        out[new_at] = new
        return out

    return Sorted(tuple(placed(o, k) for o, k in zip(run.keys, keys)), placed(run.m, m))


def _compacted(xp, index: Ranked) -> Ranked:
    """The two runs merged into one base: the recent rows put into the base less its dead."""
    _, at = _found(xp, index.base, list(index.recent.keys))
    return _alone(xp, index.at, _merged(xp, index.base, index.dead, list(index.recent.keys),
                                        index.recent.m, at))
