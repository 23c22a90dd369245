"""The definitional reference interpreter: small, slow, obviously correct; the test oracle.

Update streams are plain lists of (record tuple, time, diff). Linear stages transform updates
one by one exactly as join_function is defined; operators whose output depends on the time
(temporal_filter, and the stateful operators of later layers) accumulate their input at every
interesting time, re-run the static logic and diff consecutive results. Per-record SQL
expressions are handed to an `Evaluator` (a static SQL engine, Spark in the tests): the
interpreter owns times, diffs and accumulation, the evaluator only computes expressions.
"""
from __future__ import annotations

import decimal
import re
from collections import Counter, defaultdict
from typing import Callable, Iterable, Protocol

from . import ir, query as cq
from .reduce_kernel import call_reduce_kernel
from .schema import ddl_names as _names, expand_stars

Update = tuple[tuple, int, int]
INT64_MAX = 2**63 - 1


class Evaluator(Protocol):
    def select(self, ddl: str, rows: list[tuple], exprs: list[str]) -> tuple[str, list[tuple]]:
        """Evaluate `exprs` (as DataFrame.selectExpr) over `rows` of schema `ddl`;
        return the result's DDL schema and rows."""


def consolidate(updates: Iterable[Update]) -> list[Update]:
    """Sum diffs per (record, time), drop zeros, sort: the canonical form of a stream."""
    acc: dict[tuple, int] = defaultdict(int)
    for rec, t, d in updates:
        acc[(_canonical(rec), t)] += d
    return sorted(((r, t, d) for (r, t), d in acc.items() if d != 0), key=_sort_key)


def _sort_key(u: Update):
    rec, t, d = u
    return (tuple((v is None, v if v is not None else 0) for v in rec), t, d)


def accumulate(updates: Iterable[Update], at: int) -> Counter:
    """The collection at time `at`: multiplicity of each record over updates with time <= at."""
    acc: Counter = Counter()
    for rec, t, d in updates:
        if t <= at:
            acc[_canonical(rec)] += d
    return Counter({r: m for r, m in acc.items() if m != 0})


NAN = float("nan")


def _canonical(rec) -> tuple:
    """`rec` with every floating NaN as the one object NAN. Spark holds NaN equal to NaN (in
    groups, joins, distinct), Python's dicts only the same object (NaN != NaN), and a NaN
    that Spark or numpy computed is a new object: without this, a record's +1 and -1 would
    not meet, nor two NaN keys of a join or a group."""
    return tuple(NAN if v != v and isinstance(v, float) else v for v in rec)


