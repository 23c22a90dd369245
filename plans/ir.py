"""The plan IR: immutable nodes that a Dataflow builds and every later layer reads.

Nodes are frozen dataclasses, so equal sub-plans compare (and hash) equal: the executor
memoises by node, and the optimizer can encode nodes as e-graph terms one to one.
Linear operators are all one node kind, `Linear`, holding a chain of stages: each stage is an
instance of `join_function`, and a chain of stages is their composition (`followed_by`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Optional

from . import query as cq
from .errors import PlanError
from .schema import column_names


# --------------------------------------------------------------------------- linear stages
@dataclass(frozen=True)
class Stage:
    """One join_function instance; `label` is what explain prints."""

    def label(self) -> str:  # pragma: no cover - every stage overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class Map(Stage):
    exprs: tuple[str, ...]

    def label(self):
        return f"map({', '.join(self.exprs)})"


@dataclass(frozen=True)
class Filter(Stage):
    expr: str

    def label(self):
        return f"filter({self.expr})"


@dataclass(frozen=True)
class FlatMap(Stage):
    """`expr` yields array<struct<...>>: one output record per element."""

    expr: str

    def label(self):
        return f"flat_map({self.expr})"


@dataclass(frozen=True)
class Explode(Stage):
    """`expr` yields array<struct<..., diff BIGINT>>: output diff = input diff x element diff."""

    expr: str

    def label(self):
        return f"explode({self.expr})"


@dataclass(frozen=True)
class JoinFunction(Stage):
    """`expr` yields array<struct<..., time BIGINT, diff BIGINT>>; time and diff are optional
    fields (absent or null time: unchanged; absent diff: 1)."""

    expr: str

    def label(self):
        return f"join_function({self.expr})"


@dataclass(frozen=True)
class TemporalFilter(Stage):
    """Present at times t with lower <= t < upper; a None expression or null value is unbounded."""

    lower: Optional[str]
    upper: Optional[str]

    def label(self):
        return f"temporal_filter(lower={self.lower}, upper={self.upper})"


@dataclass(frozen=True)
class Negate(Stage):
    def label(self):
        return "negate()"


@dataclass(frozen=True)
class Kernel(Stage):
    """A vectorised array kernel `fn(xp, cols) -> dict` (see README, "Kernels") with output
    schema `schema` (Spark DDL). Compared by identity of `fn`."""

    fn: Callable
    schema: str

    def label(self):
        return f"kernel({getattr(self.fn, '__name__', 'fn')} -> {self.schema})"


def check_stage_columns(columns: list[str], time_cols: list[str], stage: Stage) -> None:
    """The output columns of a linear stage, wherever it runs (Spark or Arrow): each time
    column and diff exactly once, at least one record column, record names unique ignoring
    case."""
    names = [c.lower() for c in columns]
    for reserved in (*time_cols, "diff"):
        if names.count(reserved) != 1:
            raise PlanError(f"{stage.label()}: output uses reserved column name '{reserved}'")
    recs = [c for c in columns if c not in time_cols and c != "diff"]
    if not recs:
        raise PlanError(f"{stage.label()}: produces no record columns")
    if len({c.lower() for c in recs}) != len(recs):
        raise PlanError(f"{stage.label()}: duplicate output column names {recs}")


def temporal_bound_error(stage: TemporalFilter, expr: str, type_name: str) -> PlanError:
    """A temporal_filter bound whose type (Spark's name for it) is not an integer."""
    return PlanError(f"{stage.label()}: bound '{expr}' has type {type_name}; "
                     f"rule: temporal bounds are integer times")


# --------------------------------------------------------------------------- nodes
@dataclass(frozen=True)
class Node:
    def children(self) -> tuple["Node", ...]:
        return ()

    def with_children(self, kids: tuple["Node", ...]) -> "Node":
        """The same operator over new inputs (rewrites rebuild plans with this)."""
        return self

    def label(self) -> str:  # pragma: no cover - every node overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class Input(Node):
    name: str
    schema: str
    key: tuple[str, ...] = ()  # a keyed (upsert) input's key columns (executor/inputs/tables.py)
    strict: bool = False  # refuses negative multiplicities

    def label(self):
        rules = (f" key={list(self.key)}" if self.key else "") + \
            (" strict" if self.strict else "")
        return f"Input {self.name} ({self.schema}){rules}"


@dataclass(frozen=True)
class Constant(Input):
    """Fixed records at time 0, an input the runner feeds itself (in the step that holds
    time 0): SQL makes a row from no rows with it (a global aggregate over an empty table).
    Every layer that reads inputs reads it as one."""

    rows: tuple[tuple, ...] = ()

    def label(self):
        return f"Constant {self.name} ({self.schema}) {list(self.rows)}"


def constants(roots) -> dict[str, "Constant"]:
    """The plan's constants by name."""
    return {n.name: n for n in topological(roots) if isinstance(n, Constant)}


@dataclass(frozen=True)
class Linear(Node):
    """A fused chain of join_function stages over one input."""

    input: Node
    stages: tuple[Stage, ...]

    def children(self):
        return (self.input,)

    def with_children(self, kids):
        return replace(self, input=kids[0])

    def label(self):
        return "Linear[" + " -> ".join(s.label() for s in self.stages) + "]"

    def followed_by(self, stages: tuple[Stage, ...]) -> "Linear":
        return Linear(self.input, self.stages + tuple(stages))


@dataclass(frozen=True)
class Concat(Node):
    inputs: tuple[Node, ...]

    def children(self):
        return self.inputs

    def with_children(self, kids):
        return replace(self, inputs=tuple(kids))

    def label(self):
        return "Concat"


@dataclass(frozen=True)
class Consolidate(Node):
    """Semantically the identity; physically sums diffs per (record, time) and drops zeros."""

    input: Node

    def children(self):
        return (self.input,)

    def with_children(self, kids):
        return replace(self, input=kids[0])

    def label(self):
        return "Consolidate"


# --------------------------------------------------------------------------- traversal
def arranged_input(node: Node) -> Optional[str]:
    """The input an arrangement holds through linear stages only (an index of that input,
    filtered and projected), else None: its records are derived (join outputs, reductions),
    the state a query keeps of its own (Materialize's measure of a dataflow's cost)."""
    while isinstance(node, (Arrange, Linear, Consolidate)):
        node = node.input
    return node.name if type(node) is Input else None


def topological(roots) -> list[Node]:
    """Every node reachable from `roots`, children before parents, each once."""
    seen: dict[Node, None] = {}

    def visit(n: Node):
        if n in seen:
            return
        for c in n.children():
            visit(c)
        seen[n] = None

    for r in roots:
        visit(r)
    return list(seen)


def consumers(roots) -> dict[Node, int]:
    """How many distinct parents (plus outputs) use each node: fusion may only swallow a
    node that nobody else reads."""
    counts: dict[Node, int] = {n: 0 for n in topological(roots)}
    for n in counts:
        for c in set(n.children()):
            counts[c] += 1
    for r in roots:
        counts[r] += 1
    return counts


def explain(outputs: dict[str, Node]) -> str:
    """The plan as an indented tree, one block per output; shared nodes are marked."""
    shared = {n for n, k in consumers(list(outputs.values())).items() if k > 1}
    lines = []

    def visit(n: Node, depth: int):
        mark = "  [shared]" if n in shared else ""
        lines.append("  " * depth + n.label() + mark)
        if isinstance(n, Iterate):
            visit(n.input, depth + 1)
            lines.append("  " * (depth + 1) + "body:")
            visit(n.body, depth + 2)
            return
        for c in n.children():
            visit(c, depth + 1)

    for name, node in outputs.items():
        lines.append(f"output {name}")
        visit(node, 1)
    return "\n".join(lines)


# --------------------------------------------------------------------------- stateful nodes
@dataclass(frozen=True)
class Arrange(Node):
    """The input indexed by `keys` (None: the whole record) as a shared trace. Equal Arrange
    nodes are one trace: every operator keyed alike reads the same arrangement."""

    input: Node
    keys: Optional[tuple[str, ...]]

    def children(self):
        return (self.input,)

    def with_children(self, kids):
        return replace(self, input=kids[0])

    def label(self):
        return f"Arrange[{'self' if self.keys is None else ', '.join(self.keys)}]"


BAND_OPS = ("<", "<=", ">", ">=", "=")


@dataclass(frozen=True)
class Band:
    """A join's comparison beyond its equal keys: the left's `column` `op` the right's
    `value` (SQL's: a NULL on either side satisfies nothing)."""

    column: str
    op: str
    value: str

    def __post_init__(self):
        if self.op not in BAND_OPS:
            raise PlanError(f"band: op {self.op!r} must be one of {', '.join(BAND_OPS)}")

    def label(self) -> str:
        return f"{self.column} {self.op} {self.value}"


@dataclass(frozen=True)
class Join(Node):
    """Inner equi-join of two arrangements on `on`: (on columns, left's others, right's
    others); time = lattice join, diff = product. With `band` (and left_order), only the pairs
    whose columns compare so: the left's records, each once per right record that bounds it
    (a scalar subquery's `x > (SELECT avg(...))`), which the driver maintains by range
    lookups in the left arranged by (on, band.column)."""

    left: Node
    right: Node
    on: tuple[str, ...]
    left_order: bool = False  # output = the left's columns in its order (semijoin)
    band: Optional[Band] = None

    def __post_init__(self):
        if self.band is not None and not self.left_order:
            raise PlanError("band join: output the left's columns (left_order)")

    def children(self):
        return (self.left, self.right)

    def with_children(self, kids):
        return replace(self, left=kids[0], right=kids[1])

    def label(self):
        band = "" if self.band is None else f"; {self.band.label()}"
        return f"Join[on {', '.join(self.on)}{band}]"


@dataclass(frozen=True)
class Reduction:
    """What a Reduce computes per key from the key's accumulated multiset."""

    kind: str  # count | sum | min | max | aggregate | distinct | threshold | top_k | kernel
    column: Optional[str] = None
    expr: Optional[str] = None
    k: Optional[int] = None
    fn: Optional[Callable] = None  # kernel: fn(xp, group, cols, count) (README "Reductions")
    schema: Optional[str] = None   # kernel: DDL of the columns fn returns
    # top_k: (expr, descending, nulls_first) per sort key of `expr` (plans/ordering.py);
    # ties are broken by the whole record ascending, nulls first
    order: tuple = ()
    # aggregate: (output name, count | sum | min | max, input column or None) per value, all
    # over one group in one reduction (SQL's GROUP BY list); count of None is count(*)
    parts: tuple = ()

    def label(self):
        if self.kind == "aggregate":
            text = ", ".join(f"{n}={k}({c or '*'})" for n, k, c in self.parts)
            return f"aggregate({text})"
        args = [a for a in (self.column, self.expr, self.k, self.schema) if a is not None]
        if self.fn is not None:
            args.insert(0, getattr(self.fn, "__name__", "kernel"))
        return f"{self.kind}({', '.join(map(str, args))})"

    def values(self) -> Optional[tuple[str, ...]]:
        """The value columns it emits after the key columns, or None where it emits the
        input's own records (distinct, threshold, top_k)."""
        if self.kind == "count":
            return ("count",)
        if self.kind in ("sum", "min", "max"):
            return (self.column,)
        if self.kind == "aggregate":
            return tuple(n for n, _, _ in self.parts)
        if self.kind == "kernel":
            return tuple(column_names(self.schema, "reduce schema"))
        return None

    def value_parts(self) -> tuple:
        """(output name, kind, column) per value of count, sum, min, max or an aggregate:
        the single-valued kinds as an aggregate of one value."""
        if self.kind == "aggregate":
            return self.parts
        return ((self.values()[0], self.kind, self.column),)


@dataclass(frozen=True)
class Reduce(Node):
    """A reduction per key of an arranged input, re-evaluated at every time its input
    changes, emitting differences."""

    input: Node  # an Arrange node keyed by `by` (or by the whole record)
    by: tuple[str, ...]
    reduction: Reduction

    def children(self):
        return (self.input,)

    def with_children(self, kids):
        return replace(self, input=kids[0])

    def label(self):
        return f"Reduce[{self.reduction.label()} by {', '.join(self.by) or '()'}]"


@dataclass(frozen=True)
class Imported(Node):
    """A live arrangement of another runner, attached without copying (flow.import_trace)."""

    name: str
    handle: object  # executor's TraceHandle; compared by identity

    def label(self):
        return f"Imported {self.name} [{', '.join(self.handle.keys)}]"


@dataclass(frozen=True)
class Query(Node):
    """A conjunctive query (plans/query.py) run as a worst-case optimal join: one delta rule
    per atom, variables bound in `order`. `inputs` holds one node per distinct relation,
    named by `relations`; atoms refer to relations by name."""

    inputs: tuple[Node, ...]
    relations: tuple[str, ...]
    query: "cq.Query"
    order: tuple[str, ...]

    def children(self):
        return self.inputs

    def with_children(self, kids):
        return replace(self, inputs=tuple(kids))

    def label(self):
        return f"Query[{self.query}; order {', '.join(self.order)}]"


# --------------------------------------------------------------------------- iteration
@dataclass(frozen=True)
class Variable(Node):
    """The loop variable of one Iterate scope: inside the body it is the collection as of
    the previous round (`scope` tells the iterates of a dataflow apart)."""

    scope: int

    def label(self):
        return f"Variable v{self.scope}"


@dataclass(frozen=True)
class Iterate(Node):
    """`variable` starts as `input` and becomes `body` (a plan over the variable and outer
    collections) round after round until nothing changes; the result is the fixed point.
    Inside the scope times gain an iteration coordinate. Children are the input and the
    outer nodes the body reads (they are built outside the scope and enter it at
    iteration 0), so the outer plan arranges and shares them like any other node."""

    input: Node
    variable: Variable
    body: Node

    def children(self):
        return (self.input,) + scope_of(self)[1]

    def with_children(self, kids):
        outer = scope_of(self)[1]
        swap = dict(zip(outer, kids[1:]))
        rebuilt: dict[Node, Node] = {}

        def rebuild(n: Node) -> Node:
            if n in swap:
                return swap[n]
            if n not in rebuilt:
                rebuilt[n] = n.with_children(tuple(rebuild(c) for c in n.children()))
            return rebuilt[n]

        return replace(self, input=kids[0], body=rebuild(self.body))

    def label(self):
        return f"Iterate[v{self.variable.scope}]"


@lru_cache(maxsize=256)
def scope_of(node: Iterate) -> tuple[list[Node], tuple[Node, ...]]:
    """(inner nodes, children before parents; outer nodes the inner ones read). A node is
    inner when it depends on the variable; everything else is outside the scope."""
    inner: dict[Node, bool] = {}

    def depends(n: Node) -> bool:
        if n not in inner:
            inner[n] = n == node.variable or any([depends(c) for c in n.children()])
        return inner[n]

    depends(node.body)
    inside = [n for n in topological([node.body]) if inner.get(n)]
    if not inside:
        return [], (node.body,)
    outer = {c: None for n in inside for c in n.children() if not inner[c]}
    return inside, tuple(outer)


def _hashed_once(cls: type) -> None:
    """Plans are looked up by node in every step (memos, schemas, traces), and a frozen
    dataclass hashes its whole sub-plan each time: each node keeps its hash after the first.
    The cache is dropped when a node is pickled (hashes of strings differ per process)."""
    fields_hash = cls.__dict__.get("__hash__")
    if fields_hash is None:
        return

    def __hash__(self) -> int:  # kept() inlined: a step hashes nodes hundreds of times
        h = self.__dict__.get("_hash")
        if h is None:
            h = fields_hash(self)
            object.__setattr__(self, "_hash", h)
        return h

    cls.__hash__ = __hash__


def kept(node, key: str, compute):
    """A value derived from a node alone (nodes are frozen): computed the first time it is
    asked for, then kept on the node under `key`."""
    value = node.__dict__.get(key)
    if value is None:
        value = compute(node)
        object.__setattr__(node, key, value)
    return value


def _node_getstate(self) -> dict:
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


Node.__getstate__ = _node_getstate


def _every_subclass(cls: type) -> list[type]:
    return [cls] + [s for sub in cls.__subclasses__() for s in _every_subclass(sub)]


for _cls in _every_subclass(Node):
    _hashed_once(_cls)
