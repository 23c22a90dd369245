"""The cost model: a plan's cost is the sum over its distinct operators (a sub-plan shared by
several consumers or outputs counts once) of

    state   records kept in arrangements (traces): an Arrange keeps its input's records; a
            Query keeps one index per (relation, key) its delta rules read;
    moved   records shuffled between partitions: arranging, consolidating, a reduction's
            output, a query's indexes and output;
    cells   values (records x columns) kept or moved: what projecting columns away saves;
    python  records through a Python round trip: one per maximal run of kernel stages;
    passes  records through linear chains: one pass per chain, plus a fifth per stage;
    ops     operators, each a fixed Spark cost (planning, a stage); breaks ties toward fewer.

Sizes are estimates, not statistics: every leaf holds N_INPUT records; a filter keeps
SELECTIVITY of them, a flat_map, explode or join_function emits FAN_OUT per record, a join
emits JOIN_FAN_OUT x its larger side, a reduction REDUCE_RATIO of its input. Widths are
counted from the plan's column names (DEFAULT_WIDTH where an expression hides them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from .. import query as cq
from ..schema import column_names
from .columns import columns

N_INPUT = 1000.0
SELECTIVITY, FAN_OUT, JOIN_FAN_OUT, REDUCE_RATIO = 0.5, 2.0, 2.0, 0.5
DEFAULT_WIDTH = 2.0
WEIGHTS = {"state": 1.0, "moved": 1.0, "cells": 0.25, "python": 3.0, "passes": 0.1,
           "ops": 5.0}
INF = float("inf")


@dataclass(frozen=True)
class Terms:
    state: float = 0.0
    moved: float = 0.0
    cells: float = 0.0
    python: float = 0.0
    passes: float = 0.0
    ops: float = 0.0

    def __add__(self, o: "Terms") -> "Terms":
        return Terms(*(getattr(self, f) + getattr(o, f) for f in WEIGHTS))

    @property
    def total(self) -> float:
        return sum(w * getattr(self, f) for f, w in WEIGHTS.items())

    def __str__(self):
        return f"total={self.total:,.0f} (" + ", ".join(
            f"{f}={getattr(self, f):,.0f}" for f in WEIGHTS) + ")"


def _stage_factor(s: ir.Stage) -> float:
    if isinstance(s, (ir.Filter, ir.TemporalFilter)):
        return SELECTIVITY
    return FAN_OUT if isinstance(s, (ir.FlatMap, ir.Explode, ir.JoinFunction)) else 1.0


def _kernel_runs(stages) -> int:
    kinds = [isinstance(s, ir.Kernel) for s in stages]
    return sum(1 for i, k in enumerate(kinds) if k and (i == 0 or not kinds[i - 1]))


def query_indexes(query: cq.Query, order) -> set[tuple[str, tuple[int, ...]]]:
    """(relation, key columns) of every arrangement the query's delta rules read."""
    out = set()
    for rule in cq.delta_rules(query, order):
        out |= {(v.relation, tuple(k for k, _ in v.columns)) for v in rule.validators}
        out |= {(e.relation, tuple(k for k, _ in e.key)) for s in rule.steps
                for e in s.extenders}
    return out


def _stage_width(s: ir.Stage, width: float) -> float:
    if isinstance(s, ir.Map):
        return float(len(s.exprs))
    if isinstance(s, ir.Kernel):
        return float(len(column_names(s.schema, "kernel schema")))
    return width  # filters keep the columns; flat_map and the like: unknown, estimated same


def _reduce_width(by, red: ir.Reduction, width: float) -> float:
    values = red.values()
    return width if values is None else len(by) + float(len(values))


def leaf_width(node: ir.Node, memo: dict) -> float:
    cols = columns(node, memo)
    return float(len(cols)) if cols else DEFAULT_WIDTH


def operator(kind: str, data, rows: list[float], widths: list[float]
             ) -> tuple[Terms, float, float]:
    """(own cost terms, output records, output width) of one operator given its inputs'
    records and widths."""
    if kind == "leaf":
        return Terms(), N_INPUT, data
    if kind == "linear":
        out, passes, width = rows[0], rows[0], widths[0]
        for s in data:
            passes += 0.2 * out
            out *= _stage_factor(s)
            width = _stage_width(s, width)
        return Terms(python=rows[0] * _kernel_runs(data), passes=passes, ops=1), out, width
    if kind == "concat":
        return Terms(ops=1), sum(rows), max(widths, default=DEFAULT_WIDTH)
    if kind == "consolidate":
        return Terms(moved=rows[0], cells=rows[0] * widths[0], ops=1), rows[0], widths[0]
    if kind == "arrange":
        cells = 2 * rows[0] * widths[0]
        return Terms(state=rows[0], moved=rows[0], cells=cells, ops=1), rows[0], widths[0]
    if kind == "join":
        semi, keys = data
        if semi:
            return Terms(ops=1), rows[0], widths[0]
        return Terms(ops=1), JOIN_FAN_OUT * max(rows), sum(widths) - keys
    if kind == "reduce":
        out, width = REDUCE_RATIO * rows[0], _reduce_width(*data, widths[0])
        return Terms(moved=out, cells=out * width, ops=1), out, width
    if kind == "query":
        relations, query, order = data
        size, width = dict(zip(relations, rows)), dict(zip(relations, widths))
        indexes = query_indexes(query, order)
        kept = sum(size[r] for r, _ in indexes)
        out, head = JOIN_FAN_OUT * max(rows), float(len(query.head))
        cells = 2 * sum(size[r] * width[r] for r, _ in indexes) + out * head
        steps = sum(1 + len(r.steps) for r in cq.delta_rules(query, order))
        return Terms(state=kept, moved=kept + out, cells=cells, ops=steps), out, head
    raise ValueError(kind)