class Interpreter:
    """Evaluates a plan's outputs on whole update streams, memoised per node."""

    def __init__(self, inputs: dict[str, list[Update]], evaluator: Evaluator,
                 max_rounds: int = 1000):
        self.inputs = inputs
        self.sql = evaluator
        self.max_rounds = max_rounds  # an iterate's divergence guard
        self.memo: dict[ir.Node, tuple[str, list[Update]]] = {}

    def run(self, outputs: dict[str, ir.Node]) -> dict[str, list[Update]]:
        return {name: consolidate(self.eval(node)[1]) for name, node in outputs.items()}

    def eval(self, node: ir.Node) -> tuple[str, list[Update]]:
        """(DDL schema, updates) of a node."""
        if node not in self.memo:
            self.memo[node] = getattr(self, "_" + type(node).__name__)(node)
        return self.memo[node]

    # ---- nodes
    def _Input(self, n: ir.Input):
        return n.schema, [(tuple(r), t, d) for r, t, d in self.inputs.get(n.name, [])]

    def _Constant(self, n: ir.Constant):
        return n.schema, [(tuple(r), 0, 1) for r in n.rows]

    def _Concat(self, n: ir.Concat):
        parts = [self.eval(c) for c in n.inputs]
        return parts[0][0], [u for _, ups in parts for u in ups]

    def _Consolidate(self, n: ir.Consolidate):
        ddl, ups = self.eval(n.input)
        return ddl, consolidate(ups)

    def _Linear(self, n: ir.Linear):
        ddl, ups = self.eval(n.input)
        for stage in n.stages:
            ddl, ups = getattr(self, "_stage_" + type(stage).__name__)(stage, ddl, ups)
        return ddl, ups

    def _Arrange(self, n: ir.Arrange):
        return self.eval(n.input)

    def _Join(self, n: ir.Join):
        """At every time: the static equi-join of the accumulated inputs (SQL equality:
        a null key matches nothing)."""
        (lddl, lups), (rddl, rups) = self.eval(n.left), self.eval(n.right)
        lnames, rnames = _names(lddl), _names(rddl)
        lk = [lnames.index(k) for k in n.on]
        rk = [rnames.index(k) for k in n.on]
        lo = [i for i in range(len(lnames)) if i not in lk]
        ro = [i for i in range(len(rnames)) if i not in rk]
        if n.left_order:
            ddl = lddl
        else:
            cols = _columns(lddl)
            ddl = ", ".join([cols[i] for i in lk + lo] + [_columns(rddl)[i] for i in ro])

        holds = self._band(n.band, lddl, lups, rddl, rups)

        def static(left: Counter, right: Counter) -> Counter:
            index = defaultdict(list)
            for r, m in right.items():
                key = tuple(r[i] for i in rk)
                if None not in key:
                    index[key].append((r, m))
            out = Counter()
            for l, m in left.items():
                for r, m2 in index.get(tuple(l[i] for i in lk), []):
                    if not holds(l, r):
                        continue
                    rec = l if n.left_order else (tuple(l[i] for i in lk + lo) +
                                                  tuple(r[i] for i in ro))
                    out[rec] += m * m2
            return out

        return ddl, _per_time([lups, rups], static)

    def _band(self, band, lddl: str, lups, rddl: str, rups) -> Callable:
        """Whether a left and a right record satisfy the join's band: the comparison
        evaluated by the evaluator (Spark's semantics for its types) once per pair of
        distinct values."""
        if band is None:
            return lambda l, r: True
        li, ri = _names(lddl).index(band.column), _names(rddl).index(band.value)
        xs = {_value_key(r[li]): r[li] for r, _, _ in lups}
        vs = {_value_key(r[ri]): r[ri] for r, _, _ in rups}
        ddl = (f"i BIGINT, x {_column_type(_columns(lddl)[li])}, "
               f"v {_column_type(_columns(rddl)[ri])}")
        pairs = [(x, v) for x in xs for v in vs]
        rows = [(i, xs[x], vs[v]) for i, (x, v) in enumerate(pairs)]
        _, held = self.sql.select(ddl, rows, ["i", f"(x {band.op} v) IS TRUE"]) \
            if rows else (None, [])
        true = {pairs[i] for i, ok in held if ok}
        return lambda l, r: (_value_key(l[li]), _value_key(r[ri])) in true

    def _Query(self, n: ir.Query):
        """At every time: the conjunctive query over the accumulated relations by brute
        force, with bag semantics (see _cq_static). Columns: the head variables, typed like
        the column each first appears in. Arities are checked here, where every input's
        columns are known."""
        parts = dict(zip(n.relations, (self.eval(c) for c in n.inputs)))
        q = n.query
        cq.validate(q, {r: _names(ddl) for r, (ddl, _) in parts.items()})
        ddl = ", ".join(f"{v} {_column_type(_columns(parts[r][0])[k])}"
                        for v in q.head for r, k in [q.binding(v)])
        return ddl, _per_time([ups for _, ups in parts.values()],
                              lambda *accs: _cq_static(q, dict(zip(parts, accs))))

    def _Variable(self, n: ir.Variable):
        raise ir.PlanError(f"{n.label()}: used outside its iterate body")

    def _Iterate(self, n: ir.Iterate):
        """At every time: start the variable at the accumulated input, apply the body
        statically (outer collections accumulated at that time) until the variable stops
        changing; the fixed point is the result. No product times here: the executor's
        rounds over (epoch, iteration) are checked against this."""
        ddl, x = self.eval(n.input)
        _, outer = ir.scope_of(n)
        outers = {o: self.eval(o) for o in outer}

        def static(acc_x: Counter, *acc_outer: Counter) -> Counter:
            seeded = {o: (d, _at_zero(acc)) for (o, (d, _)), acc in zip(outers.items(), acc_outer)}
            v = acc_x
            for _ in range(self.max_rounds):
                sub = Interpreter({}, self.sql, self.max_rounds)
                sub.memo = {**seeded, n.variable: (ddl, _at_zero(v))}
                nxt = accumulate(sub.eval(n.body)[1], 0)
                if nxt == v:
                    return v
                v = nxt
            raise ir.PlanError(f"{n.label()}: no fixed point after {self.max_rounds} rounds")

        return ddl, _per_time([x] + [ups for _, ups in outers.values()], static)

    def _Reduce(self, n: ir.Reduce):
        """At every time: group the accumulated input by `by`, apply the reduction."""
        ddl, ups = self.eval(n.input)
        names = _names(ddl)
        red = n.reduction
        by = [names.index(b) for b in n.by]
        out_ddl, values = ddl, {}
        if red.kind == "count":
            out_ddl = ", ".join([_columns(ddl)[i] for i in by] + ["count BIGINT"])
        elif red.kind == "kernel":
            out_ddl = ", ".join([_columns(ddl)[i] for i in by] + _columns(red.schema))
            values = {nm: i for i, nm in enumerate(names) if i not in by}  # kernel's columns
        elif red.kind in ("sum", "min", "max", "aggregate"):
            agg_ddl, _ = self.sql.select(ddl, [], [f"{k}({f'`{c}`' if c else '*'}) AS `{n}`"
                                                   for n, k, c in red.value_parts()])
            out_ddl = ", ".join([_columns(ddl)[i] for i in by] + [agg_ddl])
            values = {c: names.index(c) for _, _, c in red.parts if c is not None}
        if red.kind == "threshold":
            counts = sorted({m for m in _all_multiplicities(ups)})
            _, rows = self.sql.select("count BIGINT", [(c,) for c in counts],
                                      [f"CAST(({red.expr}) AS BIGINT)"])
            values = {c: row[0] for c, row in zip(counts, rows)}
        if red.kind == "top_k":
            recs = list(dict.fromkeys(_canonical(r) for r, _, _ in ups))
            _, rows = self.sql.select(ddl, recs, [f"({e}) AS __k{i}"
                                                 for i, (e, _, _) in enumerate(red.order)])
            values = {r: tuple(row) for r, row in zip(recs, rows)}
        col = names.index(red.column) if red.column else None

        def static(acc: Counter) -> Counter:
            groups = defaultdict(list)
            for r, m in acc.items():
                groups[tuple(r[i] for i in by)].append((r, m))
            out = Counter()
            for key, members in groups.items():
                for rec, m in _reduce_group(red, key, members, col, values):
                    out[rec] += m
            return out

        return out_ddl, _per_time([ups], lambda acc: static(acc))

    def _per_record(self, ddl: str, ups: list[Update], exprs: list[str]):
        """Evaluate exprs once per distinct record: (result DDL without the id, {id: [rows]},
        records by id)."""
        records = list(dict.fromkeys(r for r, _, _ in ups))
        index = {r: i for i, r in enumerate(records)}
        out_ddl, rows = self.sql.select(
            f"__id BIGINT, {ddl}", [(i,) + r for i, r in enumerate(records)],
            ["__id"] + expand_stars(exprs, _names(ddl)))
        by_id: dict[int, list[tuple]] = defaultdict(list)
        for row in rows:
            by_id[row[0]].append(tuple(row[1:]))
        return _drop_first_column(out_ddl), by_id, index

    def _stage_Map(self, s: ir.Map, ddl, ups):
        out_ddl, by_id, index = self._per_record(ddl, ups, list(s.exprs))
        return out_ddl, [(by_id[index[r]][0], t, d) for r, t, d in ups]

    def _stage_Filter(self, s: ir.Filter, ddl, ups):
        _, by_id, index = self._per_record(ddl, ups, [f"({s.expr}) AS __keep"])
        return ddl, [(r, t, d) for r, t, d in ups if by_id[index[r]][0][0] is True]

    def _stage_Negate(self, s, ddl, ups):
        return ddl, [(r, t, -d) for r, t, d in ups]

    def _elements(self, expr: str, ddl, ups):
        """join_function's logic: for each update, the (record, time, diff) elements."""
        out_ddl, by_id, index = self._per_record(ddl, ups, [f"inline({expr})"])
        names = [nm.lower() for nm in _names(out_ddl)]
        t_at = names.index("time") if "time" in names else None
        d_at = names.index("diff") if "diff" in names else None
        keep = [i for i, nm in enumerate(names) if nm not in ("time", "diff")]
        rec_ddl = ", ".join(_columns(out_ddl)[i] for i in keep)
        out = []
        for r, t, d in ups:
            for row in by_id.get(index[r], []):
                et = row[t_at] if t_at is not None else None
                ed = row[d_at] if d_at is not None else 1
                if ed is None:
                    continue  # a null diff contributes nothing
                out.append((tuple(row[i] for i in keep), t if et is None else max(t, et), d * ed))
        return rec_ddl, out

    def _stage_FlatMap(self, s: ir.FlatMap, ddl, ups):
        return self._elements(s.expr, ddl, ups)

    def _stage_Explode(self, s: ir.Explode, ddl, ups):
        return self._elements(s.expr, ddl, ups)

    def _stage_JoinFunction(self, s: ir.JoinFunction, ddl, ups):
        return self._elements(s.expr, ddl, ups)

    def _stage_TemporalFilter(self, s: ir.TemporalFilter, ddl, ups):
        """Definitional: at every interesting time t, keep the accumulated records whose
        bounds hold (lower <= t < upper, null = unbounded) and diff consecutive results."""
        exprs = [f"{s.lower or 'NULL'} AS __lo", f"{s.upper or 'NULL'} AS __hi"]
        _, by_id, index = self._per_record(ddl, ups, exprs)
        bounds = {r: by_id[i][0] for r, i in index.items()}
        times = sorted({t for _, t, _ in ups} | {b for lo_hi in bounds.values()
                                                 for b in lo_hi if b is not None})
        out, prev = [], Counter()
        for t in times:
            now = Counter({r: m for r, m in accumulate(ups, t).items()
                           if (bounds[r][0] is None or bounds[r][0] <= t)
                           and (bounds[r][1] is None or t < bounds[r][1])})
            for r in set(now) | set(prev):
                if now[r] != prev[r]:
                    out.append((r, t, now[r] - prev[r]))
            prev = now
        return ddl, out

    def _stage_Kernel(self, s: ir.Kernel, ddl, ups):
        return s.schema, apply_kernel(s.fn, _names(ddl), _names(s.schema), ups)


