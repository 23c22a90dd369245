"""Delta rules run on array kernels over the rows a step touches (DESIGN §6).

A step of few changes needs little of each relation: its seeds' own updates and, per
extender, the updates under the keys the prefixes reach. `run` executes every rule of a
query depth by depth; at each depth it asks `lookup` once for all the index rows that the
rules' validators or extenders need (the Spark layer answers with one filtered job over the
arrangements, executor/operators/query/spark.py), then counts, proposes and validates on `xp` (numpy, or
cupy on a GPU) with gpu_kernels.timed_index. Nothing here imports Spark, so the same code is
checked against plans.query.run_rules_python on plain arrays.

Columns are int64 codes (executor/arrange/encoding.py); `null` is the code of SQL's null, which,
as in the reference interpreter, matches nothing: a variable that occurs more than once or in
a comparison (`joined`) drops the rows binding it to null, and one that occurs once keeps them.
Constants arrive as codes of their column's type. Times are one int64 coordinate.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from gpu_kernels import consolidate, group_ids
from gpu_kernels.csr import row_ranges
from gpu_kernels.diffs import multiply_diffs
from gpu_kernels.timed_index import build_timed_index, extend_as_of, multiplicity, visible
from plans import query as cq


@dataclass(frozen=True)
class Request:
    """Index rows of `relation` whose `key` columns match a prefix (and `constants`, and
    `repeats` equal to the `value` column): an extender's candidates, or with value None a
    validator's whole records."""

    relation: str
    key: tuple[int, ...]
    value: Optional[int]
    repeats: tuple[int, ...]
    constants: tuple[tuple[int, int], ...]


# lookup({request: [key tuples as arrays]}) -> {request: (key columns, value, time, diff)};
# rows under keys no prefix asked for may come too (an index of them is never probed there)
Lookup = Callable[[dict], dict]

_ROWS_PER_PREFIX = 8  # a settled index of at most this many rows per prefix gets presence bits

_OPS = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal",
        "=": "equal", "!=": "not_equal"}


@dataclass
class Prefixes:
    vars: dict  # variable -> array
    t: object
    d: object

    def take(self, xp, rows) -> "Prefixes":
        return Prefixes({v: xp.take(a, rows) for v, a in self.vars.items()},
                        xp.take(self.t, rows), xp.take(self.d, rows))


def run(xp, query: cq.Query, rules, seeds: dict, lookup: Lookup, chunk_rows: int = 1 << 19,
        null: Optional[int] = None, threads: int = 1, canonical: frozenset = frozenset()):
    """The query's output changes from each rule's seeds: seeds[relation] = (columns, time,
    diff) of the updates at the times the rules run. Returns (head columns, time, diff),
    consolidated. With `null`, rows binding a joined variable to it are dropped. A big
    extension's chunks run on up to `threads` threads (for numpy; one for a device); a
    chunk of ~512K candidates keeps its arrays (4 MiB each) near the caches and the step's
    peak memory, which a first step pays in page faults, low. `canonical`: the relations
    whose seeds come consolidated, sorted by their columns and time."""
    unbound = _Nulls(null, joined(query) if null is not None else frozenset())
    states = [(rule, _seed(xp, rule, *seeds[rule.relation], unbound,
                           rule.relation in canonical)) for rule in rules]
    wants: dict = {}
    for rule, p in states:
        for val in rule.validators:
            req = _validator_request(val)
            wants.setdefault(req, []).append([p.vars[v] for _, v in val.columns])
    got = lookup(wants) if wants else {}
    states = [(rule, _validated(xp, rule, p, got)) for rule, p in states]
    for depth in range(max((len(r.steps) for r in rules), default=0)):
        wants = {}
        for rule, p in states:
            if depth < len(rule.steps):
                for e in rule.steps[depth].extenders:
                    wants.setdefault(request(e), []).append([p.vars[v] for _, v in e.key])
        got = lookup(wants) if wants else {}
        states = [(rule, extended(xp, rule.steps[depth], p, got, chunk_rows,
                                  live_vars(rule, depth, query.head), unbound, threads))
                  if depth < len(rule.steps) else (rule, p) for rule, p in states]
    cols = [xp.concat([p.vars[v] for _, p in states]) for v in query.head]
    t = xp.concat([p.t for _, p in states])
    d = xp.concat([p.d for _, p in states])
    keys, d = consolidate(xp, cols + [t], d)
    return keys[:-1], keys[-1], d


def joined(query: cq.Query) -> frozenset:
    """Variables a null binding can never satisfy: those occurring more than once in the
    atoms, or in a comparison."""
    seen = [t.name for a in query.atoms for t in a.terms if isinstance(t, cq.Var)]
    compared = {v for c in query.comparisons for v in c.vars()}
    return frozenset(v for v in seen if seen.count(v) > 1) | compared


