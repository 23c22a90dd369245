"""The definitional reference interpreter: small, slow, obviously correct; the test oracle.

Update streams are plain lists of (record tuple, time, diff). Linear stages transform updates
one by one exactly as join_function is defined; operators whose output depends on the time
(temporal_filter, and the stateful operators of later layers) accumulate their input at every
interesting time, re-run the static logic and diff consecutive results. Per-record SQL
expressions are handed to an `Evaluator` (a static SQL engine, Spark in the tests): the
interpreter owns times, diffs and accumulation, the evaluator only computes expressions.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable, Iterable, Protocol

from . import ir

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
        acc[(tuple(rec), t)] += d
    return sorted(((r, t, d) for (r, t), d in acc.items() if d != 0), key=_sort_key)


def _sort_key(u: Update):
    rec, t, d = u
    return (tuple((v is None, v if v is not None else 0) for v in rec), t, d)


def accumulate(updates: Iterable[Update], at: int) -> Counter:
    """The collection at time `at`: multiplicity of each record over updates with time <= at."""
    acc: Counter = Counter()
    for rec, t, d in updates:
        if t <= at:
            acc[tuple(rec)] += d
    return Counter({r: m for r, m in acc.items() if m != 0})


class Interpreter:
    """Evaluates a plan's outputs on whole update streams, memoised per node."""

    def __init__(self, inputs: dict[str, list[Update]], evaluator: Evaluator):
        self.inputs = inputs
        self.sql = evaluator
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

    # ---- linear stages
    def _per_record(self, ddl: str, ups: list[Update], exprs: list[str]):
        """Evaluate exprs once per distinct record: (result DDL without the id, {id: [rows]},
        records by id)."""
        records = list(dict.fromkeys(r for r, _, _ in ups))
        index = {r: i for i, r in enumerate(records)}
        out_ddl, rows = self.sql.select(
            f"__id BIGINT, {ddl}", [(i,) + r for i, r in enumerate(records)], ["__id"] + exprs)
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


def _names(ddl: str) -> list[str]:
    return [c.split()[0].strip("`") for c in _columns(ddl)]


def _columns(ddl: str) -> list[str]:
    from .schema import split_top_level
    return split_top_level(ddl)


def _drop_first_column(ddl: str) -> str:
    return ", ".join(_columns(ddl)[1:])


def evaluate(outputs: dict[str, ir.Node], inputs: dict[str, list[Update]],
             evaluator: Evaluator) -> dict[str, list[Update]]:
    """Consolidated output streams of a plan on whole input streams."""
    return Interpreter(inputs, evaluator).run(outputs)