def _at_zero(acc: Counter) -> list[Update]:
    """An accumulated collection as updates at time 0."""
    return [(r, 0, m) for r, m in acc.items()]


def _reduce_group(red: ir.Reduction, key: tuple, members, col, values):
    """(record, multiplicity) outputs of one group; `members` are (record, multiplicity)
    with multiplicity != 0."""
    positive = [(r, m) for r, m in members if m > 0]
    if red.kind == "count":
        total = _aggregate_value("count", members, None)
        return [(key + (total,), 1)] if total != 0 else []
    if red.kind == "sum" or (red.kind in ("min", "max") and positive):
        return [(key + (_aggregate_value(red.kind, members, col),), 1)]
    if red.kind in ("min", "max"):
        return []
    if red.kind == "aggregate":  # members is never empty: the group has records
        return [(key + tuple(_aggregate_value(k, members, values.get(c))
                             for _, k, c in red.parts), 1)]
    if red.kind == "distinct":
        return [(r, 1) for r, _ in positive]
    if red.kind == "kernel":
        import array_api_compat.numpy as xp

        value_names = _names(red.schema)  # the output's; `values` holds the input's indices
        cols = {nm: xp.asarray([r[i] for r, _ in members]) for nm, i in values.items()}
        group = xp.zeros(len(members), dtype=xp.int64)
        count = xp.asarray([m for _, m in members], dtype=xp.int64)
        _, out, mult = call_reduce_kernel(red, xp, group, cols, count, 1)
        return [(key + tuple(_plain(out[c][j]) for c in value_names), int(mult[j]))
                for j in range(mult.shape[0]) if int(mult[j]) != 0]
    if red.kind == "threshold":
        return [(r, values[m]) for r, m in members if values[m]]
    if red.kind == "top_k":
        ranked = sorted(positive, key=lambda rm: (_Ordered(values[rm[0]], red.order),
                                                   _record_key(rm[0])))
        out, left = [], red.k
        for r, m in ranked:
            if left <= 0:
                break
            out.append((r, min(m, left)))
            left -= m
        return out
    raise ValueError(f"unknown reduction {red.kind}")