@dataclass(frozen=True)
class _Nulls:
    code: Optional[int]
    joined: frozenset

    def keep(self, xp, keep, var: str, column):
        """`keep` narrowed to rows where `column` (bound to `var`) may stand."""
        if self.code is None or var not in self.joined:
            return keep
        return xp.logical_and(keep, column != self.code)


def no_nulls() -> _Nulls:
    """The null rule of rows that hold no null code (an executor's bucket, whose fetched
    keys and values are never null)."""
    return _Nulls(None, frozenset())


def live_vars(rule: cq.DeltaRule, depth: int, head) -> set:
    """Variables still needed once step `depth` has bound its variable: the head's and those
    later steps key on or compare. The others are summed out of each chunk as it is made, so
    a query whose head drops variables (a count) never holds its full listing."""
    live = set(head)
    for step in rule.steps[depth + 1:]:
        live.update(v for e in step.extenders for _, v in e.key)
        live.update(v for c in step.comparisons for v in c.vars())
    return live


def request(e: cq.Extender) -> Request:
    return Request(e.relation, tuple(k for k, _ in e.key), e.value, e.repeats, e.constants)


def requests(rule: cq.DeltaRule) -> list[Request]:
    """Every index a rule reads: its validators' and each step's extenders'."""
    return [_validator_request(v) for v in rule.validators] + \
        [request(e) for step in rule.steps for e in step.extenders]


def _validator_request(val: cq.Validator) -> Request:
    return Request(val.relation, tuple(k for k, _ in val.columns), None, (), val.constants)


def _seed(xp, rule: cq.DeltaRule, columns, t, d, unbound: _Nulls,
          canonical: bool = False) -> Prefixes:
    """The rule's prefixes from its seed relation's changes, consolidated. Changes already
    consolidated and sorted whose variables first occur in column order give them so: the
    other columns are constants or repeats, so rows stay distinct and in order."""
    keep = xp.ones(t.shape[0], dtype=xp.bool)
    for k, x in rule.constants:
        keep = xp.logical_and(keep, columns[k] == x)
    first: dict = {}
    for k, v in rule.columns:
        if v in first:  # a repeated variable: equal values
            keep = xp.logical_and(keep, columns[k] == columns[first[v]])
        else:
            first[v] = k
            keep = unbound.keep(xp, keep, v, columns[k])
    p = Prefixes({v: columns[k] for v, k in first.items()}, t, d)
    if not bool(xp.all(keep)):
        p = p.take(xp, xp.nonzero(keep)[0])
    p = _filtered(xp, p, rule.comparisons)
    in_order = list(first.values()) == sorted(first.values())
    return p if canonical and in_order else _consolidated(xp, p)


def _validated(xp, rule: cq.DeltaRule, p: Prefixes, got: dict) -> Prefixes:
    for val in rule.validators:
        key_cols, _, t, d = _seen(xp, got[_validator_request(val)], p.t, val.reads)
        rows, prefix = codes(xp, key_cols, [p.vars[v] for _, v in val.columns],
                              t.shape[0], p.t.shape[0])
        index = _index(xp, rows, xp.zeros_like(rows), t, d, p.t, val.reads)
        lo, hi = row_ranges(xp, index.csr, prefix)
        m = multiplicity(xp, index, lo, hi, xp.zeros_like(prefix), p.t, val.reads)
        p = Prefixes(p.vars, p.t, multiply_diffs(xp, p.d, m))
        p = p.take(xp, xp.nonzero(p.d != 0)[0])
    return p


def extended(xp, step: cq.Extension, p: Prefixes, got: dict, chunk_rows: int,
             live: set, unbound: _Nulls, threads: int) -> Prefixes:
    visible_rows = [_seen(xp, got[request(e)], p.t, e.reads) for e in step.extenders]
    if any(rows[2].shape[0] == 0 for rows in visible_rows):  # an extender with no candidates
        return _none(xp, p, step.var, live)
    indices, keys, built = [], [], {}
    for e, (key_cols, value, t, d) in zip(step.extenders, visible_rows):
        rows, prefix = codes(xp, key_cols, [p.vars[v] for _, v in e.key], t.shape[0],
                              p.t.shape[0])
        same = (request(e), e.reads) if len(e.key) == 1 else None  # rows are the column
        if same not in built or same is None:
            built[same] = _index(xp, rows, value, t, d, p.t, e.reads)
        indices.append(built[same])
        keys.append(prefix)
    reads = [e.reads for e in step.extenders]
    ranges = [row_ranges(xp, ix.csr, k) for ix, k in zip(indices, keys)]

    def chunk(bounds) -> Prefixes:
        lo, hi = bounds
        parent, value, d = extend_as_of(xp, None, p.t[lo:hi], p.d[lo:hi], indices, reads,
                                        [(a[lo:hi], b[lo:hi]) for a, b in ranges])
        grown = p.take(xp, parent + lo)
        grown = Prefixes(grown.vars | {step.var: value}, grown.t, d)
        if unbound.code is not None and step.var in unbound.joined:
            grown = grown.take(xp, xp.nonzero(value != unbound.code)[0])
        grown = _filtered(xp, grown, step.comparisons)
        kept = {v: a for v, a in grown.vars.items() if v in live}
        return _consolidated(xp, Prefixes(kept, grown.t, grown.d))

    chunks = _chunks(xp, ranges, chunk_rows)
    if threads > 1 and len(chunks) > 1:  # numpy releases the GIL inside its array loops
        with ThreadPoolExecutor(min(threads, len(chunks))) as pool:
            parts = list(pool.map(chunk, chunks))
    else:
        parts = [chunk(c) for c in chunks]
    if not parts:
        return _none(xp, p, step.var, live)
    return Prefixes({v: xp.concat([q.vars[v] for q in parts]) for v in parts[0].vars},
                     xp.concat([q.t for q in parts]), xp.concat([q.d for q in parts]))