def plan_cost(outputs: dict[str, ir.Node]) -> Terms:
    """The cost of an IR plan, each distinct node once."""
    rows: dict[ir.Node, float] = {}
    widths: dict[ir.Node, float] = {}
    memo: dict = {}
    total = Terms()
    for n in ir.topological(list(outputs.values())):
        kind, data = _ir_shape(n, memo)
        kids = n.children()
        own, rows[n], widths[n] = operator(kind, data, [rows[c] for c in kids],
                                           [widths[c] for c in kids])
        total = total + own
    return total


def _ir_shape(n: ir.Node, memo: dict):
    if isinstance(n, ir.Linear):
        return "linear", n.stages
    if isinstance(n, ir.Join):
        return "join", (n.left_order, len(n.on))  # a band join: a semijoin's cost
    if isinstance(n, ir.Query):
        return "query", (n.relations, n.query, n.order)
    if isinstance(n, ir.Reduce):
        return "reduce", (n.by, n.reduction)
    for cls, kind in ((ir.Concat, "concat"), (ir.Consolidate, "consolidate"),
                      (ir.Arrange, "arrange")):
        if isinstance(n, cls):
            return kind, None
    return "leaf", leaf_width(n, memo)


# --------------------------------------------------------------------------- on e-graph terms
@dataclass
class DagCost:
    """A term's cost with shared sub-terms counted once (`parts`: sub-term -> own cost), and
    its estimated output records and width."""

    total: float
    rows: float = 0.0
    parts: dict = field(default_factory=dict, repr=False)
    items: tuple = ()  # a list's (records, width) per item
    width: float = DEFAULT_WIDTH

    def __lt__(self, o):
        return self.total < o.total

    def __le__(self, o):
        return self.total <= o.total

    def __gt__(self, o):
        return self.total > o.total

    def __ge__(self, o):
        return self.total >= o.total

    def __eq__(self, o):
        return isinstance(o, DagCost) and self.total == o.total

    def __hash__(self):
        return hash(self.total)


class CostModel:
    """egglog cost model: the same `operator` costs as plan_cost, on e-nodes. Stream terms
    and the helpers of the rules (prev, linear_each) cannot run: infinite cost. It reads the
    e-node's declaration directly (egglog's internal form, pinned version): the public
    accessors cost a millisecond per call, and extraction calls this once per e-node."""

    KINDS = frozenset(("leaf", "linear", "concat", "consolidate", "arrange", "join", "reduce",
                       "query"))

    def __init__(self, table: list):
        self.table = table
        self.memo: dict = {}

    def __call__(self, egraph, expr, kids: list[DagCost]) -> DagCost:
        decl = expr.__egg_typed_expr__
        ref = getattr(decl.expr, "callable", None)
        method = getattr(ref, "method_name", None)
        if method is None:  # a literal or a container value
            return DagCost(0.0)
        sort = ref.ident.name
        if sort in ("Colls", "Root") and method in ("nil", "cons", "outputs"):
            items = ((kids[0].rows, kids[0].width),) + kids[1].items if method == "cons" \
                else ()
            out = self._combine(decl, 0.0, sum(r for r, _ in items), kids)
            out.items = items
            return out
        if sort != "Coll" or method not in self.KINDS or any(c.total == INF for c in kids):
            return DagCost(INF)
        args = [a.expr for a in decl.expr.args]
        if method in ("concat", "query"):
            rows, widths = [r for r, _ in kids[-1].items], [w for _, w in kids[-1].items]
        else:
            coll = [c for c in kids if c.parts]
            rows, widths = [c.rows for c in coll], [c.width for c in coll]
        own, out, width = operator(method, self._data(method, args), rows, widths)
        cost = self._combine(decl, own.total, out, kids)
        cost.width = width
        return cost

    def _data(self, kind, args):
        if kind == "linear":
            return tuple(self.table[a.expr.value][1] for a in args[1].args)
        if kind == "join":
            what, payload = self.table[args[2].value]
            return bool(args[3].value), len(payload[0] if what == "band" else payload)
        if kind in ("query", "reduce"):
            return self.table[args[0 if kind == "query" else 1].value][1]
        if kind == "leaf":
            return leaf_width(self.table[args[0].value][1], self.memo)
        return None

    @staticmethod
    def _combine(key, own: float, rows: float, kids: list[DagCost]) -> DagCost:
        if own == INF or any(c.total == INF for c in kids):
            return DagCost(INF)
        parts = {}
        for c in kids:
            parts.update(c.parts)
        parts[key] = own
        return DagCost(sum(parts.values()), rows, parts)