def _aggregate_value(kind: str, members, col):
    """One value of an aggregate: count(*) (col None) and count(col) sum multiplicities, sum
    adds x*m (NULL without a non-null x), min and max read the positive members."""
    if kind == "count":
        return sum(m for r, m in members if col is None or r[col] is not None)
    if kind == "sum":
        xs = [(r[col], m) for r, m in members if r[col] is not None]
        with decimal.localcontext(_EXACT):  # Decimal's default context keeps 28 digits
            return sum(x * m for x, m in xs) if xs else None
    xs = [r[col] for r, m in members if m > 0 and r[col] is not None]
    return (min if kind == "min" else max)(xs, key=_spark_order) if xs else None


# Sums of DECIMAL(38) values weighted by int64 multiplicities need about 60 digits; the
# default context (28) would round them, silently, in the oracle itself.
_EXACT = decimal.Context(prec=100, traps=[decimal.Inexact, decimal.InvalidOperation])


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _null_first(v):
    return (v is not None, _spark_order(v) if v is not None else 0)


def _spark_order(v):
    """A non-null value as Spark orders it: a floating NaN above every number and equal to
    itself (Python's NaN compares false with everything, which leaves a sort's order to its
    input's), -0.0 equal to 0.0 as Python has it."""
    if isinstance(v, float):
        return (1, 0.0) if v != v else (0, v)
    return v