def _none(xp, p: Prefixes, var: str, live: set) -> Prefixes:
    """No prefixes, with the columns an extension by `var` keeps."""
    return Prefixes({v: xp.zeros(0, dtype=xp.int64) for v in [*p.vars, var] if v in live},
                     p.t[:0], p.d[:0])


def _seen(xp, rows: tuple, t, reads: str) -> tuple:
    """The index rows (key columns, value, time, diff) that some prefix (times `t`) reads:
    a big step's own updates are invisible to the rules that read the relation as of
    `time < t`, so those rules neither index nor propose them."""
    key_cols, value, times, d = rows
    if not t.shape[0]:
        return [k[:0] for k in key_cols], value[:0], times[:0], d[:0]
    keep = visible(xp, times, xp.max(t), reads)
    if bool(xp.all(keep)):
        return rows
    keep = xp.nonzero(keep)[0]
    return ([xp.take(k, keep) for k in key_cols], xp.take(value, keep), xp.take(times, keep),
            xp.take(d, keep))


def _index(xp, key, value, times, d, t, reads: str):
    """The timed index of rows a relation's prefixes (times `t`) read; settled when every
    prefix sees every row (a big step's own updates read as of `time <= t`, a step of one
    time reading the older history), so a multiplicity is one search. Presence bits for
    its heaviest keys pay for their building only where the prefixes are many against the
    rows (a big step; a small step probes a big index a few thousand times)."""
    settled = t.shape[0] > 0 and bool(xp.all(visible(xp, times, xp.min(t), reads)))
    many = t.shape[0] * _ROWS_PER_PREFIX >= key.shape[0]
    return build_timed_index(xp, key, value, times, d, settled, None if many else 0)


def _chunks(xp, ranges, chunk_rows: int):
    """[lo, hi) prefix ranges whose proposals (bounded by the least count) stay near
    chunk_rows, so a hub does not blow up memory."""
    n = ranges[0][0].shape[0] if ranges else 0
    if n == 0:
        return []
    least = ranges[0][1] - ranges[0][0]
    for lo, hi in ranges[1:]:
        least = xp.minimum(least, hi - lo)
    ends = xp.cumulative_sum(least)
    cuts = xp.searchsorted(ends, xp.arange(chunk_rows, int(ends[-1]) + 1, chunk_rows,
                                           dtype=ends.dtype), side="right")
    bounds = sorted({0, n} | {int(c) for c in cuts if 0 < int(c) < n})
    return list(zip(bounds[:-1], bounds[1:]))


def _filtered(xp, p: Prefixes, comparisons) -> Prefixes:
    if not comparisons:
        return p
    keep = xp.ones(p.t.shape[0], dtype=xp.bool)
    for c in comparisons:
        a, b = (p.vars[x.name] if isinstance(x, cq.Var) else xp.asarray(x.value, dtype=xp.int64)
                for x in (c.left, c.right))
        keep = xp.logical_and(keep, getattr(xp, _OPS[c.op])(a, b))
    return p.take(xp, xp.nonzero(keep)[0])


def _consolidated(xp, p: Prefixes) -> Prefixes:
    names = list(p.vars)
    keys, d = consolidate(xp, [p.vars[v] for v in names] + [p.t], p.d)
    return Prefixes(dict(zip(names, keys[:-1])), keys[-1], d)


def codes(xp, a_cols: list, b_cols: list, na: int, nb: int):
    """One int64 code per row of two tables (na and nb rows) of key columns, equal iff the
    rows are equal: the column itself for one, a dense rank of the rows for several, 0 for
    none (an atom whose only variable is the one bound)."""
    if len(a_cols) == 1:
        return a_cols[0], b_cols[0]
    if not a_cols:
        return xp.zeros(na, dtype=xp.int64), xp.zeros(nb, dtype=xp.int64)
    rank = group_ids(xp, [xp.concat([a, b]) for a, b in zip(a_cols, b_cols)])
    return rank[:na], rank[na:]