class _Ordered:
    """A record's top_k sort values, compared key by key as ORDER BY does: DESC reverses
    the values, NULLS FIRST/LAST places nulls whatever the direction."""

    def __init__(self, values: tuple, order: tuple):
        self.values, self.order = values, order

    def __eq__(self, other):
        return not (self < other or other < self)

    def __lt__(self, other):
        for a, b, (_, desc, nulls_first) in zip(self.values, other.values, self.order):
            if a is None and b is None:
                continue
            if a is None or b is None:
                return (a is None) == nulls_first
            a, b = _spark_order(a), _spark_order(b)
            if a == b:
                continue
            return (a > b) if desc else (a < b)
        return False


def _value_key(v):
    """A value as a dict key that finds every NaN (NaN != NaN in Python, equal in Spark)."""
    return ("NaN",) if isinstance(v, float) and v != v else v


def _record_key(rec):
    return tuple(_null_first(v) for v in rec)


def _all_multiplicities(ups):
    """Every multiplicity any record reaches at any time (threshold's inputs)."""
    out = set()
    for t in sorted({t for _, t, _ in ups}):
        out.update(accumulate(ups, t).values())
    return out


def _per_time(streams: list[list[Update]], static) -> list[Update]:
    """Definitional evaluation of a non-linear operator: at every time at which an input
    changes, accumulate each input, apply `static`, and emit the difference from the
    previous result."""
    out, prev = [], Counter()
    for t in sorted({t for ups in streams for _, t, _ in ups}):
        now = static(*[accumulate(ups, t) for ups in streams])
        now = Counter({r: m for r, m in now.items() if m != 0})
        for r in set(now) | set(prev):
            if now[r] != prev[r]:
                out.append((r, t, now[r] - prev[r]))
        prev = now
    return out


def apply_kernel(fn: Callable, names: list[str], out_names: list[str],
                 ups: list[Update]) -> list[Update]:
    """Run a join_function kernel on all updates at once with numpy, then apply the
    definition of join_function in plain Python (time = max, diff = product)."""
    import array_api_compat.numpy as xp

    cols = {nm: xp.asarray([r[i] for r, _, _ in ups]) for i, nm in enumerate(names)}
    res = dict(fn(xp, cols))
    parent = [int(p) for p in res.pop("parent", range(len(ups)))]
    times = res.pop("time", None)
    diffs = res.pop("diff", None)
    out_cols = [[v.item() if hasattr(v, "item") else v for v in res[nm]] for nm in out_names]
    out = []
    for j, p in enumerate(parent):
        r, t, d = ups[p]
        et = None if times is None else int(times[j])
        ed = 1 if diffs is None else int(diffs[j])
        out.append((tuple(c[j] for c in out_cols), t if et is None else max(t, et), d * ed))
    return out


def _cq_static(q: "cq.Query", relations: dict[str, Counter]) -> Counter:
    """Head record -> sum over satisfying assignments of the product of the atoms'
    multiplicities: a hash join atom by atom, then the comparisons. Like SQL, null matches
    nothing: a variable bound to null survives only where it occurs once."""
    rows: list[tuple[dict, int]] = [({}, 1)]
    bound: set[str] = set()
    for atom in q.atoms:
        key = [(k, t.name) for k, t in enumerate(atom.terms)
               if isinstance(t, cq.Var) and t.name in bound]
        index = defaultdict(list)
        for rec, m in relations[atom.relation].items():
            b = _match_atom(atom, rec)
            if b is not None and all(rec[k] is not None for k, _ in key):
                index[tuple(rec[k] for k, _ in key)].append((b, m))
        rows = [(b0 | b, m0 * m) for b0, m0 in rows
                for b, m in index.get(tuple(b0[v] for _, v in key), [])]
        bound |= set(atom.vars())
    out = Counter()
    for b, m in rows:
        if all(c.holds(b) for c in q.comparisons):
            out[tuple(b[v] for v in q.head)] += m
    return out


def _match_atom(atom: "cq.Atom", rec: tuple):
    """The atom's variables bound by `rec`, or None where a constant or a repeated
    variable does not match (null matches nothing)."""
    b: dict = {}
    for t, x in zip(atom.terms, rec):
        if isinstance(t, cq.Const) or t.name in b:
            want = t.value if isinstance(t, cq.Const) else b[t.name]
            if x is None or want is None or x != want:
                return None
        else:
            b[t.name] = x
    return b


def _column_type(column: str) -> str:
    """The type part of one DDL column ("`a b` BIGINT", "x: INT")."""
    return re.match(r"\s*(`[^`]*`|[^\s:]+)\s*:?\s*(.*)$", column, re.S).group(2)


def _columns(ddl: str) -> list[str]:
    from .schema import split_top_level
    return split_top_level(ddl)


def _drop_first_column(ddl: str) -> str:
    return ", ".join(_columns(ddl)[1:])


def evaluate(outputs: dict[str, ir.Node], inputs: dict[str, list[Update]],
             evaluator: Evaluator) -> dict[str, list[Update]]:
    """Consolidated output streams of a plan on whole input streams."""
    return Interpreter(inputs, evaluator).run(outputs)
